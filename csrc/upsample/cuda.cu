// CUDA kernels for bilinear upsampling. The coordinate math (which pixels an
// output reads, with which weights, which outputs read an input) is
// upsample/upsample.h's; this file only decides how threads share the work:
//  * forward, three rungs (forward_ladder in entry.h, Note [the ladder] in
//    common/ladder.h), the default the highest that can take the call:
//      1 textbook     forward_kernel, the grid-stride loop over forward_at();
//      2 column_rows  forward_rows_kernel (see Note [column-owning threads]),
//                     output width a multiple of V;
//      3 staged_rows  forward_staged_kernel (see Note [staged input rows]),
//                     as 2 and upsampling on both axes;
//  * deterministic backward: gather_columns_kernel, gather_rows_kernel or
//    gather_direct_kernel (see Note [deterministic gather]);
//  * non-deterministic backward: scatter_kernel (atomics), the lesson's.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../common/loop.h"
#include "entry.h"
#include "../common/cuda/device.cuh"
#include "../common/cuda/vec.cuh"

namespace labops::cuda {
namespace {

using upsample::Axis;
using upsample::Range;
using upsample::Taps;

// Shared memory for one contracted output row in the gather kernel (the
// default per-block limit, no opt-in needed).
constexpr int64_t kSmemBytes = 48 * 1024;

// ---- forward ----

template <typename scalar_t, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t n, Axis<T> ah, Axis<T> aw) {
  LABOPS_KERNEL_LOOP(i, n) { y[i] = static_cast<scalar_t>(upsample::forward_at(i, x, ah, aw)); }
}

// V consecutive outputs of one output row, whose input row pair is (top,
// bottom) and whose column taps are tw: each input column that neighbouring
// outputs share is loaded once.
// (The rows may be read as in_t and written as another out_t: the staged
// kernel reads rows already converted to T from shared memory.)
template <typename in_t, typename T, int V, typename out_t = in_t>
__device__ __forceinline__ Pack<out_t, V> blend_columns(const in_t* __restrict__ top,
                                                        const in_t* __restrict__ bottom,
                                                        const Taps<T> (&tw)[V], T lambda_h) {
  // The two columns the previous output read, and their top/bottom values.
  int64_t col0 = -1, col1 = -1;
  T top0 = T(0), bottom0 = T(0), top1 = T(0), bottom1 = T(0);
  Pack<out_t, V> out;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    T ta, ba, tb, bb;
    if (tw[k].i0 == col1) {
      ta = top1, ba = bottom1;
    } else if (tw[k].i0 == col0) {
      ta = top0, ba = bottom0;
    } else {
      ta = static_cast<T>(top[tw[k].i0]), ba = static_cast<T>(bottom[tw[k].i0]);
    }
    if (tw[k].i1 == tw[k].i0) {
      tb = ta, bb = ba;
    } else if (tw[k].i1 == col1) {
      tb = top1, bb = bottom1;
    } else {
      tb = static_cast<T>(top[tw[k].i1]), bb = static_cast<T>(bottom[tw[k].i1]);
    }
    out.val[k] = static_cast<out_t>(upsample::bilinear_blend(ta, tb, ba, bb, lambda_h, tw[k].lambda));
    col0 = tw[k].i0, top0 = ta, bottom0 = ba;
    col1 = tw[k].i1, top1 = tb, bottom1 = bb;
  }
  return out;
}

// Output columns per thread in forward_rows_kernel: 16 bytes of floats, but 8
// bytes of halves. Eight half columns need eight sets of taps in registers
// (85 per thread on sm_90, a quarter of the warps resident); four are 3-10 %
// faster on an H100 at 16x64x128x128 and 8x256x64x64.
template <typename scalar_t>
constexpr int forward_pack() {
  return sizeof(scalar_t) == 2 ? 4 : vec_width<scalar_t>();
}

