// CPU kernels of depthwise_conv2d: the shared entry points (ops/depthwise_ops.h)
// with a CPU launcher.
//
// Work is split over whole planes with at::parallel_for: forward over the
// N*C_out output planes, backward-input over the N*C_in input planes (each
// plane gathers from its m output planes, so no two threads write the same
// element), backward-weight and backward-bias over the output channels (each
// thread owns its channel's sums: deterministic, no locks).
//
// Inside a plane the loops run a row at a time: for one tap, the outputs that
// tap can reach form one contiguous range [lo, hi) (tap_output_range), so the
// padding tests happen once per row, and the inner loop is a SIMD axpy or dot
// over at::vec::Vectorized when the stride is 1.
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
using ops::depthwise::mac;
using ops::depthwise::output_coord;
using ops::depthwise::output_plane_offset;
using ops::depthwise::tap_output_range;

// Multiply-adds per parallel_for task below which a task is not worth a thread.
constexpr int64_t kGrainWork = 1 << 15;

int64_t grain_for(int64_t work_per_item) {
  return std::max<int64_t>(1, kGrainWork / std::max<int64_t>(1, work_per_item));
}

// y[i * ys] += a * x[i * xs] for i < n. SIMD when both strides are 1 and the
// data is already in the accumulation type (float, double).
template <typename acc_t, typename scalar_t>
void axpy(acc_t* y, int64_t ys, const scalar_t* x, int64_t xs, acc_t a, int64_t n) {
  if constexpr (std::is_same_v<acc_t, scalar_t>) {
    if (xs == 1 && ys == 1) {
      using Vec = at::vec::Vectorized<acc_t>;
      const Vec va(a);
      int64_t i = 0;
      for (; i + Vec::size() <= n; i += Vec::size()) {
        at::vec::fmadd(va, Vec::loadu(x + i), Vec::loadu(y + i)).store(y + i);
      }
      if (i < n) {
        const int64_t rest = n - i;
        at::vec::fmadd(va, Vec::loadu(x + i, rest), Vec::loadu(y + i, rest)).store(y + i, rest);
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) mac(y[i * ys], a, x[i * xs]);
}

// sum_i a[i] * b[i * bs] (b == nullptr: sum_i a[i]), in acc_t.
template <typename acc_t, typename scalar_t>
acc_t dot(const scalar_t* a, const scalar_t* b, int64_t bs, int64_t n) {
  acc_t acc = acc_t(0);
  int64_t i = 0;
  if constexpr (std::is_same_v<acc_t, scalar_t>) {
    if (bs == 1 || b == nullptr) {
      using Vec = at::vec::Vectorized<acc_t>;
      Vec s(acc_t(0));
      for (; i + Vec::size() <= n; i += Vec::size()) {
        s = b ? at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), s) : s + Vec::loadu(a + i);
      }
      if (i < n) {  // partial loads fill the missing lanes with zeros
        const int64_t rest = n - i;
        s = b ? at::vec::fmadd(Vec::loadu(a + i, rest), Vec::loadu(b + i, rest), s)
              : s + Vec::loadu(a + i, rest);
        i = n;
      }
      alignas(64) acc_t lanes[Vec::size()];
      s.store(lanes);
      for (int k = 0; k < Vec::size(); ++k) acc += lanes[k];
    }
  }
  for (; i < n; ++i) {
    if (b) {
      mac(acc, a[i], b[i * bs]);
    } else {
      acc += static_cast<acc_t>(a[i]);
    }
  }
  return acc;
}

// For every kw, the outputs [lo, hi) along W that tap kw reaches inside the input.
struct TapRanges {
  std::vector<int64_t> lo, hi;
  explicit TapRanges(const Geometry& g) : lo(g.k_w), hi(g.k_w) {
    for (int64_t kw = 0; kw < g.k_w; ++kw) {
      tap_output_range<int64_t>(kw, g.stride_w, g.pad_w, g.dil_w, g.in_w, g.out_w, lo[kw], hi[kw]);
    }
  }
};

