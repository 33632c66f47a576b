// CPU kernels for batch normalization: the bodies of batch_norm/batch_norm.h inside at::parallel_for
// loops, the entry points of batch_norm/entry.h.
//
// The reductions (the statistics, the parameter gradients) give each task whole channels: a channel's
// sums are then one thread's, in a fixed order, and no partial sums need adding up across threads.
//
// Forward, two rungs (forward_ladder in entry.h, Note [the ladder] in common/ladder.h):
//   1 textbook: each task takes whole channels and runs channel_statistics (batch_norm.h: the values
//     one at a time, summed in double), then y one value at a time.
//   2 chunked_simd, the default: the statistics in chunks (sums_of_channel), then y plane by plane
//     (whole planes (n, c) per task); float and double run the bodies on at::vec::Vectorized lanes
//     (each lane keeps its own partial sums, added at the end of the chunk), float16 and bfloat16
//     one value at a time in float.
// The backward (grad_sums, grad_input) runs as rung 2 does.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include "../common/cpu/parallel.h"
#include "entry.h"

namespace labops::batch_norm {
namespace {

template <typename scalar_t>
constexpr bool kVectorized = std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>;

// f(c) for every channel, whole channels per task.
template <typename F>
void for_each_channel(const Shape& s, const F& f) {
  at::parallel_for(0, s.channels, cpu::grain_for(s.count()), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) f(c);
  });
}

// f(c, offset of the plane's first value) for every plane (n, c), whole planes per task.
template <typename F>
void for_each_plane(const Shape& s, const F& f) {
  at::parallel_for(0, s.batch * s.channels, cpu::grain_for(s.plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) f(p % s.channels, p * s.plane);
  });
}

// One value's (or one vector's) share of a channel's two sums: of g and g (x - center) for the
// parameter gradients (kGrad), of d = x - center and d^2 for the statistics.
template <bool kGrad, typename T>
void add_to_sums(T& a, T& b, T x, T g, T center) {
  if constexpr (kGrad) {
    add_to_grad_sums(a, b, g, x, center);
  } else {
    add_to_moments(a, b, x, center);
  }
}

// Cascade summation: values are summed in acc_t in chunks of kChunk, and the chunks' sums in double.
// One float running sum over a channel of 16384 values lost 1e-6 of the mean and 3e-5 of the variance
// to rounding, past float32's tolerances; ATen's CPU kernels accumulate float in double for the same
// reason (at::acc_type).
constexpr int64_t kChunk = 256;

template <typename scalar_t>
scalar_t sum_of_lanes(const at::vec::Vectorized<scalar_t>& v) {
  scalar_t lanes[at::vec::Vectorized<scalar_t>::size()];
  v.store(lanes);
  scalar_t total = 0;
  for (scalar_t lane : lanes) total += lane;
  return total;
}

// Channel c's two sums (add_to_sums), its planes in order, each in chunks of kChunk values. float and
// double run the chunks on SIMD lanes; grad is only read with kGrad.
template <bool kGrad, typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
std::pair<acc_t, acc_t> sums_of_channel(const Shape& s, const scalar_t* x, const scalar_t* grad, int64_t c,
                                        acc_t center) {
  double total_a = 0.0, total_b = 0.0;
  for (int64_t n = 0; n < s.batch; ++n) {
    const int64_t first = plane_index(n, c, s.channels) * s.plane;
    for (int64_t start = 0; start < s.plane; start += kChunk) {
      const int64_t end = std::min(s.plane, start + kChunk);
      acc_t chunk_a = acc_t(0), chunk_b = acc_t(0);
      int64_t k = start;
      if constexpr (kVectorized<scalar_t>) {
        using Vec = at::vec::Vectorized<scalar_t>;
        Vec lanes_a(scalar_t(0)), lanes_b(scalar_t(0));
        for (; k + Vec::size() <= end; k += Vec::size()) {
          const Vec g = kGrad ? Vec::loadu(grad + first + k) : Vec(scalar_t(0));
          add_to_sums<kGrad>(lanes_a, lanes_b, Vec::loadu(x + first + k), g, Vec(center));
        }
        chunk_a = sum_of_lanes(lanes_a);
        chunk_b = sum_of_lanes(lanes_b);
      }
      for (; k < end; ++k) {
        const acc_t g = kGrad ? static_cast<acc_t>(grad[first + k]) : acc_t(0);
        add_to_sums<kGrad>(chunk_a, chunk_b, static_cast<acc_t>(x[first + k]), g, center);
      }
      total_a += static_cast<double>(chunk_a);
      total_b += static_cast<double>(chunk_b);
    }
  }
  return {static_cast<acc_t>(total_a), static_cast<acc_t>(total_b)};
}