// Note [column-owning threads]
// The fast kernels give each thread a fixed set of columns and let it walk
// down many rows: a column's taps (which input columns, which weights) are
// the same in every row of every plane, so the thread computes them once and
// each row then costs a few loads, multiply-adds and a store. In the forward
// a thread owns V consecutive output columns (forward_pack: 4 floats or 4
// halves), written with one vector store per row, and loads each input column its
// outputs share once (blend_columns: a x2 upsample loads 3 columns of each of
// the two input rows for 4 outputs). forward_kernel serves rows whose width
// is not a multiple of V.
//
// Thread (x, y) of block (bx, by) owns output columns [V*c, V*c + V) with
// c = by * blockDim.x + x, and visits rows (plane * out_h + oy) threadIdx.y +
// blockDim.y * bx, then every blockDim.y * gridDim.x rows. index_t is 32-bit
// when the row count allows it (its divisions are several times cheaper).
template <typename scalar_t, typename T, int V, typename index_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_rows_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, index_t rows,
                        Axis<T> ah, Axis<T> aw) {
  const int64_t first_col = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * V;
  if (first_col >= aw.out) return;  // no barrier below, so idle threads may leave
  Taps<T> tw[V];
#pragma unroll
  for (int k = 0; k < V; ++k) tw[k] = upsample::source_taps(first_col + k, aw);
  const index_t out_h = static_cast<index_t>(ah.out);
  const index_t step = static_cast<index_t>(blockDim.y) * gridDim.x;
  for (index_t row = static_cast<index_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const Taps<T> th = upsample::source_taps(static_cast<int64_t>(row % out_h), ah);
    const scalar_t* plane = x + static_cast<int64_t>(row / out_h) * ah.in * aw.in;
    store_pack<V>(y + static_cast<int64_t>(row) * aw.out + first_col,
                  blend_columns<scalar_t, T, V>(plane + th.i0 * aw.in, plane + th.i1 * aw.in, tw, th.lambda));
  }
}

// Note [staged input rows]
// forward_rows_kernel reads its inputs straight from global memory: each input
// element is fetched by several threads (neighbouring columns, and the output
// rows that share an input row), one scalar load at a time. The staged kernel
// gives a block a tile of `tile_rows` consecutive output rows of one plane.
// The input rows that tile reads are contiguous in memory, so the block first
// copies them into shared memory with 16-byte loads (each input element read
// from memory once per tile), then every thread blends its V columns of the
// tile's rows from shared memory and writes them with one vector store per
// row. A thread keeps the same columns for all the rows it writes, so their
// taps are computed once. The shared buffer holds `max_rows` input rows; the
// launcher sizes it from the scale, and a tile that would need more (it
// cannot for a monotone coordinate map, but the kernel does not trust
// floating point) blends from global memory instead.
template <typename scalar_t, typename T, int V, int kStageVec>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_staged_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, Axis<T> ah, Axis<T> aw,
                          int tile_rows, int max_rows, int64_t tiles_per_plane, int lanes) {
  extern __shared__ __align__(16) unsigned char staged_raw[];
  T* staged = reinterpret_cast<T*>(staged_raw);  // max_rows x aw.in
  const int64_t plane = blockIdx.x / tiles_per_plane;
  const int64_t first_out = (blockIdx.x - plane * tiles_per_plane) * tile_rows;
  const int out_rows = static_cast<int>(ah.out - first_out < tile_rows ? ah.out - first_out : tile_rows);
  const int64_t first_in = upsample::source_taps(first_out, ah).i0;
  const int in_rows = static_cast<int>(upsample::source_taps(first_out + out_rows - 1, ah).i1 - first_in + 1);
  const scalar_t* plane_x = x + plane * ah.in * aw.in;
  const bool use_stage = in_rows <= max_rows;  // the same for the whole block
  if (use_stage) {
    using StagePack = Pack<scalar_t, kStageVec>;
    const scalar_t* src = plane_x + first_in * aw.in;  // in_rows whole rows, contiguous
    const int packs = in_rows * static_cast<int>(aw.in) / kStageVec;
    for (int q = threadIdx.x; q < packs; q += blockDim.x) {
      const StagePack v = load_pack<kStageVec>(src, q);
#pragma unroll
      for (int e = 0; e < kStageVec; ++e) staged[q * kStageVec + e] = static_cast<T>(v.val[e]);
    }
    __syncthreads();
  }
  // Thread (lane, sub): columns chunk lane, lane + lanes, ...; rows sub, sub + row_step, ...
  const int row_step = blockDim.x / lanes;
  const int sub = threadIdx.x / lanes;
  if (sub >= row_step) return;  // the last few threads when lanes does not divide the block
  const int64_t chunks = aw.out / V;
  for (int64_t chunk = threadIdx.x % lanes; chunk < chunks; chunk += lanes) {
    Taps<T> tw[V];
#pragma unroll
    for (int k = 0; k < V; ++k) tw[k] = upsample::source_taps(chunk * V + k, aw);
    for (int r = sub; r < out_rows; r += row_step) {
      const Taps<T> th = upsample::source_taps(first_out + r, ah);
      scalar_t* out = y + (plane * ah.out + first_out + r) * aw.out + chunk * V;
      if (use_stage) {
        store_pack<V>(out, blend_columns<T, T, V, scalar_t>(staged + (th.i0 - first_in) * aw.in,
                                                            staged + (th.i1 - first_in) * aw.in, tw, th.lambda));
      } else {
        store_pack<V>(out, blend_columns<scalar_t, T, V>(plane_x + th.i0 * aw.in, plane_x + th.i1 * aw.in, tw,
                                                        th.lambda));
      }
    }
  }
}

