// CPU kernels of depthwise_conv2d: the shared entry points (depthwise/entry.h)
// with two CPU launchers.
//   * DepthwiseLauncher, the kernel of labops::depthwise_conv2d and its
//     backward ops: whole planes in zero-bordered buffers, SIMD rows. Every
//     position and offset comes from a helper of depthwise/depthwise.h, see
//     Note [zero-bordered planes] and Note [flipped-kernel identity]. Its
//     forward is rung 2 (bordered_simd) of the forward's ladder, and runs
//     rung 1 when that is forced (forward_ladder, entry.h).
//   * DepthwiseTextbookLauncher, rung 1 (textbook) of the forward's ladder and
//     the kernel of the private labops::_depthwise_conv2d_textbook (forward and
//     gradients): the per-element bodies of depthwise/depthwise.h under
//     at::parallel_for, one call per element, as the generic CUDA kernels run
//     them. tests/test_depthwise.py and tests/test_ladder.py hold the fast path to it.
// Both split the work so that no two threads write the same element (outputs
// and input gradients by plane or element, weight and bias gradients by
// channel): deterministic, no locks.

#include <algorithm>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include "entry.h"
#include "../common/cpu/parallel.h"

namespace labops::depthwise {
using namespace labops::cpu;  // the shared CPU helpers: parallel.h, elementwise.h
namespace {

template <typename T>
using Vec = at::vec::Vectorized<T>;

// ---- SIMD primitives: element i of a row lives at src[i * s] ----

// cnt elements src[0], src[s], src[2s], ... in one vector (the rest zero).
template <typename T>
Vec<T> load_strided(const T* src, int64_t s, int64_t cnt) {
  constexpr int64_t V = Vec<T>::size();
  if (s == 1) return Vec<T>::loadu(src, cnt);
  if (s == 2) {  // two contiguous loads, keep the even lanes
    const int64_t n2 = 2 * cnt - 1;
    const Vec<T> a = Vec<T>::loadu(src, std::min(n2, V));
    const Vec<T> b = n2 > V ? Vec<T>::loadu(src + V, n2 - V) : Vec<T>(T(0));
    return at::vec::deinterleave2(a, b).first;
  }
  alignas(64) T lanes[V] = {};
  for (int64_t k = 0; k < cnt; ++k) lanes[k] = src[k * s];
  return Vec<T>::loadu(lanes);
}

// Row-of-taps MAC: acc[i] += sum_t w[t] * src[s*i + off[t]] for i < n, every
// tap of a correlation over a bordered buffer, one SIMD vector of outputs at a time.
template <typename T>
void correlate(T* acc, const T* src, int64_t s, int64_t n, const T* w, const int64_t* off,
               int64_t taps) {
  constexpr int64_t V = Vec<T>::size();
  for (int64_t i = 0; i < n; i += V) {
    const int64_t cnt = std::min(V, n - i);
    Vec<T> a = Vec<T>::loadu(acc + i, cnt);
    const T* base = src + s * i;
    for (int64_t t = 0; t < taps; ++t) {
      a = at::vec::fmadd(Vec<T>(w[t]), load_strided(base + off[t], s, cnt), a);
    }
    a.store(acc + i, cnt);
  }
}

// Row-of-taps dot: vacc[t] += g[i] * src[s*i + off[t]] lane-wise for i < n
// (summed across lanes at the end).
template <typename T>
void dot_taps(Vec<T>* vacc, const T* g, const T* src, int64_t s, int64_t n, const int64_t* off,
              int64_t taps) {
  constexpr int64_t V = Vec<T>::size();
  for (int64_t i = 0; i < n; i += V) {
    const int64_t cnt = std::min(V, n - i);
    const Vec<T> gv = Vec<T>::loadu(g + i, cnt);
    const T* base = src + s * i;
    for (int64_t t = 0; t < taps; ++t) vacc[t] = at::vec::fmadd(gv, load_strided(base + off[t], s, cnt), vacc[t]);
  }
}

template <typename T>
T lane_sum(const Vec<T>& v) {
  alignas(64) T lanes[Vec<T>::size()];
  v.store(lanes);
  T sum = T(0);
  for (int64_t k = 0; k < Vec<T>::size(); ++k) sum += lanes[k];
  return sum;
}

// ---- bordered planes (Note [zero-bordered planes]) ----

// A bordered plane with the offset of every flat tap from tap (0, 0) in it, as the kernels' loops read them.
struct TappedPlane : BorderedPlane {
  std::vector<int64_t> off;
  TappedPlane(const BorderedPlane& b, int64_t taps) : BorderedPlane(b), off(taps) {
    for (int64_t t = 0; t < taps; ++t) off[t] = tap_offset(t);
  }
};

// Copy a rows x cols plane into b's interior, converting to the buffer's type;
// the border stays as it was (zero).
template <typename T, typename scalar_t>
void fill_interior(T* buf, const BorderedPlane b, const scalar_t* plane, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) buf[b.at(r, c)] = static_cast<T>(plane[pixel(r, c, cols)]);
}

// Copy the rows x cols results out of a buffer of row pitch `pitch`.
template <typename scalar_t, typename T>
void store_plane(scalar_t* dst, const T* acc, int64_t rows, int64_t cols, int64_t pitch) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[pixel(r, c, cols)] = static_cast<scalar_t>(acc[pixel(r, c, pitch)]);
}

