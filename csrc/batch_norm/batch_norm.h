// Batch normalization (Ioffe & Szegedy, 2015; Torch7's SpatialBatchNormalization): the math of one
// value and of one channel, shared by batch_norm/cpu.cpp and batch_norm/cuda.cu. The tensor-level
// entry points are in entry.h; labops/reference/batch_norm.py derives the formulas.
//
// x is viewed as (N, C, S): N images, C channels, S values per plane (H*W for (N, C, H, W), L for
// (N, C, L), 1 for (N, C)). Plane (n, c) is x[(n*C + c)*S, (n*C + c + 1)*S); channel c's
// M = N*S values are its N planes.
//   statistics, training: mean = (1/M) sum x, var = (1/M) sum (x - mean)^2 (biased),
//                         running_mean <- (1 - momentum) running_mean + momentum mean,
//                         running_var  <- (1 - momentum) running_var + momentum var M/(M-1) (unbiased)
//   statistics, eval:     mean = running_mean, var = running_var
//   invstd = 1 / sqrt(var + eps),  xhat = (x - mean) invstd
//   updateOutput:        y = xhat weight + bias
//   accGradParameters:   dweight = sum g xhat,  dbias = sum g        (sums over the channel's M values)
//   updateGradInput:     training: dx = weight invstd (g - dbias/M - xhat dweight/M)
//                        eval:     dx = weight invstd g
// Sums and arithmetic run in at::opmath_type (float for half and bfloat16).
//
// The value bodies are templates of the value type T, so the CPU runs them on at::vec::Vectorized
// lanes as well as on single values.
#pragma once

#include <math.h>
#include <cstdint>

#include "../common/loop.h"