// How the staged kernel tiles the output; valid() is false when it does not
// apply (then forward_rows_kernel runs).
struct StagePlan {
  const char* why_not = "";  // when !valid(): why, for a forced rung 3
  int tile_rows = 0;
  int max_rows = 0;
  int lanes = 0;
  int64_t tiles_per_plane = 0;
  int64_t blocks = 0;
  int64_t smem_bytes = 0;
  bool valid() const { return tile_rows > 0; }
};

template <typename T>
StagePlan plan_stage(int64_t planes, const Axis<T>& ah, const Axis<T>& aw, int V, int stage_vec, int64_t elem_bytes) {
  StagePlan p;
  const int64_t chunks = aw.out / V;
  if (chunks == 0 || ah.out == 0 || aw.in % stage_vec != 0) {
    p.why_not = "the output has no whole pack of V columns";
    return p;
  }
  // Upsampling only: when an axis shrinks, most staged rows or columns would
  // be copied and never read.
  if (ah.scale > T(1) || aw.scale > T(1)) {
    p.why_not = "it upsamples only, and this call shrinks an axis";
    return p;
  }
  // About 8 stores per thread per tile; fewer rows if the input rows would not fit.
  int64_t rows = std::clamp<int64_t>(int64_t(kThreadsPerBlock) * 8 / chunks, 1, ah.out);
  // Input rows a tile of `rows` outputs can span: the coordinate moves by
  // ah.scale per output row, plus the second tap, plus one for rounding.
  auto rows_needed = [&](int64_t r) {
    return std::min<int64_t>(ah.in, static_cast<int64_t>(static_cast<double>(ah.scale) * (r - 1)) + 3);
  };
  while (rows > 1 && rows_needed(rows) * aw.in * elem_bytes > kSmemBytes) rows /= 2;
  const int64_t max_rows = rows_needed(rows);
  if (max_rows * aw.in * elem_bytes > kSmemBytes) {
    p.why_not = "the input rows of one output row do not fit in shared memory";
    return p;
  }
  // The staged copy counts packs in int; the output index is int64.
  if (!fits_int32(max_rows * aw.in)) {
    p.why_not = "a tile's input rows hold 2^31 elements or more";
    return p;
  }
  p.tiles_per_plane = ceil_div<int64_t>(ah.out, rows);
  p.blocks = planes * p.tiles_per_plane;
  if (p.blocks > std::numeric_limits<int32_t>::max()) {
    p.why_not = "it would need 2^31 blocks or more";
    return p;
  }
  p.tile_rows = static_cast<int>(rows);
  p.max_rows = static_cast<int>(max_rows);
  p.lanes = static_cast<int>(std::min<int64_t>(chunks, kThreadsPerBlock));
  p.smem_bytes = max_rows * aw.in * elem_bytes;
  return p;
}

