// CUDA kernels for softmax and cross-entropy: the row bodies of softmax/softmax.h
// in three kinds of kernel, picked per call from the row length (see Note
// [softmax kernels]); the entry points are softmax/entry.h's.
//
// The softmax forward's rungs (forward_ladder in entry.h, Note [the ladder]):
//   1 textbook           softmax_forward_strided: one thread per row, softmax_row;
//                        the default for strided rows (dim not last, many rows);
//   2 block_two_pass     softmax_forward_long: a block per row, read twice; the
//                        default for rows too long for registers, and for float32
//                        rows that need a whole 1024-thread block;
//   3 register_rows      softmax_forward_rows: the row in registers, read once;
//                        the default for the other rows that fit;
//   4 register_prefetch  softmax_forward_rows_prefetch: whole-block register rows
//                        prefetching the next row; the default for such rows
//                        (float64, float16, bfloat16) when there are more than
//                        twice as many as multiprocessors.
// Rungs 2-4 read contiguous rows only (dim last, or few strided rows that the
// entry moves last first).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "entry.h"
#include "../common/cuda/device.cuh"
#include "../common/cuda/reduce.cuh"
#include "../common/cuda/vec.cuh"

namespace labops::cuda {
namespace {

using namespace labops::softmax;

constexpr int kMaxThreads = 1024;
constexpr int kRowsPerWarpBlock = 128;  // threads per block when rows are a warp or less
constexpr int kReadOnlyLoads = 4;       // loads per lane in the cross-entropy forward (see its launcher)

// Loads per thread per row in the register kernels, at most: a thread keeps
// about 32 registers of row data (16 when the values are 2 bytes, whose float
// copies the compiler may keep too; doubles: exp needs many registers), so a
// 1024-thread block fits in 64 registers per thread without spilling.
// `inputs` is 2 for the softmax backward (g and y), else 1.
template <typename scalar_t>
constexpr int max_loads(int inputs) {
  if constexpr (sizeof(scalar_t) == 8) return 2;
  else if constexpr (sizeof(scalar_t) == 2) return inputs == 1 ? 4 : 2;
  else return inputs == 1 ? 8 : 4;
}

// Threads per block of the long-row kernels (doubles need more registers for exp).
template <typename scalar_t>
constexpr int long_threads() {
  return sizeof(scalar_t) == 8 ? 512 : kMaxThreads;
}

// Loads in flight per thread and input in the long-row kernels.
template <typename scalar_t>
constexpr int long_unroll() {
  return sizeof(scalar_t) == 4 ? 4 : sizeof(scalar_t) == 2 ? 2 : 1;
}

// ---- reductions across the threads of one row ----

template <typename T>
struct MaxOp {
  __device__ __forceinline__ T operator()(T a, T b) const { return row_max_step(a, b); }
};
// The merge of two threads' running (max, sum of exps).
template <typename T>
struct MergeOp {
  __device__ __forceinline__ MaxSumExp<T> operator()(MaxSumExp<T> a, MaxSumExp<T> b) const {
    return online_merge(a, b);
  }
};

// Every thread of a row gets the row's reduction. A row is `tpr` consecutive
// threads: part of a warp (tpr <= 32: shuffles only) or the whole block.
template <typename T, typename Op>
__device__ __forceinline__ T row_allreduce(T v, int tpr, Op op, T identity, T* smem) {
  v = warp_allreduce(v, op, tpr < kWarpSize ? tpr : kWarpSize);
  if (tpr <= kWarpSize) return v;
  return block_allreduce_warps(v, op, identity, smem);
}

// ---- rows in registers ----
// Thread `lane` of a row holds the vectors at columns (l * tpr + lane) * V,
// l < kLoads: each load instruction of the row's threads covers one
// contiguous stretch of tpr * 16 bytes. Blocks loop over rows (uniformly, so
// every lane of a warp reaches every shuffle).
struct RowThreads {
  int tpr;
  int lane;
  int64_t first_row;  // of this block's current batch
  int rows_per_block;
  int sub;  // which row of the batch is this thread's

