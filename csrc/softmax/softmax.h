// Softmax and fused cross-entropy: the math of both layers, in one place.
//
// A tensor is viewed as (outer, size, inner) around the softmax dim: a "row"
// is the `size` elements that one softmax normalizes, `inner` apart in
// memory. RowGeometry says where each row starts; every launcher (CPU loop,
// CUDA warp/block/column kernels) finds its elements through it.
//
// The per-element and per-step bodies below are templates over the value
// type T: float or double on both devices, and at::vec::Vectorized on the CPU
// (8/16 lanes at a time). Half and bfloat16 are converted to float first.
//
// Numerical stability (the seed's trap): softmax(x) = exp(x - m) / sum exp(x - m)
// for any m; with m = max(x) every exponent is <= 0, so exp never overflows
// and the largest term is exactly 1, so the sum is >= 1 (no division by 0).
// Without the shift, exp(1000) = inf and the row becomes inf / inf = NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include <c10/util/Exception.h>

#include "../common/check.h"
#include "../common/loop.h"
#include "../common/math.h"

namespace labops::softmax {

// ---- Where the rows are ----
struct RowGeometry {
  int64_t outer;  // product of the sizes before dim
  int64_t size;   // the size of dim: the length of one row
  int64_t inner;  // product of the sizes after dim: the stride between a row's elements