// Blocks of kThreadsPerBlock threads: blockDim.x threads across the row's
// column chunks (at most all of them; a warp spans several rows when rows are short),
// the rest of the block on further rows; enough blocks along x to fill the
// GPU about twice, so each thread walks many rows with the taps it computed
// once.
struct RowsGrid {
  dim3 blocks;
  dim3 threads;

  // Whether the kernels' row index may be 32-bit for `rows` rows: the last
  // grid-stride step passes `rows` by up to one grid's rows.
  bool fits_int32_rows(int64_t rows) const {
    return fits_int32(rows + int64_t(blocks.x) * threads.y);
  }
};

inline RowsGrid rows_grid(int64_t chunks_per_row, int64_t rows) {
  const int64_t tx = std::min<int64_t>(kThreadsPerBlock, chunks_per_row);
  const int64_t ty = kThreadsPerBlock / tx;
  const int64_t blocks_y = ceil_div(chunks_per_row, tx);
  const int64_t resident = int64_t(multiprocessor_count()) * (2048 / kThreadsPerBlock) * 2;  // two waves
  const int64_t blocks_x = std::max<int64_t>(
      1, std::min<int64_t>(ceil_div(rows, ty), std::max<int64_t>(1, resident / blocks_y)));
  return RowsGrid{dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y)),
                  dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
}

// ---- deterministic backward: gather ----

// Note [deterministic gather]
// The backward is a gather: each thread sums the outputs that read the input
// pixels it owns, in a fixed order, so every grad_in value is the same on
// every run (no atomics). Three kernels, by shape:
//  * gather_columns_kernel (the common case): a thread owns one input column
//    w; the output columns that read it are a short contiguous range (4 for
//    x2) whose weights it keeps in registers. Per input row it sums those
//    columns of the few output rows that read the row, from a table the block
//    builds once in shared memory.
//  * gather_rows_kernel serves large upsampling factors (more than 8 outputs
//    read each input): one block per input row contracts the output rows that
//    read it in shared memory first.
//  * gather_direct_kernel (gather_at per element) serves rows too wide for
//    shared memory.

template <typename scalar_t, typename T, int V>
__global__ void __launch_bounds__(kThreadsPerBlock)
    gather_rows_kernel(const scalar_t* __restrict__ g, scalar_t* __restrict__ grad_in, int64_t rows,
                       Axis<T> ah, Axis<T> aw) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* t = reinterpret_cast<T*>(smem_raw);  // one output row, contracted along h
  const int64_t chunks = aw.out / V;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {  // row = plane * in_h + h
    const int64_t h = row % ah.in;
    const scalar_t* gp = g + (row / ah.in) * ah.out * aw.out;
    const Range r = upsample::outputs_reading(h, ah);
    // 1. t[x] = sum over the output rows y reading h of A_h[y, h] * G[y, x].
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      T acc[V];
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = T(0);
#pragma unroll 4
      for (int64_t oy = r.begin; oy < r.end; ++oy) {
        const T wy = upsample::tap_weight(upsample::source_taps(oy, ah), h);
        const Pack<scalar_t, V> v = load_pack<V>(gp + oy * aw.out + c * V);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += wy * static_cast<T>(v.val[k]);
      }
#pragma unroll
      for (int k = 0; k < V; ++k) t[c * V + k] = acc[k];
    }
    __syncthreads();
    // 2. grad_in[h, w] = sum over the output columns x reading w of A_w[x, w] * t[x].
    scalar_t* out = grad_in + row * aw.in;
    for (int64_t w = threadIdx.x; w < aw.in; w += blockDim.x) {
      out[w] = static_cast<scalar_t>(upsample::column_gather(w, t, aw));
    }
    __syncthreads();  // t is rewritten for the next row
  }
}