  __device__ explicit RowThreads(int tpr_log2)
      : tpr(1 << tpr_log2),
        lane(static_cast<int>(threadIdx.x) & ((1 << tpr_log2) - 1)),
        first_row(static_cast<int64_t>(blockIdx.x) * (blockDim.x >> tpr_log2)),
        rows_per_block(blockDim.x >> tpr_log2),
        sub(threadIdx.x >> tpr_log2) {}
  __device__ int64_t row() const { return first_row + sub; }
  __device__ void next() { first_row += static_cast<int64_t>(gridDim.x) * rows_per_block; }
  template <int V>
  __device__ int64_t col(int l) const { return (static_cast<int64_t>(l) * tpr + lane) * V; }
};

// Every row kernel's loop: body(rt, row, active) for each batch of rows the block takes in turn. A thread
// past the last row still runs the body, with active false and row 0 (its loads and stores are masked),
// because the row's reductions need all of its threads.
template <typename Body>
__device__ __forceinline__ void for_each_row(const RowGeometry& geo, int tpr_log2, Body body) {
  const int64_t rows = geo.rows();
  for (RowThreads rt(tpr_log2); rt.first_row < rows; rt.next()) {
    const bool active = rt.row() < rows;
    body(rt, active ? rt.row() : int64_t(0), active);
  }
}

template <int kLoads, int V, typename scalar_t>
__device__ __forceinline__ void load_slice(Pack<scalar_t, V> (&v)[kLoads], const scalar_t* row_ptr, int64_t n,
                                           bool active, const RowThreads& rt, scalar_t pad) {
#pragma unroll
  for (int l = 0; l < kLoads; ++l) {
    const int64_t c = rt.col<V>(l);
    if (active && c < n) {
      v[l] = load_pack<V>(row_ptr + c);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) v[l].val[e] = pad;
    }
  }
}

// Writes this thread's slice of a row (the places load_slice read):
// row_ptr[col] = value(l, e, col) for element e of load l, col its column.
template <int kLoads, int V, typename scalar_t, typename F>
__device__ __forceinline__ void store_slice(scalar_t* row_ptr, int64_t n, bool active, const RowThreads& rt,
                                            F value) {
#pragma unroll
  for (int l = 0; l < kLoads; ++l) {
    const int64_t c = rt.col<V>(l);
    if (active && c < n) {
      Pack<scalar_t, V> out;
#pragma unroll
      for (int e = 0; e < V; ++e) out.val[e] = static_cast<scalar_t>(value(l, e, c + e));
      store_pack<V>(row_ptr + c, out);
    }
  }
}

// The row's max and sum of exps, from the slice of it this thread holds;
// every thread of the row gets both. With kKeepExp each value of the slice
// is replaced by its exp (float and double rows: the output then needs no
// second exp, and has the same bits).
template <bool kKeepExp, int kLoads, int V, typename scalar_t, typename acc_t>
__device__ __forceinline__ MaxSumExp<acc_t> slice_max_sum(Pack<scalar_t, V> (&v)[kLoads], const RowThreads& rt,
                                                          acc_t* smem) {
  acc_t m = neg_inf<acc_t>();
#pragma unroll
  for (int l = 0; l < kLoads; ++l)
#pragma unroll
    for (int e = 0; e < V; ++e) m = row_max_step(m, static_cast<acc_t>(v[l].val[e]));
  m = row_allreduce(m, rt.tpr, MaxOp<acc_t>{}, neg_inf<acc_t>(), smem);
  acc_t s = 0;
#pragma unroll
  for (int l = 0; l < kLoads; ++l)
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const acc_t ex = exp_shifted(static_cast<acc_t>(v[l].val[e]), m);
      if constexpr (kKeepExp) v[l].val[e] = ex;
      s += ex;
    }
  return {m, row_allreduce(s, rt.tpr, Plus<acc_t>{}, acc_t(0), smem)};
}

template <typename scalar_t, int V, int kLoads>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_forward_rows(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, RowGeometry geo, int tpr_log2) {
  using acc_t = at::opmath_type<scalar_t>;
  __shared__ acc_t smem[kWarpSize];
  const int64_t n = geo.size;
  for_each_row(geo, tpr_log2, [&](const RowThreads& rt, int64_t row, bool active) {
    const int64_t start = geo.row_start(row);
    Pack<scalar_t, V> v[kLoads];
    load_slice(v, x + start, n, active, rt, scalar_t(neg_inf<acc_t>()));
    // Float and double rows keep each exp in place of its input: one exp per
    // element instead of two. (Half inputs would round the exp to half, so
    // they recompute it.)
    constexpr bool kKeepExp = std::is_same_v<scalar_t, acc_t>;
    const MaxSumExp<acc_t> stats = slice_max_sum<kKeepExp>(v, rt, smem);
    const acc_t m = stats.max, s = stats.sum;
    const acc_t inv = acc_t(1) / s;
    store_slice<kLoads, V>(y + start, n, active, rt, [&](int l, int e, int64_t) {
      const acc_t value = static_cast<acc_t>(v[l].val[e]);
      return kKeepExp ? normalize(value, inv) : softmax_output(value, m, inv);
    });
  });
}

// Rows of a whole block each (rows of 4096 .. 32768 floats), with the next
// row prefetched. One such block fits on a multiprocessor, so in
// softmax_forward_rows the memory idles while a block reduces its row and
// until the next block starts. Here `gridDim.x` blocks stay resident and loop
// over rows; each thread copies its slice of the block's next row into shared
// memory with cp.async (no registers held) before working on the current one,
// so that copy overlaps the reductions and the stores. A thread only ever
// reads the shared-memory slots it copied itself: no barrier is needed.
template <typename scalar_t, int V, int kLoads>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_forward_rows_prefetch(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, RowGeometry geo,
                                  int tpr_log2) {
  using acc_t = at::opmath_type<scalar_t>;
  using PackT = Pack<scalar_t, V>;
  extern __shared__ __align__(16) unsigned char next_raw[];
  PackT* next = reinterpret_cast<PackT*>(next_raw);  // slot l * blockDim.x + threadIdx.x
  __shared__ acc_t smem[kWarpSize];
  const int64_t rows = geo.rows(), n = geo.size;
  auto prefetch = [&](int64_t row, const RowThreads& rt) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int64_t c = rt.col<V>(l);
      if (c < n) __pipeline_memcpy_async(next + l * blockDim.x + threadIdx.x, x + geo.row_start(row) + c, sizeof(PackT));
    }
    __pipeline_commit();
  };
  RowThreads rt(tpr_log2);  // one row per block: rt.row() == rt.first_row
  if (rt.row() < rows) prefetch(rt.row(), rt);
  for (; rt.first_row < rows; rt.next()) {
    const int64_t start = geo.row_start(rt.row());
    __pipeline_wait_prior(0);
    Pack<scalar_t, V> v[kLoads];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      if (rt.col<V>(l) < n) {
        v[l] = next[l * blockDim.x + threadIdx.x];
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) v[l].val[e] = scalar_t(neg_inf<acc_t>());
      }
    }
    // The copy of the following row rewrites the slots just read: let the
    // reads complete first (a thread's cp.async is not ordered after its own
    // earlier loads without a fence).
    __threadfence_block();
    const int64_t following = rt.row() + static_cast<int64_t>(gridDim.x);
    if (following < rows) prefetch(following, rt);
    constexpr bool kKeepExp = std::is_same_v<scalar_t, acc_t>;
    const MaxSumExp<acc_t> stats = slice_max_sum<kKeepExp>(v, rt, smem);
    const acc_t m = stats.max, inv = acc_t(1) / stats.sum;
    store_slice<kLoads, V>(y + start, n, true, rt, [&](int l, int e, int64_t) {
      const acc_t value = static_cast<acc_t>(v[l].val[e]);
      return kKeepExp ? normalize(value, inv) : softmax_output(value, m, inv);
    });
  }
}