// p[i] as T: one value in acc_t, or the Vectorized lanes from p[i] on.
template <typename T, typename scalar_t>
T load_as(const scalar_t* p, int64_t i) {
  if constexpr (std::is_same_v<T, at::opmath_type<scalar_t>>) {
    return static_cast<T>(p[i]);
  } else {
    return T::loadu(p + i);
  }
}

// out[i] = body.apply(i) for the `size` values of a plane from `first` on, Vectorized where it can.
template <typename scalar_t, typename Body>
void map_plane(int64_t first, int64_t size, scalar_t* out, const Body& body) {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t k = 0;
  if constexpr (kVectorized<scalar_t>) {
    using Vec = at::vec::Vectorized<scalar_t>;
    for (; k + Vec::size() <= size; k += Vec::size()) body.template apply<Vec>(first + k).store(out + first + k);
  }
  for (; k < size; ++k) out[first + k] = static_cast<scalar_t>(body.template apply<acc_t>(first + k));
}

// y for one channel's values.
template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
struct NormalizeBody {
  const scalar_t* x;
  acc_t mean, scale, bias;
  template <typename T>
  T apply(int64_t i) const {
    return normalize(load_as<T>(x, i), T(mean), T(scale), T(bias));
  }
};

// grad_input for one channel's values.
template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
struct GradInputBody {
  const scalar_t* grad;
  const scalar_t* x;
  acc_t mean;
  GradInputFactors<acc_t> f;
  template <typename T>
  T apply(int64_t i) const {
    return grad_input(load_as<T>(grad, i), load_as<T>(x, i), T(mean), T(f.scale), T(f.grad_shift),
                      T(f.centered_factor));
  }
};

// Rung 1: channel by channel, the statistics (or the running ones) and then y, one value at a time.
template <typename scalar_t, typename param_t, typename acc_t = at::opmath_type<scalar_t>>
void forward_textbook(const Shape& s, const ForwardArgs<scalar_t, param_t>& a) {
  for_each_channel(s, [&](int64_t c) {
    if (a.training) {
      channel_statistics(a.x, s.batch, s.channels, s.plane, c, a.eps, a.momentum, a.running_mean, a.running_var,
                         a.save_mean, a.save_invstd);
    } else {
      running_statistics(a.running_mean, a.running_var, a.eps, c, a.save_mean, a.save_invstd);
    }
    const acc_t mean = a.save_mean[c], scale = channel_scale(a.weight, a.save_invstd, c);
    const acc_t bias = channel_bias<acc_t>(a.bias, c);
    for (int64_t n = 0; n < s.batch; ++n) {
      const int64_t first = plane_index(n, c, s.channels) * s.plane;
      for (int64_t k = first; k < first + s.plane; ++k) {
        a.y[k] = static_cast<scalar_t>(batch_norm::normalize(static_cast<acc_t>(a.x[k]), mean, scale, bias));
      }
    }
  });
}