// The output rows that read input row h (a contiguous range, at most
// kMaxRows long when the launcher's bound holds) and their weights A_h[y, h].
template <typename T, int kMaxRows>
struct RowsReading {
  int64_t begin;
  int count;
  T weight[kMaxRows];
};

// Thread x of block (bx, by) owns input column w = by * blockDim.x + x and
// visits input rows (plane * in_h + h) like forward_rows_kernel. The output
// columns reading w are [xb, xb + count) with count <= kMaxCols; their
// weights A_w[x, w] stay in registers. The row side is the same for every
// column and every plane: the block computes it once per h into a shared
// table (in_h entries) instead of once per row and warp.
template <typename scalar_t, typename T, int kMaxCols, int kMaxRows, typename index_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    gather_columns_kernel(const scalar_t* __restrict__ g, scalar_t* __restrict__ grad_in, index_t rows,
                          Axis<T> ah, Axis<T> aw) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* table = reinterpret_cast<RowsReading<T, kMaxRows>*>(smem_raw);
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int64_t h = tid; h < ah.in; h += blockDim.x * blockDim.y) {
    const upsample::Range r = upsample::outputs_reading(h, ah);
    RowsReading<T, kMaxRows> entry{r.begin, static_cast<int>(r.end - r.begin), {}};
#pragma unroll
    for (int k = 0; k < kMaxRows; ++k) {
      entry.weight[k] = k < entry.count ? upsample::tap_weight(upsample::source_taps(r.begin + k, ah), h) : T(0);
    }
    table[h] = entry;
  }
  __syncthreads();

  const int64_t w = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (w >= aw.in) return;  // no barrier below
  const upsample::Range cols = upsample::outputs_reading(w, aw);
  const int count = static_cast<int>(cols.end - cols.begin);
  T weight_x[kMaxCols];
#pragma unroll
  for (int k = 0; k < kMaxCols; ++k) {
    weight_x[k] = k < count ? upsample::tap_weight(upsample::source_taps(cols.begin + k, aw), w) : T(0);
  }
  // sum over the output columns reading w of A_w[x, w] * g_row[x]
  auto along_w = [&](const scalar_t* g_row) {
    if (count > kMaxCols) return upsample::column_gather(w, g_row, aw);  // only if the launcher's bound fails
    T sum = T(0);
#pragma unroll
    for (int k = 0; k < kMaxCols; ++k) {
      if (k < count) sum += weight_x[k] * static_cast<T>(g_row[cols.begin + k]);
    }
    return sum;
  };
  const index_t in_h = static_cast<index_t>(ah.in);
  const index_t step = static_cast<index_t>(blockDim.y) * gridDim.x;
  for (index_t row = static_cast<index_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const int64_t h = row % in_h;
    const scalar_t* plane = g + static_cast<int64_t>(row / in_h) * ah.out * aw.out;
    const RowsReading<T, kMaxRows>& entry = table[h];
    T acc = T(0);
    if (entry.count <= kMaxRows) {
      // A loop of exactly entry.count trips (4 or 5 for x2): the weights are in
      // shared memory, so they may be indexed at run time.
      for (int k = 0; k < entry.count; ++k) acc += entry.weight[k] * along_w(plane + (entry.begin + k) * aw.out);
    } else {  // only if the launcher's bound fails: correct, and slow
      for (int64_t oy = entry.begin; oy < entry.begin + entry.count; ++oy) {
        acc += upsample::tap_weight(upsample::source_taps(oy, ah), h) * along_w(plane + oy * aw.out);
      }
    }
    grad_in[static_cast<int64_t>(row) * aw.in + w] = static_cast<scalar_t>(acc);
  }
}