  LABOPS_HOST_DEVICE int64_t rows() const { return outer * inner; }
  // Offset of element 0 of row r (rows numbered with the inner index fastest,
  // so neighbouring rows are neighbours in memory when inner > 1). Element j
  // of the row is at row_start(r) + j * inner.
  LABOPS_HOST_DEVICE int64_t row_start(int64_t r) const {
    if (inner == 1) return r * size;
    const int64_t o = r / inner;
    return o * size * inner + (r - o * inner);
  }
  // Offset of element j of the row that starts at `start`.
  LABOPS_HOST_DEVICE int64_t element(int64_t start, int64_t j) const { return start + j * inner; }
};

template <typename T>
LABOPS_HOST_DEVICE constexpr T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

// exp(d) for d = x - max <= 0, the only exponent softmax ever takes. On the GPU
// float path this is the hardware exp2 (__expf): d itself is exact or rounded
// once, so the error is __expf's (about 2 + 1.2|d| ulp), well inside float
// tolerance, at a quarter of the cost of expf.
LABOPS_HOST_DEVICE float exp_nonpositive(float d) {
#if defined(__CUDA_ARCH__)
  return __expf(d);
#else
  return std::exp(d);
#endif
}
LABOPS_HOST_DEVICE double exp_nonpositive(double d) { return ::exp(d); }
#if !defined(__CUDACC__) && !defined(__HIPCC__)
template <typename T>
inline at::vec::Vectorized<T> exp_nonpositive(const at::vec::Vectorized<T>& d) { return d.exp(); }
#endif

LABOPS_HOST_DEVICE float log_of(float x) { return ::logf(x); }
LABOPS_HOST_DEVICE double log_of(double x) { return ::log(x); }

// ---- Softmax forward: y = exp(x - max) / sum ----
template <typename T>
LABOPS_HOST_DEVICE T row_max_step(T running_max, T x) {
  return x > running_max ? x : running_max;
}
#if !defined(__CUDACC__) && !defined(__HIPCC__)
template <typename T>
inline at::vec::Vectorized<T> row_max_step(const at::vec::Vectorized<T>& running_max,
                                           const at::vec::Vectorized<T>& x) {
  return at::vec::maximum(running_max, x);
}
#endif
// One term of the row's sum; also the un-normalized output.
template <typename T>
LABOPS_HOST_DEVICE T exp_shifted(T x, T row_max) {
  return exp_nonpositive(x - row_max);
}
template <typename T>
LABOPS_HOST_DEVICE T normalize(T e, T inv_sum) {
  return e * inv_sum;
}
template <typename T>
LABOPS_HOST_DEVICE T softmax_output(T x, T row_max, T inv_sum) {
  return normalize(exp_shifted(x, row_max), inv_sum);
}

// ---- The online (one-pass) max and sum of exps ----
// (max, sum) with sum = sum_j exp(x_j - max) over the elements seen so far.
// A new maximum rescales the old sum by exp(old_max - new_max): the row can be
// read once, in any order, in any number of pieces that are merged at the end.
template <typename T>
struct MaxSumExp {
  T max;
  T sum;
};

template <typename T>
LABOPS_HOST_DEVICE MaxSumExp<T> empty_max_sum() {
  return {neg_inf<T>(), T(0)};
}

template <typename T>
LABOPS_HOST_DEVICE MaxSumExp<T> online_update(MaxSumExp<T> s, T x) {
  if (x > s.max) {
    s.sum = s.sum * exp_nonpositive(s.max - x) + T(1);  // exp(-inf) = 0 for the first element
    s.max = x;
  } else {
    // x == max (-inf == -inf included, which exp(x - max) would make NaN)
    // counts 1; a later, larger max rescales it away.
    s.sum += x == s.max ? T(1) : exp_nonpositive(x - s.max);
  }
  return s;
}

template <typename T>
LABOPS_HOST_DEVICE MaxSumExp<T> online_merge(MaxSumExp<T> a, MaxSumExp<T> b) {
  const T m = a.max > b.max ? a.max : b.max;
  if (m == neg_inf<T>()) return {m, a.sum + b.sum};
  return {m, a.sum * exp_nonpositive(a.max - m) + b.sum * exp_nonpositive(b.max - m)};
}

// ---- The textbook row: rung 1 of the forward's ladder, on both devices ----
// Row r of x, softmax'ed into y, one element at a time: one read of the row
// for its max and sum of exps (online), one more to write the outputs. Any
// row geometry (contiguous or strided rows); the CPU's and the GPU's rung 1
// (one thread per row) run this body as written. x and y never overlap.
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE void softmax_row(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, const RowGeometry& geo,
                                    int64_t r) {
  const int64_t start = geo.row_start(r);
  MaxSumExp<acc_t> st = empty_max_sum<acc_t>();
  for (int64_t j = 0; j < geo.size; ++j) st = online_update(st, static_cast<acc_t>(x[geo.element(start, j)]));
  const acc_t inv = acc_t(1) / st.sum;
  for (int64_t j = 0; j < geo.size; ++j) {
    const int64_t k = geo.element(start, j);
    y[k] = static_cast<scalar_t>(softmax_output(static_cast<acc_t>(x[k]), st.max, inv));
  }
}

// ---- Softmax backward, from the saved output y ----
// dy_i/dx_j = y_i (delta_ij - y_j), so grad_x_j = sum_i g_i y_i (delta_ij - y_j)
//           = y_j (g_j - dot),  dot = sum_i g_i y_i.
template <typename T>
LABOPS_HOST_DEVICE T dot_step(T running_dot, T g, T y) {
  return running_dot + g * y;
}
template <typename T>
LABOPS_HOST_DEVICE T softmax_grad(T g, T y, T dot) {
  return y * (g - dot);
}

// ---- Cross-entropy on logits, fused with the softmax ----
// loss = -log softmax(x)[t] = log sum_j exp(x_j) - x_t = max + log(sum) - x_t
template <typename T>
LABOPS_HOST_DEVICE T cross_entropy_loss(T row_max, T sum, T target_logit) {
  return row_max + log_of(sum) - target_logit;
}
// d loss / d x_j = softmax(x)_j - [j == t], times the incoming gradient
// (divided by N for the mean): write-up 004's softmax_grad (notebooks/writeups.md).
template <typename T>
LABOPS_HOST_DEVICE T cross_entropy_grad(T x, T row_max, T inv_sum, T onehot, T scale) {
  return (softmax_output(x, row_max, inv_sum) - onehot) * scale;
}
LABOPS_HOST_DEVICE bool target_in_range(int64_t target, int64_t classes) {
  return target >= 0 && target < classes;
}

enum class Reduction { None, Mean, Sum };

// What a launcher's cross_entropy_forward did: whether every target was in range, and whether it also wrote
// the mean or sum (`reduced`); where it did not, the entry reduces the per-row losses itself.
struct CrossEntropyForward {
  bool valid;
  bool reduced;
};

inline Reduction parse_reduction(std::string_view name, const char* op) {
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  if (name == "none") return Reduction::None;
  LABOPS_CHECK(false, "labops.", op, ": reduction must be 'mean', 'sum' or 'none', got '",
                    name, "'");
}

}  // namespace labops::softmax