struct CpuLauncher {
  template <typename scalar_t, typename param_t>
  static void forward(const Shape& s, const ForwardArgs<scalar_t, param_t>& a, int forced) {
    // Every rung takes every input: nothing to refuse.
    const int rung = forward_ladder().run(c10::DeviceType::CPU, forced, 2, [](int) { return std::string(); });
    if (rung == 1) return forward_textbook(s, a);
    if (a.training) {
      statistics(s, a.x, a.running_mean, a.running_var, a.momentum, a.eps, a.save_mean, a.save_invstd);
    } else {
      running_statistics(s, a.running_mean, a.running_var, a.eps, a.save_mean, a.save_invstd);
    }
    normalize(s, a.x, a.weight, a.bias, a.save_mean, a.save_invstd, a.y);
  }

  template <typename scalar_t, typename param_t, typename acc_t = at::opmath_type<scalar_t>>
  static void statistics(const Shape& s, const scalar_t* x, param_t* running_mean, param_t* running_var,
                         double momentum, double eps, acc_t* save_mean, acc_t* save_invstd) {
    for_each_channel(s, [&](int64_t c) {
      // Note [shifted sums]: the channel's first value is the shift.
      const acc_t shift = static_cast<acc_t>(x[first_value_of_channel(c, s.channels, s.plane)]);
      const auto [sum, sum_sq] = sums_of_channel<false>(s, x, static_cast<const scalar_t*>(nullptr), c, shift);
      finish_statistics(sum, sum_sq, shift, s.count(), eps, momentum, running_mean, running_var, c, save_mean,
                        save_invstd);
    });
  }

  template <typename param_t, typename acc_t>
  static void running_statistics(const Shape& s, const param_t* running_mean, const param_t* running_var,
                                 double eps, acc_t* save_mean, acc_t* save_invstd) {
    for (int64_t c = 0; c < s.channels; ++c) {
      batch_norm::running_statistics(running_mean, running_var, eps, c, save_mean, save_invstd);
    }
  }

  template <typename scalar_t, typename param_t, typename acc_t = at::opmath_type<scalar_t>>
  static void normalize(const Shape& s, const scalar_t* x, const param_t* weight, const param_t* bias,
                        const acc_t* save_mean, const acc_t* save_invstd, scalar_t* y) {
    for_each_plane(s, [&](int64_t c, int64_t first) {
      const NormalizeBody<scalar_t> body{x, save_mean[c], channel_scale(weight, save_invstd, c),
                                         channel_bias<acc_t>(bias, c)};
      map_plane(first, s.plane, y, body);
    });
  }

  template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
  static void grad_sums(const Shape& s, const scalar_t* grad, const scalar_t* x, const acc_t* save_mean,
                        const acc_t* save_invstd, acc_t* sum_grad_xhat, acc_t* sum_grad) {
    for_each_channel(s, [&](int64_t c) {
      const auto [sum_g, sum_g_centered] = sums_of_channel<true>(s, x, grad, c, save_mean[c]);
      sum_grad[c] = sum_g;
      sum_grad_xhat[c] = grad_weight_of(sum_g_centered, save_invstd[c]);
    });
  }

  template <typename scalar_t, typename param_t, typename acc_t = at::opmath_type<scalar_t>>
  static void grad_input(const Shape& s, const scalar_t* grad, const scalar_t* x, const param_t* weight,
                         const acc_t* save_mean, const acc_t* save_invstd, const acc_t* sum_grad_xhat,
                         const acc_t* sum_grad, bool training, scalar_t* grad_in) {
    for_each_plane(s, [&](int64_t c, int64_t first) {
      const GradInputBody<scalar_t> body{
          grad, x, save_mean[c],
          grad_input_factors(weight, save_invstd, sum_grad_xhat, sum_grad, training, s.count(), c)};
      map_plane(first, s.plane, grad_in, body);
    });
  }
};

}  // namespace
}  // namespace labops::batch_norm

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::batch_norm::register_kernels<labops::batch_norm::Entry<labops::batch_norm::CpuLauncher>>(m);
}