template <typename scalar_t, int V, int kLoads>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_backward_rows(const scalar_t* __restrict__ g, const scalar_t* __restrict__ y, scalar_t* __restrict__ dx,
                          RowGeometry geo, int tpr_log2) {
  using acc_t = at::opmath_type<scalar_t>;
  __shared__ acc_t smem[kWarpSize];
  const int64_t n = geo.size;
  for_each_row(geo, tpr_log2, [&](const RowThreads& rt, int64_t row, bool active) {
    const int64_t start = geo.row_start(row);
    Pack<scalar_t, V> gv[kLoads], yv[kLoads];
    load_slice(gv, g + start, n, active, rt, scalar_t(0));
    load_slice(yv, y + start, n, active, rt, scalar_t(0));
    acc_t dot = 0;
#pragma unroll
    for (int l = 0; l < kLoads; ++l)
#pragma unroll
      for (int e = 0; e < V; ++e) dot = dot_step(dot, static_cast<acc_t>(gv[l].val[e]), static_cast<acc_t>(yv[l].val[e]));
    dot = row_allreduce(dot, rt.tpr, Plus<acc_t>{}, acc_t(0), smem);
    store_slice<kLoads, V>(dx + start, n, active, rt, [&](int l, int e, int64_t) {
      return softmax_grad(static_cast<acc_t>(gv[l].val[e]), static_cast<acc_t>(yv[l].val[e]), dot);
    });
  });
}

// One row of a cross-entropy row kernel, as both kernels begin it (row and active from for_each_row): where
// the row starts, its target, this thread's slice of its logits in v (-inf past the row's end: their exp
// is 0) and their max and sum of exponentials, the same on every thread of the row.
template <typename scalar_t, int V, int kLoads, typename acc_t = at::opmath_type<scalar_t>>
struct CrossEntropyRow {
  int64_t start, target;
  Pack<scalar_t, V> v[kLoads];
  MaxSumExp<acc_t> stats;

  __device__ __forceinline__ CrossEntropyRow(const scalar_t* logits, const int64_t* targets, const RowGeometry& geo,
                                             int64_t row, bool active, const RowThreads& rt, acc_t* smem)
      : start(geo.row_start(row)), target(targets[row]) {
    load_slice(v, logits + start, geo.size, active, rt, scalar_t(neg_inf<acc_t>()));
    stats = slice_max_sum<false>(v, rt, smem);
  }
};

// One loss per row into `loss`. With `reduced` (launched as one block holding every row: Note
// [cross-entropy in one launch]) the block then adds the rows up, in a fixed order, into reduced[0]: their
// mean or sum. With `bad`, a row whose target is outside [0, C) raises it.
template <typename scalar_t, int V, int kLoads, typename acc_t = at::opmath_type<scalar_t>>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_forward_rows(const scalar_t* __restrict__ logits, const int64_t* __restrict__ target,
                               acc_t* __restrict__ loss, RowGeometry geo, int tpr_log2, int* bad = nullptr,
                               scalar_t* reduced = nullptr, bool mean = false) {
  __shared__ acc_t smem[kWarpSize];
  const int64_t n = geo.size;
  for_each_row(geo, tpr_log2, [&](const RowThreads& rt, int64_t row, bool active) {
    const CrossEntropyRow<scalar_t, V, kLoads> r(logits, target, geo, row, active, rt, smem);
    const acc_t m = r.stats.max, s = r.stats.sum;
    if (active && rt.lane == 0) {  // never read outside the row: a bad target's loss is NaN
      const bool in_range = target_in_range(r.target, n);
      if (!in_range && bad != nullptr) *bad = 1;
      loss[row] = in_range ? cross_entropy_loss(m, s, static_cast<acc_t>(logits[r.start + r.target]))
                           : std::numeric_limits<acc_t>::quiet_NaN();
    }
  });
  if (reduced == nullptr) return;
  __syncthreads();  // every row's loss is written (and, within the block, visible)
  if (threadIdx.x < kWarpSize) {
    // Lane l adds rows l, l + 32, ... in order; the lanes' sums then meet in a fixed tree.
    const int64_t rows = geo.rows();
    acc_t sum = 0;
    for (int64_t row = threadIdx.x; row < rows; row += kWarpSize) sum += loss[row];
    sum = warp_allreduce(sum, Plus<acc_t>{});
    if (threadIdx.x == 0) reduced[0] = static_cast<scalar_t>(mean ? sum / static_cast<acc_t>(rows) : sum);
  }
}