struct DepthwiseLauncher {
  // updateOutput: one output plane (n, oc) per task item, a row at a time.
  template <typename scalar_t>
  static void forward(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* out,
                      const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    const TapRanges taps(g);
    at::parallel_for(0, g.batch * g.out_channels, grain_for(g.out_plane() * g.taps()),
                     [&](int64_t begin, int64_t end) {
      std::vector<acc_t> row(g.out_w);
      for (int64_t p = begin; p < end; ++p) {
        const int64_t n = p / g.out_channels, oc = p % g.out_channels;
        const scalar_t* plane = x + input_plane_offset(n, oc / g.multiplier, g);
        const scalar_t* wk = w + oc * g.taps();
        scalar_t* dst = out + output_plane_offset(n, oc, g);
        const acc_t init = bias ? static_cast<acc_t>(bias[oc]) : acc_t(0);
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          std::fill(row.begin(), row.end(), init);
          for (int64_t kh = 0; kh < g.k_h; ++kh) {
            const int64_t ih = input_coord(oh, kh, g.stride_h, g.pad_h, g.dil_h);
            if (ih < 0 || ih >= g.in_h) continue;
            const scalar_t* src = plane + ih * g.in_w;
            for (int64_t kw = 0; kw < g.k_w; ++kw) {
              const int64_t lo = taps.lo[kw], hi = taps.hi[kw];
              if (lo >= hi) continue;
              axpy(row.data() + lo, 1, src + input_coord(lo, kw, g.stride_w, g.pad_w, g.dil_w),
                   g.stride_w, static_cast<acc_t>(wk[kh * g.k_w + kw]), hi - lo);
            }
          }
          for (int64_t ow = 0; ow < g.out_w; ++ow) dst[oh * g.out_w + ow] = static_cast<scalar_t>(row[ow]);
        }
      }
    });
  }

  // updateGradInput as a gather: input row ih of plane (n, c) collects, for each
  // of its m output channels and each tap kh, output row oh = output_coord(ih, kh)
  // (if any); along the row, tap kw sends output ow to input input_coord(ow, kw).
  template <typename scalar_t>
  static void backward_input(const scalar_t* grad_out, const scalar_t* w, scalar_t* grad_in,
                             const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    const TapRanges taps(g);
    at::parallel_for(0, g.batch * g.in_channels,
                     grain_for(g.in_plane() * g.taps() * g.multiplier / (g.stride_h * g.stride_w)),
                     [&](int64_t begin, int64_t end) {
      std::vector<acc_t> row(g.in_w);
      for (int64_t p = begin; p < end; ++p) {
        const int64_t n = p / g.in_channels, c = p % g.in_channels;
        scalar_t* dst = grad_in + input_plane_offset(n, c, g);
        for (int64_t ih = 0; ih < g.in_h; ++ih) {
          std::fill(row.begin(), row.end(), acc_t(0));
          for (int64_t j = 0; j < g.multiplier; ++j) {
            const int64_t oc = c * g.multiplier + j;
            const scalar_t* plane = grad_out + output_plane_offset(n, oc, g);
            const scalar_t* wk = w + oc * g.taps();
            for (int64_t kh = 0; kh < g.k_h; ++kh) {
              const int64_t oh = output_coord(ih, kh, g.stride_h, g.pad_h, g.dil_h, g.out_h);
              if (oh < 0) continue;
              const scalar_t* src = plane + oh * g.out_w;
              for (int64_t kw = 0; kw < g.k_w; ++kw) {
                const int64_t lo = taps.lo[kw], hi = taps.hi[kw];
                if (lo >= hi) continue;
                axpy(row.data() + input_coord(lo, kw, g.stride_w, g.pad_w, g.dil_w), g.stride_w,
                     src + lo, 1, static_cast<acc_t>(wk[kh * g.k_w + kw]), hi - lo);
              }
            }
          }
          for (int64_t iw = 0; iw < g.in_w; ++iw) dst[ih * g.in_w + iw] = static_cast<scalar_t>(row[iw]);
        }
      }
    });
  }

  // accGradParameters (weight): each output channel's kH*kW sums over (n, oh, ow),
  // a row of dot products at a time.
  template <typename scalar_t>
  static void backward_weight(const scalar_t* grad_out, const scalar_t* x, scalar_t* grad_w,
                              const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    const TapRanges taps(g);
    at::parallel_for(0, g.out_channels, grain_for(g.batch * g.out_plane() * g.taps()),
                     [&](int64_t begin, int64_t end) {
      std::vector<acc_t> acc(g.taps());
      for (int64_t oc = begin; oc < end; ++oc) {
        std::fill(acc.begin(), acc.end(), acc_t(0));
        for (int64_t n = 0; n < g.batch; ++n) {
          const scalar_t* gplane = grad_out + output_plane_offset(n, oc, g);
          const scalar_t* xplane = x + input_plane_offset(n, oc / g.multiplier, g);
          for (int64_t oh = 0; oh < g.out_h; ++oh) {
            const scalar_t* grow = gplane + oh * g.out_w;
            for (int64_t kh = 0; kh < g.k_h; ++kh) {
              const int64_t ih = input_coord(oh, kh, g.stride_h, g.pad_h, g.dil_h);
              if (ih < 0 || ih >= g.in_h) continue;
              const scalar_t* xrow = xplane + ih * g.in_w;
              for (int64_t kw = 0; kw < g.k_w; ++kw) {
                const int64_t lo = taps.lo[kw], hi = taps.hi[kw];
                if (lo >= hi) continue;
                acc[kh * g.k_w + kw] += dot<acc_t>(
                    grow + lo, xrow + input_coord(lo, kw, g.stride_w, g.pad_w, g.dil_w), g.stride_w,
                    hi - lo);
              }
            }
          }
        }
        for (int64_t t = 0; t < g.taps(); ++t) grad_w[oc * g.taps() + t] = static_cast<scalar_t>(acc[t]);
      }
    });
  }

  // accGradParameters (bias): each channel's sum of grad_output over (n, oh, ow).
  template <typename scalar_t>
  static void backward_bias(const scalar_t* grad_out, scalar_t* grad_b, int64_t batch,
                            int64_t channels, int64_t plane) {
    using acc_t = at::opmath_type<scalar_t>;
    at::parallel_for(0, channels, grain_for(batch * plane), [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        acc_t acc = acc_t(0);
        for (int64_t n = 0; n < batch; ++n) {
          acc += dot<acc_t>(grad_out + (n * channels + c) * plane, static_cast<const scalar_t*>(nullptr),
                            1, plane);
        }
        grad_b[c] = static_cast<scalar_t>(acc);
      }
    });
  }
};

}  // namespace
}  // namespace labops::cpu

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::ops::depthwise::DepthwiseOps<labops::cpu::DepthwiseLauncher>::register_kernels(m);
}