// Every output of a plane: acc (rows of `pitch`) += correlation of the
// bordered buffer with weights wk. Flat at stride 1, else row by row.
template <typename T>
void correlate_plane(T* acc, int64_t pitch, const T* buf, const TappedPlane& b, const T* wk, const Geometry& g) {
  if (flat_plane(g)) {
    correlate(acc, buf, 1, g.out_h * pitch, wk, b.off.data(), g.taps());
    return;
  }
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    correlate(acc + pixel<int64_t>(oh, 0, pitch), buf + b.row_start(oh, g.stride_h), g.stride_w, g.out_w,
              wk, b.off.data(), g.taps());
  }
}

// One body call per element (the bodies of depthwise/depthwise.h), as the generic
// CUDA kernels do: the readable path the fast one is tested against, and the
// forward's rung 1 (textbook) on the CPU.
struct DepthwiseTextbookLauncher {
  static bool has_nhwc_kernels(const Geometry&, at::ArrayRef<at::Tensor>) { return false; }
  static bool forward_has_nhwc_kernels(const Geometry&, at::ArrayRef<at::Tensor>, int) { return false; }

  // Rung 1 of the forward's ladder (forward_ladder, entry.h); `forced` is unused: this is the rung.
  template <typename scalar_t>
  static void forward(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* out,
                      const Geometry& g, int /*forced*/ = 1) {
    using acc_t = at::opmath_type<scalar_t>;
    at::parallel_for(0, g.batch * g.out_channels * g.out_plane(), grain_for(g.taps()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = static_cast<scalar_t>(forward_at<acc_t>(i, x, w, bias, g));
    });
  }

  template <typename scalar_t>
  static void backward_input(const scalar_t* grad_out, const scalar_t* w, scalar_t* grad_in,
                             const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    at::parallel_for(0, g.batch * g.in_channels * g.in_plane(), grain_for(g.taps() * g.multiplier),
                     [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        grad_in[i] = static_cast<scalar_t>(backward_input_at<acc_t>(i, grad_out, w, g));
    });
  }

  template <typename scalar_t>
  static void backward_weight(const scalar_t* grad_out, const scalar_t* x, scalar_t* grad_w,
                              const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    at::parallel_for(0, g.out_channels * g.taps(), grain_for(g.batch * g.out_plane()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        grad_w[i] = static_cast<scalar_t>(backward_weight_at<acc_t>(i, grad_out, x, g));
    });
  }

  template <typename scalar_t>
  static void backward_bias(const scalar_t* grad_out, scalar_t* grad_b, int64_t batch,
                            int64_t channels, int64_t plane) {
    using acc_t = at::opmath_type<scalar_t>;
    at::parallel_for(0, channels, grain_for(batch * plane), [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c)
        grad_b[c] = static_cast<scalar_t>(backward_bias_at<acc_t>(c, grad_out, batch, channels, plane));
    });
  }
};

struct DepthwiseLauncher {
  // No NHWC kernels: channels_last tensors are computed in NCHW, through
  // copies (Note [channels_last]).
  static bool has_nhwc_kernels(const Geometry&, at::ArrayRef<at::Tensor>) { return false; }
  static bool forward_has_nhwc_kernels(const Geometry&, at::ArrayRef<at::Tensor>, int) { return false; }