template <typename scalar_t, int V, int kLoads, typename acc_t = at::opmath_type<scalar_t>>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_backward_rows(const scalar_t* __restrict__ grad_loss, int64_t grad_stride, acc_t scale,
                                const scalar_t* __restrict__ logits, const int64_t* __restrict__ target,
                                scalar_t* __restrict__ grad, RowGeometry geo, int tpr_log2) {
  __shared__ acc_t smem[kWarpSize];
  const int64_t n = geo.size;
  for_each_row(geo, tpr_log2, [&](const RowThreads& rt, int64_t row, bool active) {
    const CrossEntropyRow<scalar_t, V, kLoads> r(logits, target, geo, row, active, rt, smem);
    const int64_t t = r.target;
    const acc_t row_scale = static_cast<acc_t>(grad_loss[row * grad_stride]) * scale;
    const acc_t m = r.stats.max, s = r.stats.sum;
    const acc_t inv = acc_t(1) / s;
    // A bad target (only possible when the op is called directly, the forward
    // raises for it) gives a NaN row instead of a device-side assert.
    const acc_t nan_if_bad = target_in_range(t, n) ? acc_t(0) : std::numeric_limits<acc_t>::quiet_NaN();
    store_slice<kLoads, V>(grad + r.start, n, active, rt, [&](int l, int e, int64_t col) {
      const acc_t onehot = col == t ? acc_t(1) : acc_t(0);
      return cross_entropy_grad(static_cast<acc_t>(r.v[l].val[e]), m, inv, onehot, row_scale) + nan_if_bad;
    });
  });
}

// ---- rows too long for registers: one block per row, read twice ----

// The online (max, sum of exps) of this thread's share of a row, kLongUnroll
// loads in flight.
template <typename scalar_t, int V, typename acc_t = at::opmath_type<scalar_t>>
__device__ MaxSumExp<acc_t> online_row(const scalar_t* row_ptr, int64_t n) {
  using PackT = Pack<scalar_t, V>;
  constexpr int kLongUnroll = long_unroll<scalar_t>();
  const int64_t nv = n / V, step = blockDim.x;
  MaxSumExp<acc_t> st = empty_max_sum<acc_t>();
  for (int64_t q = threadIdx.x; q < nv; q += step * kLongUnroll) {
    PackT v[kLongUnroll];
#pragma unroll
    for (int u = 0; u < kLongUnroll; ++u) {
      if (q + u * step < nv) v[u] = load_pack<V>(row_ptr, q + u * step);
    }
#pragma unroll
    for (int u = 0; u < kLongUnroll; ++u) {
      if (q + u * step < nv) {
#pragma unroll
        for (int e = 0; e < V; ++e) st = online_update(st, static_cast<acc_t>(v[u].val[e]));
      }
    }
  }
  return st;
}

template <typename scalar_t, int V>
__global__ void __launch_bounds__(long_threads<scalar_t>())
    softmax_forward_long(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, RowGeometry geo) {
  using acc_t = at::opmath_type<scalar_t>;
  using PackT = Pack<scalar_t, V>;
  __shared__ MaxSumExp<acc_t> smem[kWarpSize];
  const int64_t nv = geo.size / V;
  for (int64_t row = blockIdx.x; row < geo.rows(); row += gridDim.x) {
    const int64_t start = geo.row_start(row);
    const MaxSumExp<acc_t> st = block_allreduce(online_row<scalar_t, V>(x + start, geo.size), MergeOp<acc_t>{},
                                                         empty_max_sum<acc_t>(), smem);
    const acc_t inv = acc_t(1) / st.sum;
#pragma unroll long_unroll<scalar_t>()
    for (int64_t q = threadIdx.x; q < nv; q += blockDim.x) {
      const PackT in = load_pack_evict_first<V>(x + start, q);
      PackT out;
#pragma unroll
      for (int e = 0; e < V; ++e) out.val[e] = static_cast<scalar_t>(softmax_output(static_cast<acc_t>(in.val[e]), st.max, inv));
      store_pack_evict_first<V>(y + start, q, out);
    }
  }
}

template <typename scalar_t, int V>
__global__ void __launch_bounds__(long_threads<scalar_t>())
    softmax_backward_long(const scalar_t* __restrict__ g, const scalar_t* __restrict__ y, scalar_t* __restrict__ dx,
                          RowGeometry geo) {
  using acc_t = at::opmath_type<scalar_t>;
  using PackT = Pack<scalar_t, V>;
  constexpr int kLongUnroll = long_unroll<scalar_t>();
  __shared__ acc_t smem[kWarpSize];
  const int64_t nv = geo.size / V, step = blockDim.x;
  for (int64_t row = blockIdx.x; row < geo.rows(); row += gridDim.x) {
    const int64_t start = geo.row_start(row);
    acc_t dot = 0;
    for (int64_t q = threadIdx.x; q < nv; q += step * kLongUnroll) {
      PackT gv[kLongUnroll], yv[kLongUnroll];
#pragma unroll
      for (int u = 0; u < kLongUnroll; ++u) {
        if (q + u * step < nv) {
          gv[u] = load_pack<V>(g + start, q + u * step);
          yv[u] = load_pack<V>(y + start, q + u * step);
        }
      }
#pragma unroll
      for (int u = 0; u < kLongUnroll; ++u) {
        if (q + u * step < nv) {
#pragma unroll
          for (int e = 0; e < V; ++e) dot = dot_step(dot, static_cast<acc_t>(gv[u].val[e]), static_cast<acc_t>(yv[u].val[e]));
        }
      }
    }
    dot = row_allreduce(dot, static_cast<int>(blockDim.x), Plus<acc_t>{}, acc_t(0), smem);
    // The second pass runs from the row's end back to its start: what the first
    // pass read last is the likeliest to still be in L2 (a row's g and y, 256 KB
    // of floats per block, do not all stay there; re-read in the same order,
    // the oldest lines, read first, are the ones already gone).
    const int64_t my_last = threadIdx.x < nv ? (nv - 1 - threadIdx.x) / step : -1;  // packs threadIdx.x + k*step
#pragma unroll long_unroll<scalar_t>()
    for (int64_t k = my_last; k >= 0; --k) {
      const int64_t q = threadIdx.x + k * step;
      const PackT gq = load_pack_evict_first<V>(g + start, q), yq = load_pack_evict_first<V>(y + start, q);
      PackT out;
#pragma unroll
      for (int e = 0; e < V; ++e) out.val[e] = static_cast<scalar_t>(softmax_grad(static_cast<acc_t>(gq.val[e]), static_cast<acc_t>(yq.val[e]), dot));
      store_pack_evict_first<V>(dx + start, q, out);
    }
  }
}

