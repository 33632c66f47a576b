// CPU kernels for softmax and cross-entropy: the row bodies of softmax/softmax.h
// looped with at::parallel_for over rows.
//
// The softmax forward has two rungs (forward_ladder in entry.h):
//   1 textbook: softmax_row (softmax.h) on each row, one element at a time;
//   2 vectorized: the kernels below; the default for every dtype.
// Cross-entropy and the backward run the kernels below only.
//
// Rows along the innermost dim (inner == 1) are contiguous: each one is read
// with at::vec::Vectorized (8 or 16 lanes per instruction) and reduced across
// lanes at the end. Rows with inner > 1 are strided, but neighbouring rows are
// neighbours in memory, so there one vector holds the same element of 8 or 16
// rows and no lane reduction is needed. float and double run vectorized;
// half and bfloat16 run the same bodies one element at a time in float.
//
// Softmax forward is three sweeps over a row that stays in cache: the max;
// exp(x - max) written to y and summed; y scaled by 1/sum (one exp per element).
#include <atomic>
#include <limits>
#include <string>
#include <type_traits>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include "entry.h"
#include "../common/cpu/parallel.h"

namespace labops::softmax {
using namespace labops::cpu;  // the shared CPU helpers: parallel.h, elementwise.h
namespace {

template <typename scalar_t>
constexpr bool kSimd = std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>;

template <typename T>
struct IsVec : std::false_type {};
template <typename T>
struct IsVec<at::vec::Vectorized<T>> : std::true_type {};

// Val is at::vec::Vectorized<scalar_t> (SIMD lanes) or at::opmath_type<scalar_t>.
template <typename Val, typename scalar_t>
inline Val load(const scalar_t* p) {
  if constexpr (IsVec<Val>::value) return Val::loadu(p);
  else return static_cast<Val>(*p);
}
template <typename Val, typename scalar_t>
inline void store(const Val& v, scalar_t* p) {
  if constexpr (IsVec<Val>::value) v.store(p);
  else *p = static_cast<scalar_t>(v);
}

template <typename T>
inline T lanes_max(const at::vec::Vectorized<T>& v) {
  alignas(64) T lanes[at::vec::Vectorized<T>::size()];
  v.store(lanes);
  T m = lanes[0];
  for (int64_t k = 1; k < at::vec::Vectorized<T>::size(); ++k) m = row_max_step(m, lanes[k]);
  return m;
}
template <typename T>
inline T lanes_sum(const at::vec::Vectorized<T>& v) {
  alignas(64) T lanes[at::vec::Vectorized<T>::size()];
  v.store(lanes);
  T s = 0;
  for (int64_t k = 0; k < at::vec::Vectorized<T>::size(); ++k) s += lanes[k];
  return s;
}

// ---- contiguous rows (inner == 1) ----

template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
acc_t contiguous_row_max(const scalar_t* x, int64_t n) {
  acc_t m = neg_inf<acc_t>();
  int64_t j = 0;
  if constexpr (kSimd<scalar_t>) {
    using Vec = at::vec::Vectorized<scalar_t>;
    constexpr int64_t W = Vec::size();
    if (n >= 2 * W) {  // two accumulators: max has a latency of several cycles
      Vec m0(m), m1(m);
      for (; j + 2 * W <= n; j += 2 * W) {
        m0 = row_max_step(m0, Vec::loadu(x + j));
        m1 = row_max_step(m1, Vec::loadu(x + j + W));
      }
      m = lanes_max(row_max_step(m0, m1));
    }
  }
  for (; j < n; ++j) m = row_max_step(m, static_cast<acc_t>(x[j]));
  return m;
}

// sum_j exp(x_j - m); also stores each exp in e when e is not null.
template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
acc_t contiguous_row_sum_exp(const scalar_t* x, int64_t n, acc_t m, scalar_t* e) {
  acc_t s = 0;
  int64_t j = 0;
  if constexpr (kSimd<scalar_t>) {
    using Vec = at::vec::Vectorized<scalar_t>;
    constexpr int64_t W = Vec::size();
    Vec vs(0), vm(m);
    for (; j + W <= n; j += W) {
      Vec ej = exp_shifted(Vec::loadu(x + j), vm);
      if (e) ej.store(e + j);
      vs = vs + ej;
    }
    s = lanes_sum(vs);
  }
  for (; j < n; ++j) {
    acc_t ej = exp_shifted(static_cast<acc_t>(x[j]), m);
    if (e) e[j] = static_cast<scalar_t>(ej);
    s += ej;
  }
  return s;
}

template <typename scalar_t>
void softmax_contiguous_row(const scalar_t* x, scalar_t* y, int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t m = contiguous_row_max(x, n);
  if constexpr (kSimd<scalar_t>) {
    using Vec = at::vec::Vectorized<scalar_t>;
    constexpr int64_t W = Vec::size();
    const acc_t inv = acc_t(1) / contiguous_row_sum_exp(x, n, m, y);  // y = exp(x - m)
    int64_t j = 0;
    for (; j + W <= n; j += W) normalize(Vec::loadu(y + j), Vec(inv)).store(y + j);
    for (; j < n; ++j) y[j] = normalize(y[j], inv);
  } else {
    // half / bfloat16: keep the exps in float by computing them again.
    const acc_t inv = acc_t(1) / contiguous_row_sum_exp<scalar_t>(x, n, m, nullptr);
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<scalar_t>(softmax_output(static_cast<acc_t>(x[j]), m, inv));
  }
}

template <typename scalar_t>
void softmax_backward_contiguous_row(const scalar_t* g, const scalar_t* y, scalar_t* dx, int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  acc_t dot = 0;
  int64_t j = 0;
  if constexpr (kSimd<scalar_t>) {
    using Vec = at::vec::Vectorized<scalar_t>;
    constexpr int64_t W = Vec::size();
    Vec vd(0);
    for (; j + W <= n; j += W) vd = dot_step(vd, Vec::loadu(g + j), Vec::loadu(y + j));
    dot = lanes_sum(vd);
  }
  for (; j < n; ++j) dot = dot_step(dot, static_cast<acc_t>(g[j]), static_cast<acc_t>(y[j]));
  j = 0;
  if constexpr (kSimd<scalar_t>) {
    using Vec = at::vec::Vectorized<scalar_t>;
    constexpr int64_t W = Vec::size();
    for (; j + W <= n; j += W) softmax_grad(Vec::loadu(g + j), Vec::loadu(y + j), Vec(dot)).store(dx + j);
  }
  for (; j < n; ++j) dx[j] = static_cast<scalar_t>(softmax_grad(static_cast<acc_t>(g[j]), static_cast<acc_t>(y[j]), dot));
}

// ---- strided rows (inner > 1): Val holds the same element of W neighbouring rows ----

template <typename Val, typename scalar_t>
void softmax_strided_rows(const scalar_t* x, scalar_t* y, const RowGeometry& geo, int64_t r) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t start = geo.row_start(r), n = geo.size;
  Val m(neg_inf<acc_t>());
  for (int64_t j = 0; j < n; ++j) m = row_max_step(m, load<Val>(x + geo.element(start, j)));
  Val s(0);
  if constexpr (IsVec<Val>::value || kSimd<scalar_t>) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = geo.element(start, j);
      Val e = exp_shifted(load<Val>(x + k), m);
      store(e, y + k);
      s = s + e;
    }
    const Val inv = Val(1) / s;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = geo.element(start, j);
      store(normalize(load<Val>(y + k), inv), y + k);
    }
  } else {
    for (int64_t j = 0; j < n; ++j) s = s + exp_shifted(load<Val>(x + geo.element(start, j)), m);
    const Val inv = Val(1) / s;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = geo.element(start, j);
      store(softmax_output(load<Val>(x + k), m, inv), y + k);
    }
  }
}