// How many outputs read one input index i, at most: those whose clamped
// source coordinate lies in [i - 1, i + 1); for half_pixel and i = 1 that
// includes every output clamped onto pixel 0, an interval of length
// 2.5 / scale in all, holding at most floor(2.5 / scale) + 1 integers (5 for
// x2; interior pixels have 4). Float rounding of a coordinate could add one:
// the gather kernel then takes its slow, exact path for that pixel.
template <typename T>
int64_t max_outputs_per_input(const Axis<T>& a) {
  if (!(a.scale > T(0))) return a.out;
  return static_cast<int64_t>(2.5 / static_cast<double>(a.scale)) + 1;
}

template <typename scalar_t, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    gather_direct_kernel(const scalar_t* __restrict__ g, scalar_t* __restrict__ grad_in, int64_t n,
                         Axis<T> ah, Axis<T> aw) {
  LABOPS_KERNEL_LOOP(i, n) { grad_in[i] = static_cast<scalar_t>(upsample::gather_at(i, g, ah, aw)); }
}

// ---- non-deterministic backward: scatter with atomics ----
// The lesson's version: one thread per output, four atomicAdds into a zeroed
// opmath buffer; the order of the adds, so the rounding, varies run to run.

template <typename T>
struct AtomicAdd {
  T* acc;
  __device__ __forceinline__ void operator()(int64_t offset, T value) const { atomicAdd(acc + offset, value); }
};

template <typename scalar_t, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    scatter_kernel(const scalar_t* __restrict__ g, T* __restrict__ acc, int64_t n, Axis<T> ah, Axis<T> aw) {
  AtomicAdd<T> add{acc};
  LABOPS_KERNEL_LOOP(i, n) { upsample::scatter_at(i, static_cast<T>(g[i]), ah, aw, add); }
}

template <typename scalar_t, typename T, int V>
void launch_gather_rows(const scalar_t* g, scalar_t* grad_in, int64_t rows, const Axis<T>& ah,
                        const Axis<T>& aw, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(aw.out) * sizeof(T);
  // Enough threads for the wider of the two phases, in whole warps.
  const int64_t work = std::max<int64_t>(aw.out / V, aw.in);
  const int threads = static_cast<int>(std::min<int64_t>(kThreadsPerBlock, std::max<int64_t>(32, ceil_div<int64_t>(work, 32) * 32)));
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, gather_rows_kernel<scalar_t, T, V>, threads, smem));
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(rows, int64_t(multiprocessor_count()) * std::max(per_sm, 1)));
  gather_rows_kernel<scalar_t, T, V><<<blocks, threads, smem, stream>>>(g, grad_in, rows, ah, aw);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