  // updateOutput. Rung 2 (bordered_simd), the default for every input: one output plane
  // (n, oc) per task item. Rung 1 (textbook) when forced: DepthwiseTextbookLauncher.
  template <typename scalar_t>
  static void forward(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* out,
                      const Geometry& g, int forced) {
    if (forward_ladder().run(c10::DeviceType::CPU, forced, 2, [](int) { return std::string(); }) == 1) {
      return DepthwiseTextbookLauncher::forward(x, w, bias, out, g);
    }
    using acc_t = at::opmath_type<scalar_t>;
    const TappedPlane xb(padded_input_plane(g), g.taps());
    const int64_t acc_pitch = output_pitch(g, xb);
    at::parallel_for(0, g.batch * g.out_channels, grain_for(g.out_plane() * g.taps()),
                     [&](int64_t begin, int64_t end) {
      std::vector<acc_t> xbuf(xb.size(), acc_t(0)), acc(g.out_h * acc_pitch), wk(g.taps());
      for (int64_t p = begin; p < end; ++p) {
        const Split<int64_t> nc = split_index(p, g.out_channels);  // (n, oc)
        fill_interior(xbuf.data(), xb, x + input_plane_offset(nc.outer, input_channel(nc.inner, g.multiplier), g),
                      g.in_h, g.in_w);
        const scalar_t* wsrc = weights_of(w, nc.inner, g.taps());
        for (int64_t t = 0; t < g.taps(); ++t) wk[t] = static_cast<acc_t>(wsrc[t]);
        std::fill(acc.begin(), acc.end(), bias ? static_cast<acc_t>(bias[nc.inner]) : acc_t(0));
        correlate_plane(acc.data(), acc_pitch, xbuf.data(), xb, wk.data(), g);
        store_plane(out + output_plane_offset(nc.outer, nc.inner, g), acc.data(), g.out_h, g.out_w, acc_pitch);
      }
    });
  }

  // updateGradInput as a gather: each output channel's grad_output plane is
  // spread into a zeroed buffer and correlated with the flipped kernel at
  // stride 1 (Note [flipped-kernel identity]); one input plane per task item.
  template <typename scalar_t>
  static void backward_input(const scalar_t* grad_out, const scalar_t* w, scalar_t* grad_in,
                             const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    const TappedPlane gb(spread_grad_plane(g), g.taps());
    // where each output row / column goes in the buffer (-1: dropped)
    std::vector<int64_t> row_at(g.out_h), col_at(g.out_w);
    for (int64_t oh = 0; oh < g.out_h; ++oh)
      row_at[oh] = spread_coord(oh, g.k_h, g.stride_h, g.pad_h, g.dil_h, gb.rows);
    for (int64_t ow = 0; ow < g.out_w; ++ow)
      col_at[ow] = spread_coord(ow, g.k_w, g.stride_w, g.pad_w, g.dil_w, gb.pitch);
    at::parallel_for(0, g.batch * g.in_channels,
                     grain_for(g.in_plane() * g.taps() * g.multiplier),
                     [&](int64_t begin, int64_t end) {
      std::vector<acc_t> gbuf(gb.size(), acc_t(0)), acc(g.in_h * gb.pitch), wf(g.taps());
      for (int64_t p = begin; p < end; ++p) {
        const Split<int64_t> nc = split_index(p, g.in_channels);  // (n, c)
        std::fill(acc.begin(), acc.end(), acc_t(0));
        for (int64_t j = 0; j < g.multiplier; ++j) {
          const int64_t oc = output_channel(nc.inner, j, g.multiplier);
          const scalar_t* plane = grad_out + output_plane_offset(nc.outer, oc, g);
          for (int64_t oh = 0; oh < g.out_h; ++oh) {
            if (row_at[oh] < 0) continue;
            acc_t* dst = gbuf.data() + gb.at(row_at[oh], 0);  // spread row; columns at col_at
            for (int64_t ow = 0; ow < g.out_w; ++ow)
              if (col_at[ow] >= 0) dst[col_at[ow]] = static_cast<acc_t>(plane[pixel(oh, ow, g.out_w)]);
          }
          const scalar_t* wsrc = weights_of(w, oc, g.taps());
          for (int64_t t = 0; t < g.taps(); ++t)
            wf[t] = static_cast<acc_t>(wsrc[flipped_tap(t, g.taps())]);
          correlate(acc.data(), gbuf.data(), 1, g.in_h * gb.pitch, wf.data(), gb.off.data(), g.taps());
        }
        store_plane(grad_in + input_plane_offset(nc.outer, nc.inner, g), acc.data(), g.in_h, g.in_w, gb.pitch);
      }
    });
  }