namespace labops::batch_norm {

// ---- where the values are ----

// Plane (n, c)'s number: planes are stored image by image.
template <typename index_t>
LABOPS_HOST_DEVICE index_t plane_index(index_t n, index_t c, index_t channels) {
  return n * channels + c;
}

// Channel c's first value (image 0, position 0): the shift of its sums (Note [shifted sums]).
template <typename index_t>
LABOPS_HOST_DEVICE index_t first_value_of_channel(index_t c, index_t channels, index_t plane) {
  return plane_index(index_t(0), c, channels) * plane;
}

// Value k of channel c (0 <= k < N*S, counted plane by plane): its offset in x. `per_plane`
// divides by S (a PlainDivider or FastDivider of csrc/common/fast_divider.h). The CUDA launcher
// counts in 16-byte packs instead of values: then S is the packs per plane.
template <typename Divider, typename index_t = typename Divider::index_t>
LABOPS_HOST_DEVICE index_t channel_value_offset(index_t k, index_t c, index_t channels, const Divider& per_plane) {
  const index_t n = per_plane.div(k);
  const index_t s = k - n * static_cast<index_t>(per_plane.d);
  return plane_index(n, c, channels) * static_cast<index_t>(per_plane.d) + s;
}

// The channel of value i of x (in packs, as above); `per_channels` divides by C.
template <typename Divider, typename index_t = typename Divider::index_t>
LABOPS_HOST_DEVICE index_t channel_of(index_t i, const Divider& per_plane, const Divider& per_channels) {
  const index_t plane = per_plane.div(i);
  return plane - per_channels.div(plane) * static_cast<index_t>(per_channels.d);
}

// ---- statistics ----

// Note [shifted sums]
// var = E[x^2] - E[x]^2 cancels catastrophically when |mean| >> std: a float32 channel of mean 1000
// and std 1 keeps about one significant digit. Two passes (the mean, then the squared deviations)
// read x twice. We sum d = x - K and d^2, with K one value of the channel (its first): then
//   mean = K + sum d / M,   var = sum d^2 / M - (sum d / M)^2
// exactly, and the subtraction cancels only as far as K is from the mean, about one standard
// deviation for a typical value. Every partial sum of a channel (SIMD lanes, threads, blocks) uses
// the same K, so partial sums add like any sums (Welford's running mean would need a merge rule).

// One value's share of its channel's shifted sums.
template <typename T>
LABOPS_HOST_DEVICE void add_to_moments(T& sum, T& sum_sq, T x, T shift) {
  const T d = x - shift;
  sum = sum + d;
  sum_sq = sum_sq + d * d;
}

// 1 / sqrt(var + eps), in the statistics' own precision (sqrtf for float, on the host too).
LABOPS_HOST_DEVICE float invstd_of(float var, double eps) { return 1.0f / ::sqrtf(var + static_cast<float>(eps)); }
LABOPS_HOST_DEVICE double invstd_of(double var, double eps) { return 1.0 / ::sqrt(var + eps); }

template <typename acc_t>
LABOPS_HOST_DEVICE acc_t running_update(acc_t running, acc_t batch_value, double momentum) {
  const acc_t m = static_cast<acc_t>(momentum);
  return (acc_t(1) - m) * running + m * batch_value;
}

// The end of one channel's statistics in training, from its shifted sums: save_mean and save_invstd
// (what the backward reads), and the running statistics' update when they are given (running_mean
// null: none). param_t is the running statistics' type (float for a half input, or the input's).
template <typename acc_t, typename param_t>
LABOPS_HOST_DEVICE void finish_statistics(acc_t sum, acc_t sum_sq, acc_t shift, int64_t count, double eps,
                                          double momentum, param_t* running_mean, param_t* running_var,
                                          int64_t c, acc_t* save_mean, acc_t* save_invstd) {
  const acc_t m = static_cast<acc_t>(count);
  const acc_t mean_d = sum / m;
  acc_t var = sum_sq / m - mean_d * mean_d;
  if (var < acc_t(0)) var = acc_t(0);  // rounding can leave a tiny negative for a constant channel
  const acc_t mean = shift + mean_d;
  save_mean[c] = mean;
  save_invstd[c] = invstd_of(var, eps);
  if (running_mean != nullptr) {
    const acc_t unbiased_var = var * m / (m - acc_t(1));  // count > 1: the entry checks it
    running_mean[c] = static_cast<param_t>(running_update(static_cast<acc_t>(running_mean[c]), mean, momentum));
    running_var[c] = static_cast<param_t>(running_update(static_cast<acc_t>(running_var[c]), unbiased_var, momentum));
  }
}

// Channel c's statistics in training, plainly: the textbook rung of both devices (one CPU task or
// one CUDA thread per channel). Its values one at a time, plane by plane, summed in double: one
// float running sum over a channel of 10^5 values loses digits (the faster rungs sum in short
// chunks instead: cpu.cpp's cascade, cuda.cu's partial sums).
template <typename scalar_t, typename acc_t, typename param_t>
LABOPS_HOST_DEVICE void channel_statistics(const scalar_t* x, int64_t batch, int64_t channels, int64_t plane,
                                           int64_t c, double eps, double momentum, param_t* running_mean,
                                           param_t* running_var, acc_t* save_mean, acc_t* save_invstd) {
  const double shift = static_cast<acc_t>(x[first_value_of_channel(c, channels, plane)]);
  double sum = 0.0, sum_sq = 0.0;
  for (int64_t n = 0; n < batch; ++n) {
    const int64_t first = plane_index(n, c, channels) * plane;
    for (int64_t s = 0; s < plane; ++s) add_to_moments(sum, sum_sq, double(static_cast<acc_t>(x[first + s])), shift);
  }
  finish_statistics(static_cast<acc_t>(sum), static_cast<acc_t>(sum_sq), static_cast<acc_t>(shift), batch * plane,
                    eps, momentum, running_mean, running_var, c, save_mean, save_invstd);
}

// One channel's statistics in evaluation: the running ones.
template <typename acc_t, typename param_t>
LABOPS_HOST_DEVICE void running_statistics(const param_t* running_mean, const param_t* running_var, double eps,
                                           int64_t c, acc_t* save_mean, acc_t* save_invstd) {
  save_mean[c] = static_cast<acc_t>(running_mean[c]);
  save_invstd[c] = invstd_of(static_cast<acc_t>(running_var[c]), eps);
}

// ---- updateOutput ----

// The factor that multiplies x - mean in channel c: weight * invstd (weight 1 without one).
template <typename acc_t, typename param_t>
LABOPS_HOST_DEVICE acc_t channel_scale(const param_t* weight, const acc_t* invstd, int64_t c) {
  return (weight != nullptr ? static_cast<acc_t>(weight[c]) : acc_t(1)) * invstd[c];
}

template <typename acc_t, typename param_t>
LABOPS_HOST_DEVICE acc_t channel_bias(const param_t* bias, int64_t c) {
  return bias != nullptr ? static_cast<acc_t>(bias[c]) : acc_t(0);
}

// y for one value. (x - mean) * scale + bias, not x * scale + (bias - mean * scale): the folded form
// saves a subtraction but cancels when |mean| >> std, as Note [shifted sums] describes.
template <typename T>
LABOPS_HOST_DEVICE T normalize(T x, T mean, T scale, T bias) {
  return (x - mean) * scale + bias;
}

// ---- accGradParameters ----

// One value's share of sum g and sum g (x - mean); dweight = invstd * the second (grad_weight_of).
template <typename T>
LABOPS_HOST_DEVICE void add_to_grad_sums(T& sum_grad, T& sum_grad_centered, T g, T x, T mean) {
  sum_grad = sum_grad + g;
  sum_grad_centered = sum_grad_centered + g * (x - mean);
}

template <typename acc_t>
LABOPS_HOST_DEVICE acc_t grad_weight_of(acc_t sum_grad_centered, acc_t invstd) {
  return sum_grad_centered * invstd;
}

// ---- updateGradInput ----

// dx = scale (g - grad_shift - (x - mean) centered_factor) for one channel: scale = weight invstd;
// in training grad_shift = dbias / M and centered_factor = invstd dweight / M (the part of g that a
// shift and a scale of xhat explain, which normalizing removes); in eval both are 0.
template <typename acc_t>
struct GradInputFactors {
  acc_t scale, grad_shift, centered_factor;
};

template <typename acc_t, typename param_t>
LABOPS_HOST_DEVICE GradInputFactors<acc_t> grad_input_factors(const param_t* weight, const acc_t* invstd,
                                                               const acc_t* sum_grad_xhat, const acc_t* sum_grad,
                                                               bool training, int64_t count, int64_t c) {
  GradInputFactors<acc_t> f{channel_scale(weight, invstd, c), acc_t(0), acc_t(0)};
  if (training) {
    const acc_t m = static_cast<acc_t>(count);
    f.grad_shift = sum_grad[c] / m;
    f.centered_factor = invstd[c] * sum_grad_xhat[c] / m;
  }
  return f;
}

template <typename T>
LABOPS_HOST_DEVICE T grad_input(T g, T x, T mean, T scale, T grad_shift, T centered_factor) {
  return scale * (g - grad_shift - (x - mean) * centered_factor);
}

}  // namespace labops::batch_norm