struct UpsampleLauncher {
  template <typename scalar_t, typename T>
  static void forward(const scalar_t* x, scalar_t* y, int64_t planes, const Axis<T>& ah, const Axis<T>& aw,
                      int forced) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t n = planes * ah.out * aw.out;
    const int64_t rows = planes * ah.out;
    forward_with<scalar_t, T, forward_pack<scalar_t>()>(x, y, n, rows, ah, aw, forced, stream);
  }

  template <typename scalar_t, typename T, int V>
  static void forward_with(const scalar_t* x, scalar_t* y, int64_t n, int64_t rows, const Axis<T>& ah,
                           const Axis<T>& aw, int forced, cudaStream_t stream) {
    constexpr int kVec = vec_width<scalar_t>();
    const int64_t planes = ah.out > 0 ? rows / ah.out : 0;
    // Rungs 2 and 3 write V columns with one vector store (y is fresh memory, aligned).
    const bool whole_packs = aw.out % V == 0 && is_aligned(y);
    // Staged rows (Note [staged input rows]): 16-byte copies when every row
    // starts on a 16-byte boundary, else one element at a time.
    const bool vec_rows = is_aligned(x) && aw.in % kVec == 0;
    const StagePlan sp = whole_packs ? plan_stage(planes, ah, aw, V, vec_rows ? kVec : 1, sizeof(T)) : StagePlan{};
    ladder::Ladder& rungs = upsample::forward_ladder();
    const int rung = rungs.run(c10::DeviceType::CUDA, forced, sp.valid() ? 3 : whole_packs ? 2 : 1, [&](int r) {
      if (r >= 2 && !whole_packs) {
        return "the output width " + std::to_string(aw.out) + " is not a multiple of V = " + std::to_string(V) +
               " (the columns a thread owns)";
      }
      return r == 3 && !sp.valid() ? std::string(sp.why_not) : std::string();
    });
    if (rung == 3) {
      auto launch = [&](auto stage_vec) {
        forward_staged_kernel<scalar_t, T, V, decltype(stage_vec)::value>
            <<<sp.blocks, kThreadsPerBlock, sp.smem_bytes, stream>>>(x, y, ah, aw, sp.tile_rows, sp.max_rows,
                                                                    sp.tiles_per_plane, sp.lanes);
      };
      if (vec_rows) launch(std::integral_constant<int, kVec>{});
      else launch(std::integral_constant<int, 1>{});
    } else if (rung == 2) {
      const RowsGrid grid = rows_grid(aw.out / V, rows);
      if (grid.fits_int32_rows(rows)) {
        forward_rows_kernel<scalar_t, T, V, uint32_t><<<grid.blocks, grid.threads, 0, stream>>>(
            x, y, static_cast<uint32_t>(rows), ah, aw);
      } else {
        forward_rows_kernel<scalar_t, T, V, int64_t><<<grid.blocks, grid.threads, 0, stream>>>(
            x, y, rows, ah, aw);
      }
    } else {
      forward_kernel<scalar_t, T><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(x, y, n, ah, aw);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t, typename T>
  static void backward_gather(const scalar_t* g, scalar_t* grad_in, int64_t planes, const Axis<T>& ah,
                              const Axis<T>& aw) {
    constexpr int V = vec_width<scalar_t>();
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t rows = planes * ah.in;
    const int64_t table_bytes = ah.in * static_cast<int64_t>(sizeof(RowsReading<T, 8>));
    const int64_t cols = max_outputs_per_input(aw);
    if (cols <= 8 && max_outputs_per_input(ah) <= 8 && table_bytes <= kSmemBytes) {
      const RowsGrid grid = rows_grid(aw.in, rows);
      const bool small = grid.fits_int32_rows(rows);
      // The column loop is unrolled (its weights live in registers): as few
      // trips as the scale allows, 6 up to x2.
      auto launch = [&](auto max_cols, auto index) {
        using index_t = decltype(index);
        gather_columns_kernel<scalar_t, T, decltype(max_cols)::value, 8, index_t>
            <<<grid.blocks, grid.threads, table_bytes, stream>>>(g, grad_in, static_cast<index_t>(rows), ah, aw);
      };
      if (cols <= 6) {
        small ? launch(std::integral_constant<int, 6>{}, uint32_t{}) : launch(std::integral_constant<int, 6>{}, int64_t{});
      } else {
        small ? launch(std::integral_constant<int, 8>{}, uint32_t{}) : launch(std::integral_constant<int, 8>{}, int64_t{});
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    } else if (aw.out * static_cast<int64_t>(sizeof(T)) <= kSmemBytes) {
      if (aw.out % V == 0 && is_aligned(g)) {
        launch_gather_rows<scalar_t, T, V>(g, grad_in, rows, ah, aw, stream);
      } else {
        launch_gather_rows<scalar_t, T, 1>(g, grad_in, rows, ah, aw, stream);
      }
    } else {
      const int64_t n = rows * aw.in;
      gather_direct_kernel<scalar_t, T><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(g, grad_in, n, ah, aw);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }

  template <typename scalar_t, typename T>
  static void backward_scatter(const scalar_t* g, T* acc, int64_t planes, const Axis<T>& ah, const Axis<T>& aw) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t n = planes * ah.out * aw.out;
    scatter_kernel<scalar_t, T><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(g, acc, n, ah, aw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace
}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::upsample::register_kernels<labops::upsample::Entry<labops::cuda::UpsampleLauncher>>(m);
}
