// CPU kernels of depthwise_conv2d: the shared entry points (ops/depthwise_ops.h)
// with a CPU launcher.
//
// Work is split over whole planes with at::parallel_for: forward over the
// N*C_out output planes, backward-input over the N*C_in input planes (each
// plane gathers from its m output planes, so no two threads write the same
// element), backward-weight and backward-bias over the output channels (each
// thread owns its channel's sums: deterministic, no locks).
//
// Inside a plane, padding tests would cost more than the arithmetic. So each
// plane is first copied into a zero-bordered buffer in the accumulation type
// (float for half/bfloat16), after which every tap of every output is valid
// and a tap is one SIMD multiply-add over a whole row -- or, with stride 1,
// over the whole plane at once: with the buffer's row pitch P, output (oh, ow)
// at flat index oh*P + ow reads buffer element (oh*P + ow) + kh*dH*P + kw*dW,
// so one flat loop covers every row (the P - outW extra columns per row are
// computed and dropped). That keeps 7x7 planes as busy as 56x56 ones.
//   forward:         out  = correlate(padded x, w)
//   backward-input:  grad_in = correlate(grad_out spread out with zeros between
//                    strides and padded by d*(k-1) - p, w flipped): the gather
//   backward-weight: grad_w[tap] = dot(grad_out, padded x shifted by the tap)

#include <algorithm>
#include <type_traits>
#include <vector>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include "../ops/depthwise_ops.h"

namespace labops::cpu {
namespace {

using ops::depthwise::Geometry;
using ops::depthwise::input_coord;
using ops::depthwise::input_plane_offset;
using ops::depthwise::output_plane_offset;

template <typename T>
using Vec = at::vec::Vectorized<T>;

// Multiply-adds per parallel_for task below which a task is not worth a thread.
constexpr int64_t kGrainWork = 1 << 15;

int64_t grain_for(int64_t work_per_item) {
  return std::max<int64_t>(1, kGrainWork / std::max<int64_t>(1, work_per_item));
}

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

// acc[i] += sum_t w[t] * src[s*i + off[t]] for i < n: every tap of a
// correlation over a zero-bordered buffer, one SIMD vector of outputs at a time.
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

// vacc[t] += g[i] * src[s*i + off[t]] lane-wise for i < n (summed across lanes later).
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

// The input plane with its zero padding: buffer row oh*sH + kh*dH is input row
// input_coord(oh, kh) (shifted by pad_h), and likewise along W.
struct PaddedInput {
  int64_t rows, pitch, size;
  explicit PaddedInput(const Geometry& g)
      : rows(g.in_h + 2 * g.pad_h), pitch(g.in_w + 2 * g.pad_w) {
    // slack: flat loops run up to (kW-1)*dW past the last row; stride-2 loads read 2 vectors
    size = rows * pitch + (g.k_w - 1) * g.dil_w + 4 * 64;
  }
  // offset of tap (kh, kw) from the buffer position of output (0, 0)
  std::vector<int64_t> tap_offsets(const Geometry& g) const {
    std::vector<int64_t> off(g.taps());
    for (int64_t kh = 0; kh < g.k_h; ++kh)
      for (int64_t kw = 0; kw < g.k_w; ++kw) off[kh * g.k_w + kw] = kh * g.dil_h * pitch + kw * g.dil_w;
    return off;
  }
  // copy plane (in_h x in_w) inside the border; the border stays zero
  template <typename T, typename scalar_t>
  void fill(T* buf, const scalar_t* plane, const Geometry& g) const {
    for (int64_t ih = 0; ih < g.in_h; ++ih) {
      T* dst = buf + (ih + g.pad_h) * pitch + g.pad_w;
      const scalar_t* src = plane + ih * g.in_w;
      for (int64_t iw = 0; iw < g.in_w; ++iw) dst[iw] = static_cast<T>(src[iw]);
    }
  }
};

struct DepthwiseLauncher {
  // updateOutput: one output plane (n, oc) per task item.
  template <typename scalar_t>
  static void forward(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* out,
                      const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    const PaddedInput pad(g);
    const std::vector<int64_t> off = pad.tap_offsets(g);
    // stride 1: the whole plane is one flat loop over rows of pitch P
    const bool flat = g.stride_h == 1 && g.stride_w == 1;
    const int64_t acc_pitch = flat ? pad.pitch : g.out_w;
    at::parallel_for(0, g.batch * g.out_channels, grain_for(g.out_plane() * g.taps()),
                     [&](int64_t begin, int64_t end) {
      std::vector<acc_t> xbuf(pad.size, acc_t(0)), acc(g.out_h * acc_pitch), wk(g.taps());
      for (int64_t p = begin; p < end; ++p) {
        const int64_t n = p / g.out_channels, oc = p % g.out_channels;
        pad.fill(xbuf.data(), x + input_plane_offset(n, oc / g.multiplier, g), g);
        for (int64_t t = 0; t < g.taps(); ++t) wk[t] = static_cast<acc_t>(w[oc * g.taps() + t]);
        std::fill(acc.begin(), acc.end(), bias ? static_cast<acc_t>(bias[oc]) : acc_t(0));
        if (flat) {
          correlate(acc.data(), xbuf.data(), 1, g.out_h * acc_pitch, wk.data(), off.data(), g.taps());
        } else {
          for (int64_t oh = 0; oh < g.out_h; ++oh) {
            correlate(acc.data() + oh * acc_pitch, xbuf.data() + oh * g.stride_h * pad.pitch,
                      g.stride_w, g.out_w, wk.data(), off.data(), g.taps());
          }
        }
        scalar_t* dst = out + output_plane_offset(n, oc, g);
        for (int64_t oh = 0; oh < g.out_h; ++oh)
          for (int64_t ow = 0; ow < g.out_w; ++ow)
            dst[oh * g.out_w + ow] = static_cast<scalar_t>(acc[oh * acc_pitch + ow]);
      }
    });
  }