template <typename scalar_t, int V, typename acc_t = at::opmath_type<scalar_t>>
__global__ void __launch_bounds__(long_threads<scalar_t>())
    cross_entropy_forward_long(const scalar_t* __restrict__ logits, const int64_t* __restrict__ target,
                               acc_t* __restrict__ loss, RowGeometry geo) {
  __shared__ MaxSumExp<acc_t> smem[kWarpSize];
  for (int64_t row = blockIdx.x; row < geo.rows(); row += gridDim.x) {
    const int64_t start = geo.row_start(row);
    const MaxSumExp<acc_t> st = block_allreduce(online_row<scalar_t, V>(logits + start, geo.size), MergeOp<acc_t>{},
                                                         empty_max_sum<acc_t>(), smem);
    if (threadIdx.x == 0) {
      const int64_t t = target[row];
      loss[row] = target_in_range(t, geo.size) ? cross_entropy_loss(st.max, st.sum, static_cast<acc_t>(logits[start + t]))
                                               : std::numeric_limits<acc_t>::quiet_NaN();
    }
  }
}

template <typename scalar_t, int V, typename acc_t = at::opmath_type<scalar_t>>
__global__ void __launch_bounds__(long_threads<scalar_t>())
    cross_entropy_backward_long(const scalar_t* __restrict__ grad_loss, int64_t grad_stride, acc_t scale,
                                const scalar_t* __restrict__ logits, const int64_t* __restrict__ target,
                                scalar_t* __restrict__ grad, RowGeometry geo) {
  using PackT = Pack<scalar_t, V>;
  __shared__ MaxSumExp<acc_t> smem[kWarpSize];
  const int64_t nv = geo.size / V;
  for (int64_t row = blockIdx.x; row < geo.rows(); row += gridDim.x) {
    const int64_t start = geo.row_start(row);
    const int64_t t = target[row];
    const acc_t row_scale = static_cast<acc_t>(grad_loss[row * grad_stride]) * scale;
    const MaxSumExp<acc_t> st = block_allreduce(online_row<scalar_t, V>(logits + start, geo.size), MergeOp<acc_t>{},
                                                         empty_max_sum<acc_t>(), smem);
    const acc_t inv = acc_t(1) / st.sum;
    const acc_t nan_if_bad = target_in_range(t, geo.size) ? acc_t(0) : std::numeric_limits<acc_t>::quiet_NaN();
#pragma unroll long_unroll<scalar_t>()
    for (int64_t q = threadIdx.x; q < nv; q += blockDim.x) {
      const PackT in = load_pack_evict_first<V>(logits + start, q);
      PackT out;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const acc_t onehot = q * V + e == t ? acc_t(1) : acc_t(0);
        out.val[e] = static_cast<scalar_t>(cross_entropy_grad(static_cast<acc_t>(in.val[e]), st.max, inv, onehot, row_scale) + nan_if_bad);
      }
      store_pack_evict_first<V>(grad + start, q, out);
    }
  }
}

// Sets *bad when any target lies outside [0, classes) (see Note
// [cross-entropy target check]): reads only the N targets, so the host, which
// waits for it and not for the loss kernel queued behind it, waits briefly.
__global__ void find_bad_target(const int64_t* __restrict__ target, int64_t n, int64_t classes, int* bad) {
  LABOPS_KERNEL_LOOP(i, n) {
    if (!target_in_range(target[i], classes)) *bad = 1;
  }
}

// The flag find_bad_target raises, one per host thread and device: a word of
// pinned host memory mapped into the GPU's address space (the kernel writes it
// in place, the host reads it with a load), and the event after the check.
// Per thread, so concurrent callers never share a flag; created on first use
// and kept for the thread's life: one pinned page, not freed at thread exit,
// where the CUDA runtime may already be shut down.
struct TargetFlag {
  int* host = nullptr;
  int* device = nullptr;  // the same word, as the GPU addresses it
  cudaEvent_t checked = nullptr;
};
TargetFlag& target_flag(int device) {
  thread_local std::vector<TargetFlag> per_device;
  if (per_device.size() <= static_cast<size_t>(device)) per_device.resize(device + 1);
  TargetFlag& f = per_device[device];
  if (f.host == nullptr) {
    C10_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&f.host), sizeof(int), cudaHostAllocMapped));
    C10_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&f.device), f.host, 0));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&f.checked, cudaEventDisableTiming));
  }
  return f;
}

// ---- strided rows (dim is not the last): one thread per row ----