template <typename Val, typename scalar_t>
void softmax_backward_strided_rows(const scalar_t* g, const scalar_t* y, scalar_t* dx, const RowGeometry& geo,
                                   int64_t r) {
  const int64_t start = geo.row_start(r), n = geo.size;
  Val dot(0);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t k = geo.element(start, j);
    dot = dot_step(dot, load<Val>(g + k), load<Val>(y + k));
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t k = geo.element(start, j);
    store(softmax_grad(load<Val>(g + k), load<Val>(y + k), dot), dx + k);
  }
}

// Runs body(first_row, W) over every row: W rows at a time when they are
// strided and vectorizable (then the W rows are neighbours), else one.
template <typename scalar_t, typename VecBody, typename OneBody>
void for_each_row(const RowGeometry& geo, VecBody vec_body, OneBody one_body) {
  if (geo.inner == 1) {
    at::parallel_for(0, geo.rows(), grain_for(geo.size), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) one_body(r);
    });
    return;
  }
  constexpr int64_t W = kSimd<scalar_t> ? at::vec::Vectorized<scalar_t>::size() : 1;
  const int64_t stripes = (geo.inner + W - 1) / W;  // per outer index
  at::parallel_for(0, geo.outer * stripes, grain_for(geo.size * W), [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t o = u / stripes, i0 = (u - o * stripes) * W;
      if constexpr (W > 1) {
        if (i0 + W <= geo.inner) {
          vec_body(o * geo.inner + i0);
          continue;
        }
      }
      for (int64_t i = i0; i < std::min(i0 + W, geo.inner); ++i) one_body(o * geo.inner + i);
    }
  });
}

struct SoftmaxLauncher {
  static constexpr int64_t kMinStridedRows = 0;  // strided rows are vectorized across rows: never transpose