  // updateGradInput as a gather. Put grad_out[oh, ow] at buffer position
  // (input_coord(oh, kH-1), input_coord(ow, kW-1)) -- zeros between strides and
  // around -- then input (ih, iw) reads buffer (ih + (kH-1-kh)*dH, iw + (kW-1-kw)*dW)
  // for tap (kh, kw): a stride-1 correlation with the flipped kernel that, for each
  // tap, lands exactly on output oh = output_coord(ih, kh) or on a zero.
  template <typename scalar_t>
  static void backward_input(const scalar_t* grad_out, const scalar_t* w, scalar_t* grad_in,
                             const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t rows = g.in_h + (g.k_h - 1) * g.dil_h, pitch = g.in_w + (g.k_w - 1) * g.dil_w;
    const int64_t size = rows * pitch + (g.k_w - 1) * g.dil_w + 64;
    std::vector<int64_t> off(g.taps());
    for (int64_t kh = 0; kh < g.k_h; ++kh)
      for (int64_t kw = 0; kw < g.k_w; ++kw) off[kh * g.k_w + kw] = kh * g.dil_h * pitch + kw * g.dil_w;
    // where each output row / column goes in the buffer (-1: cropped away when padding > dH*(kH-1))
    std::vector<int64_t> row_at(g.out_h), col_at(g.out_w);
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const int64_t a = input_coord(oh, g.k_h - 1, g.stride_h, g.pad_h, g.dil_h);
      row_at[oh] = (a >= 0 && a < rows) ? a : -1;
    }
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const int64_t b = input_coord(ow, g.k_w - 1, g.stride_w, g.pad_w, g.dil_w);
      col_at[ow] = (b >= 0 && b < pitch) ? b : -1;
    }
    at::parallel_for(0, g.batch * g.in_channels,
                     grain_for(g.in_plane() * g.taps() * g.multiplier),
                     [&](int64_t begin, int64_t end) {
      std::vector<acc_t> gbuf(size, acc_t(0)), acc(g.in_h * pitch), wf(g.taps());
      for (int64_t p = begin; p < end; ++p) {
        const int64_t n = p / g.in_channels, c = p % g.in_channels;
        std::fill(acc.begin(), acc.end(), acc_t(0));
        for (int64_t j = 0; j < g.multiplier; ++j) {
          const int64_t oc = c * g.multiplier + j;
          const scalar_t* plane = grad_out + output_plane_offset(n, oc, g);
          for (int64_t oh = 0; oh < g.out_h; ++oh) {
            if (row_at[oh] < 0) continue;
            acc_t* dst = gbuf.data() + row_at[oh] * pitch;
            for (int64_t ow = 0; ow < g.out_w; ++ow)
              if (col_at[ow] >= 0) dst[col_at[ow]] = static_cast<acc_t>(plane[oh * g.out_w + ow]);
          }
          for (int64_t t = 0; t < g.taps(); ++t)  // flipped: tap t' uses w[kH*kW - 1 - t']
            wf[t] = static_cast<acc_t>(w[oc * g.taps() + g.taps() - 1 - t]);
          correlate(acc.data(), gbuf.data(), 1, g.in_h * pitch, wf.data(), off.data(), g.taps());
        }
        scalar_t* dst = grad_in + input_plane_offset(n, c, g);
        for (int64_t ih = 0; ih < g.in_h; ++ih)
          for (int64_t iw = 0; iw < g.in_w; ++iw)
            dst[ih * g.in_w + iw] = static_cast<scalar_t>(acc[ih * pitch + iw]);
      }
    });
  }