  // accGradParameters (weight): grad_w[oc, tap] = sum over (n, oh, ow) of
  // grad_out * the bordered input the tap read; one output channel per task item.
  template <typename scalar_t>
  static void backward_weight(const scalar_t* grad_out, const scalar_t* x, scalar_t* grad_w,
                              const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    const TappedPlane xb(padded_input_plane(g), g.taps());
    // grad_out copied to rows of output_pitch (flat: the extra columns stay zero)
    const int64_t gpitch = output_pitch(g, xb);
    const bool flat = flat_plane(g);
    at::parallel_for(0, g.out_channels, grain_for(g.batch * g.out_plane() * g.taps()),
                     [&](int64_t begin, int64_t end) {
      std::vector<acc_t> xbuf(xb.size(), acc_t(0)), gbuf(g.out_h * gpitch, acc_t(0));
      std::vector<Vec<acc_t>> vacc(g.taps());
      for (int64_t oc = begin; oc < end; ++oc) {
        std::fill(vacc.begin(), vacc.end(), Vec<acc_t>(acc_t(0)));
        for (int64_t n = 0; n < g.batch; ++n) {
          fill_interior(xbuf.data(), xb, x + input_plane_offset(n, input_channel(oc, g.multiplier), g), g.in_h, g.in_w);
          const scalar_t* plane = grad_out + output_plane_offset(n, oc, g);
          for (int64_t oh = 0; oh < g.out_h; ++oh)
            for (int64_t ow = 0; ow < g.out_w; ++ow)
              gbuf[pixel(oh, ow, gpitch)] = static_cast<acc_t>(plane[pixel(oh, ow, g.out_w)]);
          if (flat) {
            dot_taps(vacc.data(), gbuf.data(), xbuf.data(), 1, g.out_h * gpitch, xb.off.data(), g.taps());
          } else {
            for (int64_t oh = 0; oh < g.out_h; ++oh) {
              dot_taps(vacc.data(), gbuf.data() + pixel<int64_t>(oh, 0, gpitch),
                       xbuf.data() + xb.row_start(oh, g.stride_h), g.stride_w, g.out_w, xb.off.data(), g.taps());
            }
          }
        }
        scalar_t* dst = weights_of(grad_w, oc, g.taps());
        for (int64_t t = 0; t < g.taps(); ++t) dst[t] = static_cast<scalar_t>(lane_sum(vacc[t]));
      }
    });
  }

  // accGradParameters (bias): each channel's sum of grad_output over (n, oh, ow).
  template <typename scalar_t>
  static void backward_bias(const scalar_t* grad_out, scalar_t* grad_b, int64_t batch,
                            int64_t channels, int64_t plane) {
    using acc_t = at::opmath_type<scalar_t>;
    constexpr int64_t V = Vec<acc_t>::size();
    at::parallel_for(0, channels, grain_for(batch * plane), [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        Vec<acc_t> sum(acc_t(0));
        for (int64_t n = 0; n < batch; ++n) {
          const scalar_t* src = grad_out + plane_offset(n, c, channels, plane);
          if constexpr (std::is_same_v<acc_t, scalar_t>) {
            for (int64_t i = 0; i < plane; i += V) sum = sum + Vec<acc_t>::loadu(src + i, std::min(V, plane - i));
          } else {
            acc_t s = acc_t(0);
            for (int64_t i = 0; i < plane; ++i) s += static_cast<acc_t>(src[i]);
            sum = sum + Vec<acc_t>::loadu(&s, 1);
          }
        }
        grad_b[c] = static_cast<scalar_t>(lane_sum(sum));
      }
    });
  }
};

// labops::_depthwise_conv2d_textbook: forward and the three gradients through
// DepthwiseTextbookLauncher, for the test that holds the fast path to the bodies.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> depthwise_textbook(
    const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    const at::Tensor& grad_output, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef dilation) {
  using Ops = depthwise::Entry<DepthwiseTextbookLauncher>;
  return {Ops::forward(x, weight, bias, stride, padding, dilation),
          Ops::backward_input(grad_output, weight, x.sizes(), stride, padding, dilation),
          Ops::backward_weight(grad_output, x, weight.sizes(), stride, padding, dilation),
          Ops::backward_bias(grad_output)};
}

}  // namespace
}  // namespace labops::depthwise

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::depthwise::register_kernels<labops::depthwise::Entry<labops::depthwise::DepthwiseLauncher>>(m);
  m.impl("_depthwise_conv2d_textbook", &labops::depthwise::depthwise_textbook);
}