  template <typename scalar_t>
  static void softmax_forward(const scalar_t* x, scalar_t* y, RowGeometry geo, int forced) {
    using acc_t = at::opmath_type<scalar_t>;
    using Vec = at::vec::Vectorized<scalar_t>;
    // Rung 2 takes every input (half and bfloat16 run its bodies one element at a time).
    if (forward_ladder().run(c10::DeviceType::CPU, forced, 2, [](int) { return std::string(); }) == 1) {
      at::parallel_for(0, geo.rows(), grain_for(geo.size), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) softmax_row<acc_t>(x, y, geo, r);  // the textbook, as written
      });
      return;
    }
    for_each_row<scalar_t>(
        geo,
        [&](int64_t r) {
          if constexpr (kSimd<scalar_t>) softmax_strided_rows<Vec>(x, y, geo, r);
        },
        [&](int64_t r) {
          if (geo.inner == 1) {
            const int64_t s = geo.row_start(r);
            softmax_contiguous_row(x + s, y + s, geo.size);
          } else {
            softmax_strided_rows<acc_t>(x, y, geo, r);
          }
        });
  }

  template <typename scalar_t>
  static void softmax_backward(const scalar_t* g, const scalar_t* y, scalar_t* dx, RowGeometry geo) {
    using acc_t = at::opmath_type<scalar_t>;
    using Vec = at::vec::Vectorized<scalar_t>;
    for_each_row<scalar_t>(
        geo,
        [&](int64_t r) {
          if constexpr (kSimd<scalar_t>) softmax_backward_strided_rows<Vec>(g, y, dx, geo, r);
        },
        [&](int64_t r) {
          if (geo.inner == 1) {
            const int64_t s = geo.row_start(r);
            softmax_backward_contiguous_row(g + s, y + s, dx + s, geo.size);
          } else {
            softmax_backward_strided_rows<acc_t>(g, y, dx, geo, r);
          }
        });
  }

  // The mean or sum is taken here too, in double, over the rows in order: a loop instead of sum, div and a
  // cast through the dispatcher (three ops, each costing more host time than the whole kernel on a small
  // batch: tools/host_time.py).
  template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
  static CrossEntropyForward cross_entropy_forward(const scalar_t* logits, const int64_t* target, acc_t* loss,
                                                   int64_t n, int64_t c, Reduction reduction, scalar_t* reduced) {
    const RowGeometry geo{n, c, 1};
    std::atomic<bool> valid{true};
    at::parallel_for(0, n, grain_for(c), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* x = logits + geo.row_start(r);
        const int64_t t = target[r];
        if (!target_in_range(t, c)) {
          valid.store(false, std::memory_order_relaxed);
          loss[r] = std::numeric_limits<acc_t>::quiet_NaN();
          continue;
        }
        const acc_t m = contiguous_row_max(x, c);
        const acc_t s = contiguous_row_sum_exp<scalar_t>(x, c, m, nullptr);
        loss[r] = cross_entropy_loss(m, s, static_cast<acc_t>(x[t]));
      }
    });
    if (reduction == Reduction::None) return {valid.load(), false};
    double total = 0;
    for (int64_t r = 0; r < n; ++r) total += static_cast<double>(loss[r]);
    if (reduction == Reduction::Mean) total /= static_cast<double>(n);
    *reduced = static_cast<scalar_t>(total);
    return {valid.load(), true};
  }

  // Rows whose target is out of range come back as NaN: the forward, which
  // autograd always runs first, has already raised for them.
  template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
  static void cross_entropy_backward(const scalar_t* grad_loss, int64_t grad_stride, acc_t scale,
                                     const scalar_t* logits, const int64_t* target,
                                     scalar_t* grad, int64_t n, int64_t c) {
    const RowGeometry geo{n, c, 1};
    at::parallel_for(0, n, grain_for(c), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* x = logits + geo.row_start(r);
        scalar_t* dx = grad + geo.row_start(r);
        const int64_t t = target[r];
        if (!target_in_range(t, c)) {
          for (int64_t j = 0; j < c; ++j) dx[j] = std::numeric_limits<scalar_t>::quiet_NaN();
          continue;
        }
        const acc_t m = contiguous_row_max(x, c);
        const acc_t inv = acc_t(1) / contiguous_row_sum_exp<scalar_t>(x, c, m, nullptr);
        const acc_t row_scale = static_cast<acc_t>(grad_loss[r * grad_stride]) * scale;
        int64_t j = 0;
        if constexpr (kSimd<scalar_t>) {
          using Vec = at::vec::Vectorized<scalar_t>;
          constexpr int64_t W = Vec::size();
          const Vec vm(m), vinv(inv), vzero(0), vscale(row_scale);
          for (; j + W <= c; j += W) cross_entropy_grad(Vec::loadu(x + j), vm, vinv, vzero, vscale).store(dx + j);
        }
        for (; j < c; ++j) dx[j] = static_cast<scalar_t>(cross_entropy_grad(static_cast<acc_t>(x[j]), m, inv, acc_t(0), row_scale));
        dx[t] = static_cast<scalar_t>(cross_entropy_grad(static_cast<acc_t>(x[t]), m, inv, acc_t(1), row_scale));
      }
    });
  }
};

}  // namespace
}  // namespace labops::softmax

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::softmax::register_kernels<labops::softmax::Entry<labops::softmax::SoftmaxLauncher>>(m);
}