  // accGradParameters (weight): grad_w[oc, tap] = sum over (n, oh, ow) of
  // grad_out * the padded input the tap read; one output channel per task item.
  template <typename scalar_t>
  static void backward_weight(const scalar_t* grad_out, const scalar_t* x, scalar_t* grad_w,
                              const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    const PaddedInput pad(g);
    const std::vector<int64_t> off = pad.tap_offsets(g);
    const bool flat = g.stride_h == 1 && g.stride_w == 1;
    // grad_out copied to rows of pitch P (flat: extra columns stay zero) or out_w
    const int64_t gpitch = flat ? pad.pitch : g.out_w;
    at::parallel_for(0, g.out_channels, grain_for(g.batch * g.out_plane() * g.taps()),
                     [&](int64_t begin, int64_t end) {
      std::vector<acc_t> xbuf(pad.size, acc_t(0)), gbuf(g.out_h * gpitch, acc_t(0));
      std::vector<Vec<acc_t>> vacc(g.taps());
      for (int64_t oc = begin; oc < end; ++oc) {
        std::fill(vacc.begin(), vacc.end(), Vec<acc_t>(acc_t(0)));
        for (int64_t n = 0; n < g.batch; ++n) {
          pad.fill(xbuf.data(), x + input_plane_offset(n, oc / g.multiplier, g), g);
          const scalar_t* plane = grad_out + output_plane_offset(n, oc, g);
          for (int64_t oh = 0; oh < g.out_h; ++oh)
            for (int64_t ow = 0; ow < g.out_w; ++ow)
              gbuf[oh * gpitch + ow] = static_cast<acc_t>(plane[oh * g.out_w + ow]);
          if (flat) {
            dot_taps(vacc.data(), gbuf.data(), xbuf.data(), 1, g.out_h * gpitch, off.data(), g.taps());
          } else {
            for (int64_t oh = 0; oh < g.out_h; ++oh) {
              dot_taps(vacc.data(), gbuf.data() + oh * gpitch, xbuf.data() + oh * g.stride_h * pad.pitch,
                       g.stride_w, g.out_w, off.data(), g.taps());
            }
          }
        }
        for (int64_t t = 0; t < g.taps(); ++t) grad_w[oc * g.taps() + t] = static_cast<scalar_t>(lane_sum(vacc[t]));
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
          const scalar_t* src = grad_out + (n * channels + c) * plane;
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

}  // namespace
}  // namespace labops::cpu

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::ops::depthwise::DepthwiseOps<labops::cpu::DepthwiseLauncher>::register_kernels(m);
}