// Rung 1, the textbook: thread r runs softmax.h's softmax_row on row r, as the
// CPU's rung 1 does. On strided rows neighbouring threads read neighbouring
// addresses, so the loads coalesce; on contiguous rows they lie a row apart.
template <typename scalar_t>
__global__ void softmax_forward_strided(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, RowGeometry geo) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(r, geo.rows()) { softmax_row<acc_t>(x, y, geo, r); }
}

template <typename scalar_t>
__global__ void softmax_backward_strided(const scalar_t* __restrict__ g, const scalar_t* __restrict__ y,
                                         scalar_t* __restrict__ dx, RowGeometry geo) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(r, geo.rows()) {
    const int64_t start = geo.row_start(r);
    acc_t dot = 0;
    for (int64_t j = 0; j < geo.size; ++j) {
      const int64_t k = geo.element(start, j);
      dot = dot_step(dot, static_cast<acc_t>(g[k]), static_cast<acc_t>(y[k]));
    }
    for (int64_t j = 0; j < geo.size; ++j) {
      const int64_t k = geo.element(start, j);
      dx[k] = static_cast<scalar_t>(softmax_grad(static_cast<acc_t>(g[k]), static_cast<acc_t>(y[k]), dot));
    }
  }
}

// ---- choosing a kernel ----

// Note [softmax kernels]
//  * Rows in registers (rows along the innermost dim, up to 32K floats): a row
//    is handled by 1..32 lanes of a warp (short rows: several rows per warp,
//    no shared memory) or by a whole block of up to 1024 threads (long rows).
//    Each thread loads its slice with 16-byte loads, all issued before the
//    first use, and keeps it in registers: the max, the sum of exps and the
//    output are computed from that one read (the input is read once). When
//    half rows need a whole 1024-thread block and there are many of them, the
//    forward keeps one block per multiprocessor resident, each copying its
//    next row into shared memory (cp.async) while it works on the current
//    one (softmax_forward_rows_prefetch). Float rows that need a whole block
//    go to the long-row kernels instead (prefers_long: measured faster).
//  * Rows too long for registers (the *_long kernels): one block per row, an
//    online (max, sum) pass, then a write pass that reads the row again
//    (mostly from L2, since a block finishes its row before starting another;
//    see Note [evict-first accesses] in vec.cuh). Memory traffic is still one
//    read and one write: the second read is served by L2.
//  * Strided rows (softmax along a dim that is not the last): one thread per
//    row; neighbouring threads read neighbouring addresses, so loads coalesce.

inline int ceil_log2(int64_t v) {
  int l = 0;
  while ((int64_t(1) << l) < v) ++l;
  return l;
}

// How the rows of length n map to threads; `fits` is false when a row is too
// long for the registers of one block (then the *_long kernels run).
struct RowPlan {
  bool fits = false;
  int vec = 1;       // elements per load: 16 bytes' worth, or 1 when unaligned
  int loads = 1;     // loads per thread per row (1, 2, 4, 8)
  int tpr_log2 = 0;  // log2(threads per row)
  int threads = kRowsPerWarpBlock;

  int64_t blocks(int64_t rows) const {
    const int64_t rows_per_block = threads >> tpr_log2;
    return std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, int64_t(1) << 30);
  }
};

// `lane_loads`: how many loads a lane of a warp-sized row should get (1: as
// many lanes as loads, up to 32; more: fewer lanes per row, fewer shuffles).
template <typename scalar_t>
RowPlan plan_rows(int64_t n, bool aligned, int load_cap, int lane_loads = 1) {
  constexpr int kVec = vec_width<scalar_t>();
  RowPlan p;
  p.vec = aligned && n % kVec == 0 ? kVec : 1;
  const int64_t nv = (n + p.vec - 1) / p.vec;  // loads per row
  if (nv <= int64_t(kWarpSize) * load_cap) {       // a warp or less per row
    p.tpr_log2 = std::min(5, ceil_log2((nv + lane_loads - 1) / lane_loads));
    p.threads = kRowsPerWarpBlock;
  } else if (nv <= int64_t(kMaxThreads) * load_cap) {  // a block per row, up to 4 loads per thread
    const int64_t per_thread = std::min(4, load_cap);
    p.tpr_log2 = std::clamp(ceil_log2((nv + per_thread - 1) / per_thread), 6, 10);
    p.threads = 1 << p.tpr_log2;
  } else {
    return p;
  }
  p.loads = 1 << ceil_log2((nv + (1 << p.tpr_log2) - 1) >> p.tpr_log2);
  p.fits = p.loads <= load_cap;
  return p;
}

// Calls launch(vec, loads) with both as std::integral_constant; only load
// counts up to kMaxLoads are instantiated.
template <int kVec, int kMaxLoads, typename F>
void with_plan(const RowPlan& p, F&& launch) {
  auto by_loads = [&](auto vec) {
    if (p.loads == 1) launch(vec, std::integral_constant<int, 1>{});
    else if (p.loads == 2) launch(vec, std::integral_constant<int, 2>{});
    else if constexpr (kMaxLoads >= 4) {
      if (p.loads == 4) launch(vec, std::integral_constant<int, 4>{});
      else if constexpr (kMaxLoads >= 8) launch(vec, std::integral_constant<int, 8>{});
    }
  };
  TORCH_INTERNAL_ASSERT(p.fits && p.loads <= kMaxLoads);
  if (p.vec == 1) by_loads(std::integral_constant<int, 1>{});
  else by_loads(std::integral_constant<int, kVec>{});
}

// The long-row kernels: vectorized when the rows allow it.
template <int kVec, typename F>
void with_long_vec(bool aligned, int64_t n, F&& launch) {
  if (aligned && n % kVec == 0) launch(std::integral_constant<int, kVec>{});
  else launch(std::integral_constant<int, 1>{});
}

// Whether rows that need a whole 1024-thread block run faster through the
// two-pass long-row kernels than held in registers. Measured on an H100 at
// 4096 x 32768: float rows reach 92 % of copy bandwidth in two passes (the
// second read comes from L2) against 65 % in registers, where one 128 KB row
// fills a multiprocessor's registers and nothing else overlaps its reductions;
// half rows (64 KB) are faster in registers with the next row prefetched
// (89 % against 79 %).
template <typename scalar_t>
constexpr bool prefers_long() {
  return sizeof(scalar_t) == 4;
}

inline int64_t long_blocks(int64_t rows) {
  // One 1024-thread block per multiprocessor: a block rereads its row soon
  // after the first pass, while the row is still in L2.
  return std::min<int64_t>(rows, multiprocessor_count());
}

struct SoftmaxLauncher {
  // The strided kernel has one thread per row and one load in flight each:
  // with fewer rows than this, transposing first is faster.
  static constexpr int64_t kMinStridedRows = 32768;

  template <typename scalar_t>
  static void softmax_forward(const scalar_t* x, scalar_t* y, RowGeometry geo, int forced) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    constexpr int kVec = vec_width<scalar_t>();
    const bool strided = geo.inner > 1;
    const bool aligned = is_aligned(x) && is_aligned(y);
    constexpr int kLoads = max_loads<scalar_t>(1);
    const RowPlan p = plan_rows<scalar_t>(geo.size, aligned, kLoads);
    const bool block_rows = p.fits && p.vec == kVec && p.threads == kMaxThreads && p.tpr_log2 == 10;
    // Which kernel the row length asks for (Note [softmax kernels]), unless a rung is forced.
    const auto automatic = [&] {
      if (strided) return 1;
      if (block_rows && prefers_long<scalar_t>()) return 2;
      if (block_rows && geo.rows() > 2 * int64_t(multiprocessor_count())) return 4;
      return p.fits ? 3 : 2;
    };
    const int rung = forward_ladder().run(c10::DeviceType::CUDA, forced, automatic(), [&](int r) {
      if (r >= 2 && strided) {
        return std::string("its rows are strided (softmax over a dim that is not the last, with at least ") +
               std::to_string(kMinStridedRows) + " rows); rungs 2-4 read contiguous rows";
      }
      if (r == 3 && !p.fits) {
        return "a row of " + std::to_string(geo.size) + " elements does not fit in the registers of one block";
      }
      if (r == 4 && !block_rows) {
        return "it takes rows that need a whole 1024-thread block of 16-byte loads, got a row of " +
               std::to_string(geo.size) + " elements" + (p.vec == kVec ? "" : " (not read in 16-byte packs)");
      }
      return std::string();
    });
    if (rung == 1) {
      softmax_forward_strided<scalar_t><<<get_blocks(geo.rows()), kThreadsPerBlock, 0, stream>>>(x, y, geo);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    } else if (rung == 2) {
      with_long_vec<kVec>(aligned, geo.size, [&](auto vec) {
        softmax_forward_long<scalar_t, decltype(vec)::value>
            <<<long_blocks(geo.rows()), long_threads<scalar_t>(), 0, stream>>>(x, y, geo);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    } else if (rung == 4) {
      const int sms = multiprocessor_count();
      // Rows that need a whole 1024-thread block, more of them than the GPU
      // runs at once: resident blocks that prefetch their next row (one per
      // multiprocessor; the buffer is the block's slots of a row, up to 128 KB).
      with_plan<kVec, kLoads>(p, [&](auto vec, auto loads) {
        constexpr int V = decltype(vec)::value, L = decltype(loads)::value;
        auto kernel = softmax_forward_rows_prefetch<scalar_t, V, L>;
        const int smem = p.threads * L * kPackBytes;
        C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        kernel<<<sms, p.threads, smem, stream>>>(x, y, geo, p.tpr_log2);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    } else {  // 3
      with_plan<kVec, kLoads>(p, [&](auto vec, auto loads) {
        softmax_forward_rows<scalar_t, decltype(vec)::value, decltype(loads)::value>
            <<<p.blocks(geo.rows()), p.threads, 0, stream>>>(x, y, geo, p.tpr_log2);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    }
  }

  template <typename scalar_t>
  static void softmax_backward(const scalar_t* g, const scalar_t* y, scalar_t* dx, RowGeometry geo) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    constexpr int kVec = vec_width<scalar_t>();
    if (geo.inner > 1) {
      softmax_backward_strided<scalar_t><<<get_blocks(geo.rows()), kThreadsPerBlock, 0, stream>>>(g, y, dx, geo);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    const bool aligned = is_aligned(g) && is_aligned(y) && is_aligned(dx);
    constexpr int kLoads = max_loads<scalar_t>(2);
    const RowPlan p = plan_rows<scalar_t>(geo.size, aligned, kLoads);
    if (p.fits) {
      with_plan<kVec, kLoads>(p, [&](auto vec, auto loads) {
        softmax_backward_rows<scalar_t, decltype(vec)::value, decltype(loads)::value>
            <<<p.blocks(geo.rows()), p.threads, 0, stream>>>(g, y, dx, geo, p.tpr_log2);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    } else {
      with_long_vec<kVec>(aligned, geo.size, [&](auto vec) {
        softmax_backward_long<scalar_t, decltype(vec)::value>
            <<<long_blocks(geo.rows()), long_threads<scalar_t>(), 0, stream>>>(g, y, dx, geo);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    }
  }

  // Note [cross-entropy target check]
  // Targets are validated without a device-side assert: find_bad_target
  // raises a flag for a target outside [0, C), the host reads the flag and the
  // entry point raises ValueError; the CUDA context stays usable. The flag is
  // a word of pinned host memory that the GPU writes directly (TargetFlag), so
  // the check costs one launch: no zeroing kernel, no device-to-host copy. The
  // loss kernel is queued right behind the check, and the host then waits on
  // an event recorded between the two: it waits only for a read of N
  // integers, while the GPU goes on with the loss (and, in training, the
  // backward the host launches next) instead of idling until the host's next
  // launch arrives. The kernels never read logits at an out-of-range target
  // (they write NaN there), so running the loss before the verdict is safe.
  // While the stream is captured into a CUDA graph (torch.compile's
  // mode="reduce-overhead") the host can wait for nothing, so there is no
  // check: a bad target gives a NaN loss, as with the check's verdict ignored.
  //
  // Note [cross-entropy in one launch]
  // A batch whose rows all fit one block of the row kernel (128 threads, a
  // row taking 1 to 32 of them: 32 rows of 10 classes, say) takes one launch
  // instead of three: that block checks the targets itself and
  // adds the row losses up into the mean or sum, which at::mean would do in
  // a launch of its own. Each launch is several microseconds of host time,
  // more than such a kernel runs (tools/host_time.py). The host then waits
  // for the whole loss, which here is about as long as the check alone.
  template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
  static CrossEntropyForward cross_entropy_forward(const scalar_t* logits, const int64_t* target, acc_t* loss,
                                                   int64_t n, int64_t c, Reduction reduction, scalar_t* reduced) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    constexpr int kVec = vec_width<scalar_t>();
    const RowGeometry geo{n, c, 1};
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const bool check = capture == cudaStreamCaptureStatusNone;
    TargetFlag& bad = target_flag(c10::cuda::current_device());
    if (check) *bad.host = 0;  // this thread's last check finished: it waited on bad.checked
    const bool aligned = is_aligned(logits);
    constexpr int kLoads = max_loads<scalar_t>(1);
    // The forward only reads: with a lane per 16 bytes of a 128-class row it
    // spends more time in the row's shuffles than in its loads, so each lane
    // takes up to kReadOnlyLoads loads (fewer lanes per row, fewer shuffle steps).
    const RowPlan p = plan_rows<scalar_t>(c, aligned, kLoads, kReadOnlyLoads);
    const bool rows_kernel = p.fits && !(p.tpr_log2 == 10 && prefers_long<scalar_t>());
    const bool one_launch = rows_kernel && p.blocks(n) == 1 && reduction != Reduction::None;
    if (check && !one_launch) {
      find_bad_target<<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(target, n, c, bad.device);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      C10_CUDA_CHECK(cudaEventRecord(bad.checked, stream));
    }
    if (rows_kernel) {
      with_plan<kVec, kLoads>(p, [&](auto vec, auto loads) {
        cross_entropy_forward_rows<scalar_t, decltype(vec)::value, decltype(loads)::value>
            <<<p.blocks(n), p.threads, 0, stream>>>(logits, target, loss, geo, p.tpr_log2,
                                                    one_launch && check ? bad.device : nullptr,
                                                    one_launch ? reduced : nullptr, reduction == Reduction::Mean);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    } else {
      with_long_vec<kVec>(aligned, c, [&](auto vec) {
        cross_entropy_forward_long<scalar_t, decltype(vec)::value>
            <<<long_blocks(n), long_threads<scalar_t>(), 0, stream>>>(logits, target, loss, geo);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    }
    if (!check) return {true, one_launch};  // captured: no verdict (a bad target's loss is NaN)
    if (one_launch) C10_CUDA_CHECK(cudaEventRecord(bad.checked, stream));
    // Waits: the price of a ValueError instead of an assert.
    C10_CUDA_CHECK(cudaEventSynchronize(bad.checked));
    return {*static_cast<volatile int*>(bad.host) == 0, one_launch};
  }

  template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
  static void cross_entropy_backward(const scalar_t* grad_loss, int64_t grad_stride, acc_t scale,
                                     const scalar_t* logits, const int64_t* target, scalar_t* grad, int64_t n,
                                     int64_t c) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    constexpr int kVec = vec_width<scalar_t>();
    const RowGeometry geo{n, c, 1};
    const bool aligned = is_aligned(logits) && is_aligned(grad);
    constexpr int kLoads = max_loads<scalar_t>(1);
    const RowPlan p = plan_rows<scalar_t>(c, aligned, kLoads);
    if (p.fits && !(p.tpr_log2 == 10 && prefers_long<scalar_t>())) {
      with_plan<kVec, kLoads>(p, [&](auto vec, auto loads) {
        cross_entropy_backward_rows<scalar_t, decltype(vec)::value, decltype(loads)::value>
            <<<p.blocks(n), p.threads, 0, stream>>>(grad_loss, grad_stride, scale, logits, target, grad, geo,
                                                    p.tpr_log2);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    } else {
      with_long_vec<kVec>(aligned, c, [&](auto vec) {
        cross_entropy_backward_long<scalar_t, decltype(vec)::value>
            <<<long_blocks(n), long_threads<scalar_t>(), 0, stream>>>(grad_loss, grad_stride, scale, logits, target, grad, geo);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    }
  }
};

}  // namespace
}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::softmax::register_kernels<labops::softmax::Entry<labops::cuda::SoftmaxLauncher>>(m);
}
