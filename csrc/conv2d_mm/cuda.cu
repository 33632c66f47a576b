// CUDA kernels of im2col, col2im and conv2d_mm: the shared entry points
// (conv2d_mm/entry.h) with a CUDA launcher that runs the bodies of
// conv2d_mm/conv2d_mm.h. The GEMMs of conv2d_mm call cuBLAS directly (see Note
// [GEMMs without ATen's wrapper]).
//
// The conv2d_mm forward's rungs (forward_ladder in entry.h, Note [the ladder]):
//   1 textbook     forward_textbook_kernel: one thread per output element,
//                  forward_at (the direct convolution), grid-stride loop;
//   2 im2col_gemm  im2col_kernel, then one strided-batched cuBLAS GEMM per
//                  chunk of images; the default where rungs 4 and 5 cannot take the input.
//   3 implicit_gemm  implicit_gemm_kernel: the same GEMM over the whole batch,
//                  its columns loaded from x into shared memory tile by tile
//                  and never written (Note [implicit GEMM]); FFMA in float32
//                  (float64 for float64), any stride, padding, dilation.
//   4 tensor_cores  tensor_core_gemm_kernel: rung 3's GEMM on tensor cores (mma.sync), x
//                  read as channels_last (Note [tensor-core implicit GEMM]); the default
//                  wherever TensorCorePlan takes the input and rung 5 does not.
//   5 wgmma        wgmma_gemm_kernel: rung 4's GEMM on Hopper's warpgroup tensor cores
//                  (Note [wgmma implicit GEMM]); wgmma_tma_gemm_kernel where C allows, its
//                  tiles loaded by TMA (Note [TMA tiles]) from a producer warp (Note
//                  [warp-specialized TMA pipeline]); the default on an H100 or H200 for
//                  float16, bfloat16 and TF32 wherever it takes the input.
// The fastest of rungs 5 and 4 that takes the shape also computes the input gradient at
// stride 1 and the weight gradient of all but small images (Notes [the input gradient as a
// convolution], [the weight gradient as a convolution]).
// Rungs 1 to 3 read x as NCHW: entry.h makes a channels_last x contiguous first. Rungs 4
// and 5 write a channels_last output where x is channels_last, the others NCHW.
#include <algorithm>
#include <atomic>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mv.h>
#include <ATen/ops/ones.h>
#include <cublas_v2.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // CUtensorMap, the driver functions that make one (Note [TMA tiles])
#include <torch/library.h>

#include "../common/fast_divider.h"
#include "../common/loop.h"
#include "entry.h"
#include "conv2d_mm.h"
#include "../common/cuda/device.cuh"
#include "../common/cuda/elementwise.cuh"
#include "../common/cuda/mma.cuh"
#include "../common/cuda/tma.cuh"
#include "../common/cuda/wgmma.cuh"
#include "../common/cuda/reduce.cuh"
#include "../common/cuda/vec.cuh"

namespace labops::cuda {

// Note [im2col work items]
// One thread per work item = V consecutive column positions of one plane, for
// all kH*kW taps (Caffe's thread-per-window, widened). For each tap the V
// values are contiguous in the columns, so when L is a multiple of V a thread
// stores them as one vector (16 bytes; 8 for 2-byte types); across a warp the
// stores of one tap are contiguous. The loads are the V pixels a tap sees,
// read through L1 (neighbouring taps and threads reuse them). F.unfold, by
// contrast, launches one kernel per image and stores one element at a time.
template <int V, typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    im2col_kernel(const conv2d_mm::Im2colShape s, const scalar_t* __restrict__ x, scalar_t* __restrict__ col,
                  int64_t items) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(item, items) {
    conv2d_mm::im2col_item<V, acc_t>(s, x, item, [&](int64_t offset, const scalar_t* values, int count) {
      if constexpr (V == 1) {
        col[offset] = values[0];
      } else {  // the launcher picks V > 1 only when every item is full and aligned
        Pack<scalar_t, V> v;
#pragma unroll
        for (int u = 0; u < V; ++u) v.val[u] = values[u];
        store_pack<V>(col + offset, v);
      }
    });
  }
}

// Note [im2col through shared memory]
// The weight gradient's columns put the images of a row side by side (col_batch_stride = L): row (c, tap) is
// one run of nb * L values, image after image. There a block takes channel c of `group` images and copies the
// window of each plane that the taps read (WindowCopy: the plane with its zero padding around it) into shared
// memory once; a thread then owns a value of the run and writes it for every tap, each a load from the copy at
// that tap's fixed offset, with no bounds to check. im2col_kernel instead reads every pixel from global memory
// once a tap, with 64-bit index math and bounds checks per value: measured on an H100 (float16, 7 x 7, batch
// 128), 84 us for 58 MB of columns, 0.7 TB/s.
struct WindowCopy {
  int top, left;      // input_coord of output (0, 0) at tap (0, 0): the copy's first row and column
  int rows, columns;  // of the window every tap of every output reads
  explicit WindowCopy(const conv2d_mm::Im2colShape& s)
      : top(static_cast<int>(conv::input_coord<int64_t>(0, 0, s.stride_h, s.pad_h, s.dilation_h))),
        left(static_cast<int>(conv::input_coord<int64_t>(0, 0, s.stride_w, s.pad_w, s.dilation_w))),
        rows(static_cast<int>(conv::input_coord<int64_t>(s.out_h - 1, s.kernel_h - 1, s.stride_h, s.pad_h,
                                                         s.dilation_h) + 1 - top)),
        columns(static_cast<int>(conv::input_coord<int64_t>(s.out_w - 1, s.kernel_w - 1, s.stride_w, s.pad_w,
                                                            s.dilation_w) + 1 - left)) {}
};

template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    im2col_through_shared_kernel(const conv2d_mm::Im2colShape s, const WindowCopy window,
                                 const scalar_t* __restrict__ x, scalar_t* __restrict__ col, int group) {
  extern __shared__ unsigned char im2col_shared[];
  scalar_t* copy = reinterpret_cast<scalar_t*>(im2col_shared);  // copy[n - n0][row][column]
  const int H = static_cast<int>(s.height), W = static_cast<int>(s.width), HW = H * W;
  const int L = static_cast<int>(s.blocks()), out_w = static_cast<int>(s.out_w);
  const int sh = static_cast<int>(s.stride_h), sw = static_cast<int>(s.stride_w);
  const int ph = static_cast<int>(s.pad_h), pw = static_cast<int>(s.pad_w);
  const int dh = static_cast<int>(s.dilation_h), dw = static_cast<int>(s.dilation_w);
  const int copy_plane = window.rows * window.columns, taps = static_cast<int>(s.kernel_area());
  const int64_t groups = (s.batch + group - 1) / group, items = s.channels * groups;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t c = item / groups, n0 = (item - c * groups) * group;
    const int images = static_cast<int>(min(static_cast<int64_t>(group), s.batch - n0)), run = images * L;
    const scalar_t* planes = x + (n0 * s.channels + c) * HW;  // image n's plane at n * C * HW
    __syncthreads();  // the previous item's reads of the copy are done
    // kLoads loads of a thread in flight at once (one at a time, the copy waited on each: latency-bound).
    constexpr int kLoads = 8;
    for (int i0 = threadIdx.x; i0 < images * copy_plane; i0 += blockDim.x * kLoads) {
      scalar_t values[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int i = i0 + u * blockDim.x, n = i / copy_plane, r = (i - n * copy_plane) / window.columns;
        const int ih = window.top + r, iw = window.left + (i - n * copy_plane - r * window.columns);
        const bool inside = i < images * copy_plane && conv::in_bounds(ih, H) && conv::in_bounds(iw, W);
        values[u] = inside ? planes[n * s.channels * HW + ih * W + iw] : scalar_t(0);
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        if (i0 + u * blockDim.x < images * copy_plane) copy[i0 + u * blockDim.x] = values[u];
      }
    }
    __syncthreads();
    scalar_t* row0 = col + c * taps * s.col_row_stride + n0 * L;  // tap 0's run
    for (int f = threadIdx.x; f < run; f += blockDim.x) {
      const int n = f / L, p = f - n * L, oh = p / out_w, ow = p - oh * out_w;
      // input_coord(o, k) = input_coord(o, 0) + input_coord(0, k, 1, 0, d): the output's tap (0, 0) in the
      // copy, then each tap's reach from it.
      const int top = conv::input_coord<int>(oh, 0, sh, ph, dh) - window.top;
      const int left = conv::input_coord<int>(ow, 0, sw, pw, dw) - window.left;
      const scalar_t* at = copy + n * copy_plane + top * window.columns + left;
      scalar_t* out = row0 + f;
      for (int kh = 0; kh < s.kernel_h; ++kh) {
        const scalar_t* row = at + conv::input_coord<int>(0, kh, 1, 0, dh) * window.columns;
        for (int kw = 0; kw < s.kernel_w; ++kw, out += s.col_row_stride) {
          *out = row[conv::input_coord<int>(0, kw, 1, 0, dw)];
        }
      }
    }
  }
}

// Rung 1 of the forward, the textbook: thread i computes output element i
// with conv2d_mm.h's forward_at, as the CPU's rung 1 does. Every thread reads
// all C*kH*kW weights of its filter and the pixels under its window from
// global memory (through L1): no columns, but no reuse in registers either.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_textbook_kernel(const conv2d_mm::Im2colShape s, const scalar_t* __restrict__ x,
                            const scalar_t* __restrict__ w, const scalar_t* __restrict__ bias, int64_t out_channels,
                            scalar_t* __restrict__ out, int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(i, n) {
    out[i] = static_cast<scalar_t>(conv2d_mm::forward_at<acc_t>(s, x, w, bias, out_channels, i));
  }
}

// Note [implicit GEMM]
// Rung 3 of the forward: rung 2's GEMM, out[n] = W . columns[n] + bias, without the columns in memory.
// Over the whole batch it is one GEMM of M = O rows (the filters), N = batch * L columns (column j is
// output pixel p = j % L of image n = j / L) and K = C*kH*kW, whose B operand, column element (k, j) with
// k = (c, kh, kw), is the pixel of x that im2col_source finds (0 in the padding): Note [im2col columns].
//
// A block computes a BM x BN tile of out (BM filters x BN pixels; a tile may span images) in steps of
// kIgemmBK along K. Each step multiplies W's BM x BK tile by the columns' BK x BN tile, both in shared
// memory (as acc_t: float16 and bfloat16 become float): each thread sums its kIgemmMicro x kIgemmMicro
// micro-tile of outputs in registers. It is labops/sgemm.py's "vectorized" step with B gathered from x:
// a thread's 8 filters for one k are two 16-byte shared loads (W's tile is stored transposed), its 8
// pixels two more, columns b_col4 .. + 3 and BN/2 + the same, so that a quarter-warp's loads are 128
// contiguous bytes; 64 multiply-adds per 4 loads.
//
// The loads are pipelined through registers (double buffering, without cp.async): the tiles live twice
// in shared memory, and while a step multiplies out of one copy, each thread has already issued the
// global loads of its elements of the next step's tiles into registers (load_tiles); they arrive while
// the multiply-adds run, and the thread then writes them into the other copy (store_tiles). One barrier
// per step suffices: after it, the copy just written is whole, and nobody reads the copy the next step
// overwrites any more (it was read before that barrier).
//
// Who loads what: thread t loads W's tile elements e = t, t + threads, ... (filter e / BK, k e % BK: runs
// of BK consecutive weights of a filter), and one column of B's tile, t % BN, in every step (rows t / BN,
// + threads / BN, ...). That column's image n and pixel (oh, ow) are fixed for the whole K loop: they are
// worked out once, before it, as is the pointer to image n of x; each load then splits k into (c, kh, kw)
// with two FastDivider divisions and asks im2col_source, in 32-bit ints, for the pixel's offset inside
// the image, so the index math is conv2d_mm.h's (the launcher refuses images too large for that).
// Neighbouring threads load neighbouring pixels (coalesced at stride 1).
//
// Each output is one thread's sum over k = 0, 1, ..., K-1 in that order, whatever the tile size: the
// result is deterministic and the same for both tile sizes. The bias is added last (the epilogue), as
// rung 2's GEMM adds the products onto it. The epilogue stores a thread's 4 consecutive pixels of a filter
// as one vector (16 bytes in float32) when L is a multiple of 4 (the 4 then lie in one output row, at an
// aligned offset), else one element at a time.
constexpr int kIgemmBK = 8;      // K per step
constexpr int kIgemmMicro = 8;   // a thread's micro-tile: 8 filters x 8 pixels
constexpr int kIgemmPadA = 4;    // W's tile rows are BM + 4 long: its transposing stores then hit 32 banks, not 4

template <int BM, int BN>
constexpr int igemm_threads() {
  return (BM / kIgemmMicro) * (BN / kIgemmMicro);
}

// How many blocks of a tile size each multiprocessor must have the registers for (__launch_bounds__).
// One: the 128 x 128 tiles in float take about 150 registers a thread, so one block (8 warps) a
// multiprocessor, and the double buffering hides the loads' latency within it. Two would cap them at 128
// registers (16 warps), which nvcc 13 (sm_90) meets only by spilling about 50 bytes a thread: untimed.
template <int BM, typename scalar_t>
constexpr int igemm_min_blocks() {
  return 1;
}

template <int BM, int BN, typename scalar_t>
__global__ void __launch_bounds__(igemm_threads<BM, BN>(), igemm_min_blocks<BM, scalar_t>())
    implicit_gemm_kernel(const conv2d_mm::Im2colShape s, const scalar_t* __restrict__ x,
                         const scalar_t* __restrict__ w, const scalar_t* __restrict__ bias, int64_t out_channels,
                         int K, FastDivider kernel_area, FastDivider kernel_w, bool vector_stores,
                         scalar_t* __restrict__ out) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int BK = kIgemmBK, TM = kIgemmMicro, TN = kIgemmMicro, kThreads = igemm_threads<BM, BN>();
  static_assert(kThreads % BN == 0 && kThreads % BK == 0 && (BM * BK) % kThreads == 0 && (BK * BN) % kThreads == 0,
                "every thread loads as many elements of each tile as every other");
  constexpr int kLoadsA = BM * BK / kThreads, kLoadsB = BK * BN / kThreads;  // a thread's elements per step
  // Two copies of each tile (Note [implicit GEMM]: one is multiplied while the other is filled).
  __shared__ __align__(32) acc_t a_tile[2][BK][BM + kIgemmPadA];  // W's tile, transposed: a_tile[.][kk][m]
  __shared__ __align__(32) acc_t b_tile[2][BK][BN];               // the columns' tile: b_tile[.][kk][col]

  const int t = threadIdx.x;
  const int64_t O = out_channels, L = s.blocks(), columns = s.batch * L;
  // Filter tiles vary fastest along the grid: blocks running together share B's tile (gathered from x)
  // in L2; W is small and stays there.
  const int64_t tiles_o = (O + BM - 1) / BM;
  const int64_t o0 = (blockIdx.x % tiles_o) * BM, j0 = (blockIdx.x / tiles_o) * BN;

  // The column of B's tile this thread loads, every step: pixel (oh, ow) of image n, or none past the batch.
  const int b_col = t % BN;
  const int64_t j = j0 + b_col;
  const bool has_column = j < columns;
  const scalar_t* x_n = x;  // image n of x: the 32-bit offsets below count from it
  int oh = 0, ow = 0;
  if (has_column) {
    const int64_t n = j / L, p = j - n * L;
    oh = static_cast<int>(p / s.out_w);
    ow = static_cast<int>(p - oh * s.out_w);
    x_n += n * s.channels * s.height * s.width;
  }
  // The micro-tile: filters o0 + a_row .. + 7; pixels j0 + b_col4 .. + 3 and j0 + BN/2 + b_col4 .. + 3.
  const int a_row = (t / (BN / TN)) * TM, b_col4 = (t % (BN / TN)) * 4;

  // This thread's elements of the tiles of step k0, in registers: a_next[r] = w[o0 + m, k0 + kk] (0 past
  // the filters or past K), b_next[r] = column element (k0 + kk, j) read from x (0 in the padding, past
  // the batch or past K).
  // W's elements e = t + r * threads are (m, kk) = (a_m + r * threads / BK, a_kk): one k, filters
  // threads / BK apart, counted from one pointer.
  const int a_kk = t % BK, a_m = t / BK;
  constexpr int kStepA = kThreads / BK;
  const scalar_t* w_a = w + (o0 + a_m) * K + a_kk;  // w[o0 + a_m, a_kk]; read only while o < O
  acc_t a_next[kLoadsA], b_next[kLoadsB];
  const auto load_tiles = [&](int k0) {
#pragma unroll
    for (int r = 0; r < kLoadsA; ++r) {
      const int64_t o = o0 + a_m + r * kStepA;
      a_next[r] = o < O && k0 + a_kk < K ? static_cast<acc_t>(w_a[int64_t(r * kStepA) * K + k0]) : acc_t(0);
    }
#pragma unroll
    for (int r = 0; r < kLoadsB; ++r) {
      const int kk = t / BN + r * (kThreads / BN), k = k0 + kk;
      acc_t v = acc_t(0);
      if (has_column && k < K) {
        const int c = static_cast<int>(kernel_area.div(static_cast<uint32_t>(k)));
        const int tap = k - c * static_cast<int>(kernel_area.d);
        const int kh = static_cast<int>(kernel_w.div(static_cast<uint32_t>(tap)));
        const int kw = tap - kh * static_cast<int>(kernel_w.d);
        const int src = conv2d_mm::im2col_source<int>(s, c, kh, kw, oh, ow);
        if (src >= 0) v = static_cast<acc_t>(x_n[src]);
      }
      b_next[r] = v;
    }
  };
  // ... and into copy `buf` of the shared tiles: the same maps, W's tile transposed.
  const auto store_tiles = [&](int buf) {
#pragma unroll
    for (int r = 0; r < kLoadsA; ++r) a_tile[buf][a_kk][a_m + r * kStepA] = a_next[r];
#pragma unroll
    for (int r = 0; r < kLoadsB; ++r) b_tile[buf][t / BN + r * (kThreads / BN)][b_col] = b_next[r];
  };

  acc_t acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int u = 0; u < TN; ++u) acc[i][u] = acc_t(0);
  }

  load_tiles(0);
  store_tiles(0);
  __syncthreads();  // copy 0 holds step 0's tiles
  int buf = 0;      // the copy this step multiplies
  for (int k0 = 0; k0 < K; k0 += BK, buf ^= 1) {
    const bool more = k0 + BK < K;
    if (more) load_tiles(k0 + BK);  // the next step's loads, in flight during the multiply-adds below
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      const Pack<acc_t, 4> a0 = load_pack<4>(&a_tile[buf][kk][a_row]);
      const Pack<acc_t, 4> a1 = load_pack<4>(&a_tile[buf][kk][a_row + 4]);
      const Pack<acc_t, 4> b0 = load_pack<4>(&b_tile[buf][kk][b_col4]);
      const Pack<acc_t, 4> b1 = load_pack<4>(&b_tile[buf][kk][BN / 2 + b_col4]);
      acc_t a[TM], b[TN];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        a[u] = a0.val[u];
        a[u + 4] = a1.val[u];
        b[u] = b0.val[u];
        b[u + 4] = b1.val[u];
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int u = 0; u < TN; ++u) acc[i][u] += a[i] * b[u];
      }
    }
    if (more) store_tiles(buf ^ 1);  // the copy the step before multiplied: everyone passed the barrier since
    __syncthreads();  // the next step's copy is whole, and nobody reads this one any more
  }

  // The epilogue: out[n, o, p] = acc + bias[o], out (batch, O, L) contiguous. Each group of 4 pixels finds
  // its (n, p) with one division. vector_stores (the launcher's): L % 4 == 0 and out aligned, so the group
  // starts at p % 4 == 0 and its 4 pixels are p .. p + 3 of image n, one aligned vector per filter; else
  // one element at a time, stepping along (the 4 may cross into the next image).
  acc_t bias_of[TM];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t o = o0 + a_row + i;
    bias_of[i] = bias != nullptr && o < O ? static_cast<acc_t>(bias[o]) : acc_t(0);
  }
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const int64_t first = j0 + g * (BN / 2) + b_col4;
    if (first >= columns) continue;
    int64_t n = first / L, p = first - n * L;
    if (vector_stores) {
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int64_t o = o0 + a_row + i;
        if (o >= O) continue;
        Pack<scalar_t, 4> v;
#pragma unroll
        for (int u = 0; u < 4; ++u) v.val[u] = static_cast<scalar_t>(acc[i][g * 4 + u] + bias_of[i]);
        store_pack<4>(out + (n * O + o) * L + p, v);
      }
      continue;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (first + u < columns) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const int64_t o = o0 + a_row + i;
          if (o < O) out[(n * O + o) * L + p] = static_cast<scalar_t>(acc[i][g * 4 + u] + bias_of[i]);
        }
      }
      if (++p == L) {
        p = 0;
        ++n;
      }
    }
  }
}

// Note [tensor-core implicit GEMM]
// Rung 4 of the forward: rung 3's GEMM on tensor cores (mma.sync), with x read as channels_last.
// Transposed from rung 3: M = batch * L output pixels (rows), N = O filters (columns), K = kH*kW*C, and
// k = (kh, kw, c) with c fastest, so that both operands are rows of contiguous k:
//   A (M x K): row j is the im2col column of pixel j, and its 8 (float16) or 4 (float32) consecutive k of
//              one tap are 16 contiguous bytes of one pixel of a channels_last x (channels_last_offset);
//   B (N x K): row o is filter o with its weights in (kh, kw, c) order: the weight moved to channels_last
//              (transpose_kernel, a copy of the small weight; x too, when it is not channels_last already).
// Every load is then one 16-byte cp.async from global straight into shared memory, zero-filled in the
// padding (C must be a multiple of 8, of 4 in float32, so that 16 bytes never straddle two taps).
//
// A block (4 warps) computes a BM x BN tile of out^T (BM pixels x BN filters) in steps of 64 bytes of k
// (32 values of float16, 16 of float32) through a ring of kTcStages copies of the A and B tiles: while a
// step multiplies one copy, the loads of the next kTcStages - 1 steps are in flight (cp.async groups), so
// the tensor cores rarely wait for memory; one barrier per step. Each warp owns a WTM x WTN part of the
// tile, (WTM / 16) x (WTN / 8) mma tiles of 16 x 8 float32 accumulators; per 32 bytes of k it loads its A
// and B fragments with ldmatrix (Note [one fragment layout for three types], common/cuda/mma.cuh), the
// next 32 bytes' while this slice's mma run, and issues one mma per tile. A tile row is 64 bytes plus 16
// of padding: the 8 rows that one ldmatrix phase reads then start in 8 different 16-byte bank groups
// (80 = 5 x 16), no conflicts. Several blocks share a multiprocessor (tc_blocks_per_sm): with 4 warps a
// block, its warps hide each other's latencies only if there are enough of them (Nsight Compute: one
// block of 128 x 128 tiles a multiprocessor kept the tensor pipe 33 % busy).
//
// Each output sums its k in the same order on every run (deterministic); float16 and bfloat16 multiply
// exactly and add in float32, float32 is rounded to TF32 first (Mma<float>), as cuDNN does when
// torch.backends.cudnn.conv.fp32_precision lets it. The epilogue (write_results) adds the bias and writes out
// NCHW, or channels_last where x is (entry.h's output_format): a GEMM row is then a row of out.
constexpr int kTcRowBytes = 64;               // k per step, in bytes
constexpr int kTcPitch = kTcRowBytes + 16;    // a tile row in shared memory, padded (see above)
constexpr int kTcStages = 4;                  // copies of the tiles in the ring

// Blocks of a tile size that share a multiprocessor (__launch_bounds__): 2 of 128 x 128 (at most 255
// registers a thread, 2 x 80 KB of shared memory), 3 of the smaller ones (at most 168 registers).
template <int BM, int BN>
constexpr int tc_blocks_per_sm() {
  return BM * BN >= 128 * 128 ? 2 : 3;
}

template <int BM, int BN>
constexpr int tc_smem_bytes() {
  return kTcStages * (BM + BN) * kTcPitch;
}

// The GEMM tensor_core_gemm_kernel computes, in the 32-bit counts TensorCorePlan allows, with the divisors
// that turn a k into (tap, c), a tap into (kh, kw) and a GEMM row into (image, oh, ow). With `partial` set
// the sum over k is split (Note [the weight gradient as a convolution]): block (tile, split) sums steps
// [split * steps_per_split, (split + 1) * steps_per_split) of k and writes its float32 sums, without bias,
// to partial[split][row][filter]; else one block sums all of k and writes out.
struct TensorCoreGemm {
  conv2d_mm::Im2colShape s;
  int out_channels, K, columns;
  FastDivider channels, kernel_w, pixels, out_w;
  int splits = 1, steps_per_split = 0;
  float* partial = nullptr;
  bool channels_last_out = false;  // out (N, O, Hout, Wout) in memory as (N, Hout, Wout, O): GEMM row j at j * O
  FastDivider steps_per_tap;       // rung 5 with TMA: steps of k in one tap's channels (C * element size / 128)
  bool forward_weight = false;     // B is the forward's channels_last weight itself, each tap flipped (the input
                                   // gradient in 2-byte types: Note [the input gradient as a convolution])
  bool round_a = false;            // TF32 with TMA: A rounded in registers, not by a copy (Note [TF32 rounded on
                                   // its way to the tensor cores])

  TensorCoreGemm(const conv2d_mm::Im2colShape& shape, int64_t filters)
      : s(shape),
        out_channels(static_cast<int>(filters)),
        K(static_cast<int>(shape.channels * shape.kernel_area())),
        columns(static_cast<int>(shape.batch * shape.blocks())),
        channels(static_cast<uint32_t>(std::max<int64_t>(shape.channels, 1))),
        kernel_w(static_cast<uint32_t>(shape.kernel_w)),
        pixels(static_cast<uint32_t>(shape.blocks())),
        out_w(static_cast<uint32_t>(shape.out_w)) {}
};

// k = (tap, c) of the GEMM split into the channel and the kernel position it reads (TensorCoreGemm's
// divisors); inside: k is a real one (k < K), not past the end of the last step. A loader finds its tap once
// a step and its rows' pixels once a block (PixelRows), so that each 16-byte load costs only an add and two
// bounds checks: input_coord(o, k) = input_coord(o, 0) + k * dilation splits into the pixel's origin (the
// input pixel its tap (0, 0) reads, perhaps in the padding) and the tap's reach (dh, dw) from it.
struct Tap {
  bool inside;
  int dh, dw;  // kh * dilation_h, kw * dilation_w
  int offset;  // channels_last_offset(dh, dw, c): the reach as an offset in a channels_last image
};
// The reach of kernel position `tap` (kh * kernel_w + kw) from a pixel's origin: (kh * dilation_h, kw * dilation_w).
struct Reach {
  int dh, dw;
};
__device__ __forceinline__ Reach reach_of(const TensorCoreGemm& gemm, int tap) {
  const int kh = static_cast<int>(gemm.kernel_w.div(static_cast<uint32_t>(tap)));
  const int kw = tap - kh * static_cast<int>(gemm.kernel_w.d);
  return {conv::input_coord<int>(0, kh, 1, 0, static_cast<int>(gemm.s.dilation_h)),
          conv::input_coord<int>(0, kw, 1, 0, static_cast<int>(gemm.s.dilation_w))};
}
// Column k of the GEMM (tap * C + c: a tap's channels in a row) as its tap and channel.
struct TapChannel {
  int tap, c;
};
__device__ __forceinline__ TapChannel tap_channel_of(const TensorCoreGemm& gemm, int k) {
  const int tap = static_cast<int>(gemm.channels.div(static_cast<uint32_t>(k)));
  return {tap, k - tap * static_cast<int>(gemm.channels.d)};
}
__device__ __forceinline__ Tap tap_of(const TensorCoreGemm& gemm, int k) {
  const TapChannel tc = tap_channel_of(gemm, k);
  const Reach reach = reach_of(gemm, tc.tap);
  return {k < gemm.K, reach.dh, reach.dw, conv2d_mm::channels_last_offset<int>(gemm.s, reach.dh, reach.dw, tc.c)};
}

// The origin of GEMM row j (output pixel j of the batch): its image n and the input pixel (ih, iw) its tap
// (0, 0) reads, perhaps in the padding.
struct Origin {
  int n, ih, iw;
};
__device__ __forceinline__ Origin origin_of(const TensorCoreGemm& gemm, int j) {
  const conv2d_mm::Im2colShape& s = gemm.s;
  const int n = static_cast<int>(gemm.pixels.div(static_cast<uint32_t>(j)));
  const int p = j - n * static_cast<int>(gemm.pixels.d);
  const int oh = static_cast<int>(gemm.out_w.div(static_cast<uint32_t>(p)));
  const int ow = p - oh * static_cast<int>(gemm.out_w.d);
  return {n, conv::input_coord<int>(oh, 0, static_cast<int>(s.stride_h), static_cast<int>(s.pad_h), 1),
          conv::input_coord<int>(ow, 0, static_cast<int>(s.stride_w), static_cast<int>(s.pad_w), 1)};
}

// The GEMM rows (output pixels) a thread loads A's chunks for: first, first + stride, ... (kRows of them).
// Each row's origin stays fixed for the whole K loop, so it is found once, before it.
template <typename scalar_t, int kRows>
struct PixelRows {
  const scalar_t* origin[kRows];  // where the origin's channel 0 would be in x (only read once in bounds)
  int ih0[kRows], iw0[kRows];     // the origin; INT_MIN for a row past the batch, which no tap brings inside

  __device__ PixelRows(const TensorCoreGemm& gemm, const scalar_t* x, int first, int stride) {
    const conv2d_mm::Im2colShape& s = gemm.s;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int j = first + i * stride;
      origin[i] = x;
      ih0[i] = iw0[i] = std::numeric_limits<int>::min();
      if (j < gemm.columns) {
        const Origin o = origin_of(gemm, j);
        ih0[i] = o.ih;
        iw0[i] = o.iw;
        // images follow each other: row ih of image n is row n * H + ih of the batch
        origin[i] = x + conv2d_mm::channels_last_offset<int64_t>(s, static_cast<int64_t>(o.n) * s.height + o.ih,
                                                                 o.iw, 0);
      }
    }
  }
  // The 16 bytes row i reads at `tap` (origin + reach: channels_last_offset in conv2d_mm.h), or nullptr where
  // it reads zeros (the padding, a row past the batch, a k past K).
  __device__ __forceinline__ const scalar_t* source(const TensorCoreGemm& gemm, int i, const Tap& tap) const {
    const bool inside = tap.inside && conv::in_bounds(ih0[i] + tap.dh, static_cast<int>(gemm.s.height)) &&
                        conv::in_bounds(iw0[i] + tap.dw, static_cast<int>(gemm.s.width));
    return inside ? origin[i] + tap.offset : nullptr;
  }
};

// A warp's MI x NI tiles of 16 x 8 float32 accumulators (mma.sync's layout, mma.cuh; wgmma's is the same):
// accumulator e of tile (mi, ni) is row mi * 16 + lane / 4 (+ 8 for e >= 2) and column ni * 8 + 2 * (lane % 4)
// (+ 1 for odd e) of the warp's tile. visit(row, column, value, ni, e) for each of the rows row_inside(row) takes
// (a row it refuses skips its whole loop over columns: the epilogues' registers measured that).
template <int MI, int NI, typename RowInside, typename Visit>
__device__ __forceinline__ void for_each_accumulator(const float (&acc)[MI][NI][4], RowInside&& row_inside,
                                                     Visit&& visit) {
  const int lane = threadIdx.x % 32, g = lane / 4, q2 = 2 * (lane % 4);
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!row_inside(mi * 16 + g + 8 * h)) continue;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
#pragma unroll
        for (int e = 0; e < 2; ++e) visit(mi * 16 + g + 8 * h, ni * 8 + q2 + e, acc[mi][ni][2 * h + e], ni, e);
      }
    }
  }
}

// The epilogue of both tensor-core kernels: a warp's accumulators (for_each_accumulator), whose first row is
// GEMM row j0 (an output pixel) and first column filter o0. With the sum over k split, the split's float32 sums go to
// partial[split][row][filter]; else out = sum + bias, NCHW (lanes l, l + 4, ...,
// l + 28 hold 8 consecutive pixels of a filter) or channels_last (a GEMM row is a row of out: lanes 4g to
// 4g + 3 hold 8 consecutive filters of a pixel).
template <typename scalar_t, int MI, int NI>
__device__ __forceinline__ void write_results(const TensorCoreGemm& gemm, const float (&acc)[MI][NI][4], int j0,
                                              int o0, const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                                              int split) {
  const int q2 = 2 * (threadIdx.x % 4);
  const int columns = gemm.columns, out_channels = gemm.out_channels;
  const auto for_each_result = [&](auto&& visit) {
    for_each_accumulator(acc, [&](int row) { return j0 + row < columns; },
                         [&](int row, int col, float value, int ni, int e) {
                           if (o0 + col < out_channels) visit(j0 + row, o0 + col, value, ni, e);
                         });
  };
  if (gemm.partial != nullptr) {  // a split's sums, partial[split][j][o]
    float* split_sums = gemm.partial + static_cast<int64_t>(split) * columns * out_channels;
    for_each_result([&](int j, int o, float value, int, int) {
      split_sums[static_cast<int64_t>(j) * out_channels + o] = value;
    });
    return;
  }
  float bias_of[NI][2];
#pragma unroll
  for (int ni = 0; ni < NI; ++ni) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int o = o0 + ni * 8 + q2 + e;
      bias_of[ni][e] = bias != nullptr && o < out_channels ? static_cast<float>(bias[o]) : 0.0f;
    }
  }
  if (gemm.channels_last_out) {
    for_each_result([&](int j, int o, float value, int ni, int e) {
      out[static_cast<int64_t>(j) * out_channels + o] = static_cast<scalar_t>(value + bias_of[ni][e]);
    });
    return;
  }
  const int64_t L = gemm.pixels.d;
  for_each_result([&](int j, int o, float value, int ni, int e) {
    const int n = static_cast<int>(gemm.pixels.div(static_cast<uint32_t>(j))), p = j - n * static_cast<int>(L);
    out[(static_cast<int64_t>(n) * out_channels + o) * L + p] = static_cast<scalar_t>(value + bias_of[ni][e]);
  });
}

// The steps of k (of kStepK each) a tile sums: all of them, or, with the sum split, split `split`'s.
struct StepRange {
  int first, count;
};
__device__ __forceinline__ StepRange block_steps(const TensorCoreGemm& gemm, int step_k, int split) {
  const int all_steps = (gemm.K + step_k - 1) / step_k;
  if (gemm.partial == nullptr) return {0, all_steps};
  const int first = split * gemm.steps_per_split;
  return {first, min(gemm.steps_per_split, all_steps - first)};
}

template <typename scalar_t, int BM, int BN, int WARPS_M, int WARPS_N>
__global__ void __launch_bounds__(WARPS_M * WARPS_N * 32, tc_blocks_per_sm<BM, BN>())
    tensor_core_gemm_kernel(const TensorCoreGemm gemm, const scalar_t* __restrict__ x, const scalar_t* __restrict__ w,
                            const scalar_t* __restrict__ bias, scalar_t* __restrict__ out) {
  const int out_channels = gemm.out_channels, K = gemm.K;
  constexpr int kThreads = WARPS_M * WARPS_N * 32;
  constexpr int kChunk = 16 / sizeof(scalar_t);  // k per 16-byte chunk
  constexpr int kStepK = kTcRowBytes / sizeof(scalar_t);
  constexpr int kRowsPerPass = kThreads / 4;     // 4 threads load a 64-byte row, one 16-byte chunk each
  constexpr int kRowsA = BM / kRowsPerPass, kRowsB = BN / kRowsPerPass;
  constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N, MI = WTM / 16, NI = WTN / 8;
  static_assert(BM % kRowsPerPass == 0 && BN % kRowsPerPass == 0 && WTM % 16 == 0 && WTN % 16 == 0, "tile sizes");
  using MmaOp = Mma<scalar_t>;
  static_assert(MmaOp::kK * sizeof(scalar_t) == 32, "one mma per 32 bytes of k");

  extern __shared__ __align__(128) unsigned char smem[];
  const auto a_tile = [&](int stage) { return smem + stage * (BM + BN) * kTcPitch; };
  const auto b_tile = [&](int stage) { return smem + stage * (BM + BN) * kTcPitch + BM * kTcPitch; };

  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int tiles_n = (out_channels + BN - 1) / BN;
  const int o0 = (blockIdx.x % tiles_n) * BN, j0 = (blockIdx.x / tiles_n) * BM;

  // What this thread loads, every step: chunk `quarter` (16 bytes) of rows row0 + i * kRowsPerPass of both tiles.
  const int quarter = t % 4, row0 = t / 4;
  const PixelRows<scalar_t, kRowsA> rows(gemm, x, j0 + row0, kRowsPerPass);
  const auto load_step = [&](int stage, int k0) {
#pragma unroll
    for (int u = 0; u < kTcRowBytes / 64; ++u) {
      const int chunk = quarter + 4 * u, k = k0 + chunk * kChunk;
      const Tap tap = tap_of(gemm, k);
      unsigned char* a = a_tile(stage) + row0 * kTcPitch + chunk * 16;
#pragma unroll
      for (int i = 0; i < kRowsA; ++i) {
        const scalar_t* src = rows.source(gemm, i, tap);
        cp_async_16(a + i * kRowsPerPass * kTcPitch, src != nullptr ? src : x, src != nullptr);
      }
      unsigned char* b = b_tile(stage) + row0 * kTcPitch + chunk * 16;
#pragma unroll
      for (int i = 0; i < kRowsB; ++i) {
        const int o = o0 + row0 + i * kRowsPerPass;
        const bool fill = tap.inside && o < out_channels;
        cp_async_16(b + i * kRowsPerPass * kTcPitch, fill ? w + static_cast<int64_t>(o) * K + k : w, fill);
      }
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
    }
  }

  const StepRange range = block_steps(gemm, kStepK, blockIdx.y);
  const int steps = range.count, k_first = range.first * kStepK;
#pragma unroll
  for (int st = 0; st < kTcStages - 1; ++st) {
    if (st < steps) load_step(st, k_first + st * kStepK);
    cp_async_commit();  // an empty group past the last step keeps the count of groups in step with k
  }
  // This warp's part of the tile, and the shared-memory rows its lane points ldmatrix at (mma.cuh).
  const int wm = (warp / WARPS_N) * WTM, wn = (warp % WARPS_N) * WTN;
  const int a_row = wm + lane % 16, a_byte = (lane / 16) * 16;
  const int b_row = wn + (lane / 16) * 8 + lane % 8, b_byte = ((lane / 8) % 2) * 16;
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<kTcStages - 2>();  // this thread's copies of `step` have landed ...
    __syncthreads();                 // ... and everyone's; the copy `step - 1` used is free again
    const int next = step + kTcStages - 1;
    if (next < steps) load_step(next % kTcStages, k_first + next * kStepK);
    cp_async_commit();
    const unsigned char* a = a_tile(step % kTcStages);
    const unsigned char* b = b_tile(step % kTcStages);
    // The fragments of 32 bytes of k at a time, double-buffered: slice + 1's ldmatrix are issued before
    // slice's mma, so their latency hides behind the multiplications.
    uint32_t a_frag[2][MI][4], b_frag[2][NI][2];
    const auto load_fragments = [&](int buf, int slice) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        ldmatrix_x4(a_frag[buf][mi], a + (a_row + mi * 16) * kTcPitch + slice * 32 + a_byte);
#pragma unroll
        for (int e = 0; e < 4; ++e) MmaOp::prepare(a_frag[buf][mi][e]);
      }
#pragma unroll
      for (int nj = 0; nj < NI / 2; ++nj) {
        uint32_t r[4];
        ldmatrix_x4(r, b + (b_row + nj * 16) * kTcPitch + slice * 32 + b_byte);
#pragma unroll
        for (int e = 0; e < 4; ++e) MmaOp::prepare(r[e]);
        b_frag[buf][2 * nj][0] = r[0];
        b_frag[buf][2 * nj][1] = r[1];
        b_frag[buf][2 * nj + 1][0] = r[2];
        b_frag[buf][2 * nj + 1][1] = r[3];
      }
    };
    constexpr int kSlices = kTcRowBytes / 32;
    load_fragments(0, 0);
#pragma unroll
    for (int slice = 0; slice < kSlices; ++slice) {
      if (slice + 1 < kSlices) load_fragments((slice + 1) % 2, slice + 1);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) MmaOp::run(acc[mi][ni], a_frag[slice % 2][mi], b_frag[slice % 2][ni]);
      }
    }
  }
  cp_async_wait<0>();  // no copy may still be writing shared memory when the block exits
  write_results<scalar_t>(gemm, acc, j0 + wm, o0 + wn, bias, out, blockIdx.y);
}

// Note [wgmma implicit GEMM]
// Rung 5 of the forward, Hopper only (sm_90a): rung 4's GEMM, loads and epilogue, multiplied by wgmma
// (common/cuda/wgmma.cuh) instead of mma.sync. A block is two warpgroups (8 warps) and a 128 x BN tile of
// out^T (BM = 128 pixels x BN = 64 or 128 filters); each warpgroup owns 64 of the pixels and all BN
// filters, one wgmma m64nBNk16 per 32 bytes of k, reading both operands from shared memory: no ldmatrix,
// no fragments in registers, and the tensor core's N is up to 256 wide where mma.sync's is 8.
// A step is 128 bytes of k (64 values), one row of the 128-byte swizzle (Note [wgmma shared-memory layout]):
// 8 threads load a row, chunk c of row r going to r * 128 + ((c ^ (r % 8)) * 16). The tiles sit in a ring
// of kStages copies (as many as 220 KB hold for the blocks a multiprocessor runs, at most 6), loaded
// kAhead = kStages - 2 steps ahead, and the multiplications are asynchronous too: a step's wgmma batch is
// committed and left running while the warpgroup waits only for the previous step's (wgmma_wait<1>). So at
// the barrier of step s every warpgroup is done with the tiles of step s - 2, and that is the copy the loads
// of step s + kAhead overwrite. One block a multiprocessor (two for 128 x 64 tiles, with a ring of 4 each):
// the asynchronous pipeline, more than other blocks, hides the latencies.
// What limits it is the loads' instructions: with two warps a scheduler, the address of each 16-byte load
// must be cheap, so a loader finds its rows' origins once and its tap once a step (Tap, PixelRows): that
// alone took the 28 x 28 forward from 0.77 to 0.96 of cuDNN's speed (H100, float16, batch 32). Handing all
// loads to a third warpgroup that only loads (warp specialization, cp.async signalling mbarriers) measured
// slower, 0.88: one loading warp a scheduler could not issue them fast enough. Where a tap's channels fill
// whole 128-byte rows (C a multiple of 64 float16 or bfloat16, 32 float32), wgmma_tma_gemm_kernel loads as
// cuDNN's do, by TMA (Note [TMA tiles], common/cuda/tma.cuh): one thread asks for a step's two tiles, an
// im2col box of the 128 pixels and a box of the weight, and arms that stage's mbarrier with their bytes. The
// copy engine computes the addresses, applies the padding (zeros) and writes the swizzled rows; the step is
// then (tap, 128 bytes of its channels), the same k order as the cp.async loads. Measured on an H100
// (float16, batch 32, forward, of cuDNN's speed, one run), with thread 0 of the same warpgroups asking:
// 28 x 28 1.01 -> 1.16, 14 x 14 1.01 -> 1.12, 7 x 7 0.79 -> 0.99; a producer warp of its own then lets the
// warpgroups run without a barrier a step (Note [warp-specialized TMA pipeline]). Where the tiles fill at most half
// the GPU (the 7 x 7 layer at batch 32: 52 tiles for 132 multiprocessors), the sum over k is split as the
// weight gradient's is (Note [the weight gradient as a convolution]), and add_splits_to_output_kernel adds
// the splits in order, then the bias (TensorCorePlan says why not for more tiles). With TMA a block may also
// be three warpgroups and 192 pixels (wg_consumers), where 128-pixel tiles would need one more wave than
// 192-pixel ones and leave most multiprocessors idle in their last.
// Precision and order are rung 4's: float16 and bfloat16 products added in float32, and float32 (when TF32 is
// allowed) rounded to TF32 to the nearest: each thread rounds the chunks it loaded, in shared memory, before
// the fence (wgmma itself would truncate); each output's k summed in one fixed order (deterministic). A step is
// still 128 bytes of k, 32 float32 values, one m64nBNk8 instruction per 32 bytes.
constexpr int kWgRowBytes = 128;  // k per step, in bytes: one row of the 128-byte swizzle
constexpr int kWgBM = 128;        // pixels per block of the cp.async kernel: two warpgroups of 64
// The threads that multiply (and, with cp.async, load) a tile of BM pixels: a warpgroup (128) per 64 pixels.
constexpr int wg_consumers(int BM) { return BM / 64 * 128; }

// A barrier among the consumer warpgroups only (named barrier 1; rung 5's TMA producer warp takes no part).
template <int BM>
__device__ __forceinline__ void consumer_barrier() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(wg_consumers(BM)) : "memory");
}

// The ring: as many copies of the tiles as a multiprocessor's 220 KB hold for kPerSM blocks, at most 6.
template <int BM, int BN, int kPerSM>
constexpr int wg_stages() {
  return std::min(6, (220 * 1024 / kPerSM) / ((BM + BN) * kWgRowBytes));
}
template <int BM, int BN, int kPerSM>
constexpr int wg_smem_bytes() {
  return wg_stages<BM, BN, kPerSM>() * (BM + BN) * kWgRowBytes + 1024;  // + 1024: to align the ring to 1024 bytes
}

// A block's BM x BN results (rows 64 a warpgroup, as the accumulators hold them) through shared memory (the
// ring, free once every warpgroup's last wgmma is done): value(accumulator, column) is staged as a Staged, and
// then store(row, column, staged, n) runs for each 16-byte chunk of the tile's first `rows` rows and `cols`
// columns (staged: its n <= 16 / sizeof(Staged) values, n short only at column `cols`), consecutive threads on
// consecutive chunks, so that a warp reads and writes whole 128-byte rows. The tile is row-major, its rows 8
// elements longer, so that the accumulators' writes fall in different banks.
template <typename Staged, int BM, int BN, typename Value, typename Store>
__device__ __forceinline__ void store_through_shared(const float (&acc)[1][BN / 8][4], unsigned char* ring,
                                                     int rows, int cols, Value&& value, Store&& store) {
  constexpr int kPitch = BN + 8;
  Staged* tile = reinterpret_cast<Staged*>(ring);
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int row0 = (warp / 4) * 64 + (warp % 4) * 16 + lane / 4, q2 = 2 * (lane % 4);
  consumer_barrier<BM>();  // every warpgroup's wgmma has finished reading the ring
#pragma unroll
  for (int ni = 0; ni < BN / 8; ++ni) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = ni * 8 + q2 + e;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        tile[(row0 + 8 * h) * kPitch + col] = static_cast<Staged>(value(acc[0][ni][2 * h + e], col));
      }
    }
  }
  consumer_barrier<BM>();
  constexpr int kChunk = 16 / sizeof(Staged), kChunksPerRow = BN / kChunk;
  for (int i = t; i < BM * kChunksPerRow; i += wg_consumers(BM)) {
    const int row = i / kChunksPerRow, col = (i % kChunksPerRow) * kChunk;
    if (row < rows && col < cols) store(row, col, tile + row * kPitch + col, std::min(kChunk, cols - col));
  }
}

// n <= 16 bytes of values from shared memory to dst: one 16-byte store where they are whole and dst aligned.
template <typename T>
__device__ __forceinline__ void store_chunk(T* dst, const T* values, int n) {
  constexpr int kChunk = 16 / sizeof(T);
  if (n == kChunk && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(values);
    return;
  }
  for (int e = 0; e < n; ++e) dst[e] = values[e];
}

// Rung 5's epilogue where its block writes a channels_last out (no split of k): the block's BM x BN results,
// plus the bias, go through shared memory (store_through_shared, pixel-major), so that a warp stores whole
// 128-byte runs of a pixel's filters, 16 bytes a thread (where out's rows are 16-byte aligned: O a multiple of 8
// float16 or 4 float32); from the accumulators (write_results) it stores 8 pixels x 16 bytes. Measured on an H100
// (float16, batch 32, forward, of cuDNN's speed, both channels_last, two runs:
// docs/benchmarks/conv_goals/h100_epilogue_ab/): 56 x 56 0.85 -> 1.09, 28 x 28 0.77 -> 0.82, 14 x 14 0.88-0.98
// -> 0.96, 7 x 7 0.67 -> 0.69, with one 2-byte store a thread a value. For NCHW outputs that staging was slower
// (56 x 56 1.27 -> 1.16, 28 x 28 1.09-1.12 -> 1.01-1.02), so those are stored from the accumulators. Storing 16
// bytes a thread instead of 2 (session 30, the GEMM kernel's time, float16, batch 32, before -> after, us): 56 x
// 56 33.4 -> 27.9, 28 x 28 19.6 -> 16.5, 14 x 14 22.0 -> 18.4, 7 x 7 28.0 -> 23.9: the epilogue, which no other
// work overlaps where a block has one tile, had taken up to a third of the kernel.
template <typename scalar_t, int BM, int BN>
__device__ __forceinline__ void write_results_through_shared(const TensorCoreGemm& gemm, const float (&acc)[1][BN / 8][4],
                                                             int j0, int o0, const scalar_t* __restrict__ bias,
                                                             scalar_t* __restrict__ out, unsigned char* ring) {
  const auto with_bias = [&](float value, int col) {
    const int o = o0 + col;
    return value + (bias != nullptr && o < gemm.out_channels ? static_cast<float>(bias[o]) : 0.0f);
  };
  store_through_shared<scalar_t, BM, BN>(acc, ring, gemm.columns - j0, gemm.out_channels - o0, with_bias,
                                         [&](int row, int col, const scalar_t* values, int n) {
                                           store_chunk(out + static_cast<int64_t>(j0 + row) * gemm.out_channels + o0 +
                                                           col, values, n);
                                         });
}

// The tensor maps of rung 5's TMA loads (Note [TMA tiles], tma.cuh): x as im2col boxes of BM pixels x 128
// bytes of channels, the weight (O, kH, kW, C) as tiles of BN filters x one tap x 128 bytes of channels.
struct TmaMaps {
  CUtensorMap x, w;
};

// One step of rung 5 for this warpgroup: its 64 rows of the stage's A tile (`stage`, a shared-memory address)
// times the stage's B tile, added to d, one wgmma per 32 bytes of k. The batch is committed and left running;
// the call returns once the previous step's batch is done (so that step's stage may be refilled). An MN-major
// A or B (the weight gradient by taps both, the input gradient's B: Note [MN-major operands]) is boxes of 64
// rows of k: the next 64 of M or N a box (64 x 128 bytes) further, a k16 slice two 8-row atoms (2048 bytes)
// further.
template <typename scalar_t, int BM, int BN, bool kMnMajorA = false, bool kMnMajorB = kMnMajorA>
__device__ __forceinline__ void multiply_stage(float (&d)[BN / 2], uint32_t stage, int warpgroup) {
  constexpr int kBox = 64 * kWgRowBytes, kSlices = kWgRowBytes / 32;
  constexpr int kSliceA = kMnMajorA ? 2048 : 32, kSliceB = kMnMajorB ? 2048 : 32;
  const uint64_t a = wgmma_descriptor(stage + warpgroup * kBox, kMnMajorA ? kBox : 16);
  const uint64_t b = wgmma_descriptor(stage + BM * kWgRowBytes, kMnMajorB ? kBox : 16);
#pragma unroll
  for (int r = 0; r < BN / 2; ++r) wgmma_hold(d[r]);
  wgmma_fence();
#pragma unroll
  for (int slice = 0; slice < kSlices; ++slice) {  // 4 either way: 128 bytes of k, or 64 rows of 2-byte types
    wgmma<scalar_t, BN, kMnMajorA, kMnMajorB>(d, wgmma_advance(a, slice * kSliceA), wgmma_advance(b, slice * kSliceB),
                                              1);
  }
  wgmma_commit();
  wgmma_wait<1>();  // the previous step's batch is done; this one may still run
#pragma unroll
  for (int r = 0; r < BN / 2; ++r) wgmma_hold(d[r]);
}

// Note [TF32 rounded on its way to the tensor cores]
// wgmma reads float32 as TF32 by dropping its 13 low bits (toward zero); cuDNN's forward and input gradient round
// to the nearest instead (probed on an H100, session 31: a product 1 x (1 + 0.75 * 2^-10) comes out 1 + 2^-10).
// A rounding copy of a channels_last x cost as much as a quarter of the forward (56 x 56, batch 32: 20.6 of
// 69.1 us of kernels). So the TMA kernel's TF32 step can take its A tile (the pixels) out of shared memory into
// registers, round it there (round_to_tf32) and give it to wgmma from the registers; B (the weight, small)
// still comes rounded by its copy. That costs the GEMM instructions at every step of every tile, so it pays
// where each value of x is rounded once, its filters all in one tile (O <= BN), and x needs no copy anyway
// (channels_last already: a transposing copy rounds for free). Measured on an H100 (TF32, batch 32,
// channels_last, GEMM and rounding kernels, us, one run): 56 x 56 (64 filters) 69.1 -> 52.7 and 28 x 28 (128)
// 36.2 -> 29.1 with the rounding in the kernel; 14 x 14 (256) 31.6 -> 35.0 and 7 x 7 (512) 51.8 -> 55.0, where
// each value was rounded 2 and 8 times, so those keep the copy.
// Each thread loads the values the instruction wants from it (wgmma_tf32_a_in_registers): rows row and row + 8,
// k q and q + 4 of each 8-value slice, four bytes at a time; the 128-byte swizzle puts the 32 threads of a warp
// in 32 different banks. The registers are read while the batch runs, so a step loads its values first, waits
// for the step before's batch, and only then overwrites the registers that batch read (Tf32Fragments, carried
// from step to step). A block of three consumer warpgroups (192 pixels) has at most 128 registers a thread
// (13 warps: 4 share one quarter of the register file), too few to hold the next step's values beside the
// fragments and 64 accumulators: there a step first waits, then loads into the fragments. ptxas still spills
// 68 bytes in that kernel, outside its step loop.
struct Tf32Fragments {
  uint32_t a[kWgRowBytes / 32][4];  // per 32-byte slice of k: the 4 values of wgmma_tf32_a_in_registers
};

template <int BM, int BN>
__device__ __forceinline__ void multiply_stage_rounding_a(float (&d)[BN / 2], Tf32Fragments& fragments,
                                                          const unsigned char* stage, uint32_t stage_at,
                                                          int warpgroup) {
  constexpr int kSlices = kWgRowBytes / 32, kBox = 64 * kWgRowBytes;
  const int lane = threadIdx.x % 32, row = 16 * ((threadIdx.x / 32) % 4) + lane / 4;
  constexpr bool kLoadBeforeWait = BM < 192;
  const unsigned char* a = stage + warpgroup * kBox + row * kWgRowBytes + (lane % 4) * 4;
  const auto load = [&](float (&values)[kSlices][4]) {
#pragma unroll
    for (int slice = 0; slice < kSlices; ++slice) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // k q, then q + 4: 16-byte chunk 2 * slice + half of the row
        const int chunk = ((2 * slice + half) ^ (row % 8)) * 16;
        values[slice][2 * half] = *reinterpret_cast<const float*>(a + chunk);
        values[slice][2 * half + 1] = *reinterpret_cast<const float*>(a + chunk + 8 * kWgRowBytes);  // row + 8
      }
    }
  };
  float loaded[kSlices][4];
  if constexpr (kLoadBeforeWait) load(loaded);
  const uint64_t b = wgmma_descriptor(stage_at + BM * kWgRowBytes);
  wgmma_wait<0>();  // the step before's batch no longer reads the fragments
#pragma unroll
  for (int slice = 0; slice < kSlices; ++slice) {
#pragma unroll
    for (int v = 0; v < 4; ++v) wgmma_keep(fragments.a[slice][v]);
  }
  if constexpr (!kLoadBeforeWait) load(loaded);
#pragma unroll
  for (int slice = 0; slice < kSlices; ++slice) {
#pragma unroll
    for (int v = 0; v < 4; ++v) fragments.a[slice][v] = __float_as_uint(round_to_tf32(loaded[slice][v]));
  }
#pragma unroll
  for (int r = 0; r < BN / 2; ++r) wgmma_hold(d[r]);
  wgmma_fence();
#pragma unroll
  for (int slice = 0; slice < kSlices; ++slice) {
    wgmma_tf32_a_in_registers<BN>(d, fragments.a[slice], wgmma_advance(b, slice * 32));
  }
  wgmma_commit();
#pragma unroll
  for (int r = 0; r < BN / 2; ++r) wgmma_hold(d[r]);
}

// Tile `tile`'s place in the output: tiles of BM pixels x BN filters, the filters fastest.
template <int BM, int BN>
__device__ __forceinline__ void block_tile(const TensorCoreGemm& gemm, int tile, int& j0, int& o0) {
  const int tiles_n = (gemm.out_channels + BN - 1) / BN;
  o0 = (tile % tiles_n) * BN;
  j0 = (tile / tiles_n) * BM;
}

// Where rung 5's epilogue stages a tile in the ring: a channels_last out, k not split.
__device__ __forceinline__ bool stages_results_in_ring(const TensorCoreGemm& gemm) {
  return gemm.partial == nullptr && gemm.channels_last_out;
}

// Every warpgroup's results: out (through shared memory where stages_results_in_ring), or split `split`'s sums.
template <typename scalar_t, int BM, int BN>
__device__ __forceinline__ void write_block_results(const TensorCoreGemm& gemm, const float (&acc)[1][BN / 8][4],
                                                    int j0, int o0, const scalar_t* __restrict__ bias,
                                                    scalar_t* __restrict__ out, unsigned char* ring, int split) {
  const int warp = threadIdx.x / 32;
  if (stages_results_in_ring(gemm)) {
    write_results_through_shared<scalar_t, BM, BN>(gemm, acc, j0, o0, bias, out, ring);
  } else {
    write_results<scalar_t>(gemm, acc, j0 + (warp / 4) * 64 + (warp % 4) * 16, o0, bias, out, split);
  }
}

__device__ __forceinline__ unsigned char* ring_of(unsigned char* smem) {  // aligned to 1024 for the swizzle
  return smem + ((1024 - static_cast<uint32_t>(__cvta_generic_to_shared(smem)) % 1024) % 1024);
}

template <typename scalar_t, int BN, int kPerSM>
__global__ void __launch_bounds__(wg_consumers(kWgBM), kPerSM)
    wgmma_gemm_kernel(const TensorCoreGemm gemm, const scalar_t* __restrict__ x, const scalar_t* __restrict__ w,
                      const scalar_t* __restrict__ bias, scalar_t* __restrict__ out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BM = kWgBM, kStages = wg_stages<BM, BN, kPerSM>(), kAhead = kStages - 2;
  static_assert(kAhead >= 2, "at least two steps loading while one multiplies");
  constexpr int kChunk = 16 / sizeof(scalar_t), kStepK = kWgRowBytes / sizeof(scalar_t);
  constexpr int kRowsPerPass = wg_consumers(BM) / 8;  // 8 threads load a 128-byte row, one 16-byte chunk each
  constexpr int kRowsA = BM / kRowsPerPass, kRowsB = BN / kRowsPerPass;
  constexpr int kTileA = BM * kWgRowBytes, kStageBytes = (BM + BN) * kWgRowBytes;
  extern __shared__ unsigned char wg_smem[];
  unsigned char* ring = ring_of(wg_smem);
  const int t = threadIdx.x, warpgroup = t / 128;
  int j0, o0;
  block_tile<BM, BN>(gemm, blockIdx.x, j0, o0);

  // What this thread loads, every step: chunk `chunk` of rows row0 + i * kRowsPerPass of both tiles, all of
  // whose rows are row0 modulo 8, so one swizzled offset serves them all.
  const int chunk = t % 8, row0 = t / 8, swizzled = swizzled_offset(row0, chunk * 16);
  const PixelRows<scalar_t, kRowsA> rows(gemm, x, j0 + row0, kRowsPerPass);
  const auto load_step = [&](int stage, int k0) {
    const int k = k0 + chunk * kChunk;
    const Tap tap = tap_of(gemm, k);
    unsigned char* a = ring + stage * kStageBytes + swizzled;
#pragma unroll
    for (int i = 0; i < kRowsA; ++i) {
      const scalar_t* src = rows.source(gemm, i, tap);
      cp_async_16(a + i * kRowsPerPass * kWgRowBytes, src != nullptr ? src : x, src != nullptr);
    }
    unsigned char* b = ring + stage * kStageBytes + kTileA + swizzled;
#pragma unroll
    for (int i = 0; i < kRowsB; ++i) {
      const int o = o0 + row0 + i * kRowsPerPass;
      const bool fill = tap.inside && o < gemm.out_channels;
      cp_async_16(b + i * kRowsPerPass * kWgRowBytes, fill ? w + static_cast<int64_t>(o) * gemm.K + k : w, fill);
    }
  };

  float acc[1][BN / 8][4];  // this warpgroup's 64 x BN, as write_results reads it (one 16-row tile per warp)
  float(&d)[BN / 2] = reinterpret_cast<float(&)[BN / 2]>(acc);
#pragma unroll
  for (int r = 0; r < BN / 2; ++r) d[r] = 0.0f;

  const StepRange range = block_steps(gemm, kStepK, blockIdx.y);
  const int steps = range.count, k_first = range.first * kStepK;
#pragma unroll
  for (int st = 0; st < kAhead; ++st) {
    if (st < steps) load_step(st, k_first + st * kStepK);
    cp_async_commit();  // an empty group past the last step keeps the count in step with k
  }
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<kAhead - 1>();  // this thread's copies of `step` have landed ...
    fence_shared_for_wgmma();  // ... and are seen by wgmma (float32 comes rounded to TF32 by its copies)
    __syncthreads();  // ... and so are everyone's; every warpgroup is done with step - 2's copy
    const int next = step + kAhead;
    if (next < steps) load_step(next % kStages, k_first + next * kStepK);
    cp_async_commit();
    multiply_stage<scalar_t, BM, BN>(d, shared_address(ring) + (step % kStages) * kStageBytes, warpgroup);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int r = 0; r < BN / 2; ++r) wgmma_hold(d[r]);
  cp_async_wait<0>();  // no copy may still be writing shared memory when the block exits
  write_block_results<scalar_t, BM, BN>(gemm, acc, j0, o0, bias, out, ring, blockIdx.y);
#endif
}

// Note [warp-specialized TMA pipeline]
// With TMA loads one thread asks for a whole step, so loading needs no warpgroup of its own: one more warp (the
// producer) runs through the ring ahead of the consumer warpgroups (two, or three for 192 pixels), and the two
// sides hand each stage over by mbarriers instead of a __syncthreads a step. full[s] completes when stage s's
// bytes have landed (the producer arms it with the bytes to expect); empty[s] when every consumer warp is done
// with it (each arrives once its wgmma batch on the stage has finished). So all kStages steps are in flight (the
// cp.async kernel keeps kStages - 2: a load waits for a barrier all threads reach), and a warpgroup waits only
// for its data. float32 operands come rounded to TF32 by the copies that lay them out (forward_on_plan), so the
// consumers only read.
// The kernel is persistent: a block takes work units (tile, split) blockIdx.x, + gridDim.x, ... and the ring
// runs on across them (`step` counts the block's steps over all its units), so the producer loads a unit's
// first stages while the consumers still multiply, or write out, the one before. Where the epilogue stages
// results in the ring (stages_results_in_ring), the producer waits for it (`drained`) before loading on.
// Every thread finds the ring's and the barriers' shared-memory addresses once and steps a stage index and the
// phase's parity by adds (Nsight Compute put most consumer stall samples on such conversions between wgmma
// batches): batch 128's 7 x 7 and 14 x 14 forwards ran about 10 % faster, batch 32's 7 x 7 no faster (H100).
// Not kept (session 30, docs/benchmarks/conv_goals/h100_session30.md): waiting by spinning on test_wait instead
// of try_wait (7 x 7 forward, batch 32: 30.3 against 27.7 us), and a producer stepping through the taps instead
// of dividing once a step (within the spread between runs).
// A kernel on this pipeline gives it its Work, of the form (ImplicitGemmTiles, TapWeightGradientTiles):
//   units()                                   its work units, all blocks together;
//   unit(u) -> Unit                           where unit u is, and its `steps`;
//   load(unit, i, stage, full)                the producer: step i's tiles into the stage (a RingStage), on
//                                             mbarrier `full` (its shared-memory address);
//   Carry                                     what a consumer thread carries from step to step of a unit
//                                             besides its accumulators (value-initialized each unit);
//   multiply(unit, carry, d, stage, warpgroup)  a consumer warpgroup: one stage into its accumulators;
//   write(unit, carry, acc, ring)             the consumers: a unit's results;
//   results_in_ring()                         whether write uses the ring (the producer then waits for it).
// A stage of the ring: its bytes (for ordinary loads) and its shared-memory address (for TMA and wgmma).
struct RingStage {
  const unsigned char* bytes;
  uint32_t at;
};

template <int BM, int BN, int kPerSM, typename Work>
__device__ __forceinline__ void run_tma_pipeline(const Work& work) {
  constexpr int kStages = wg_stages<BM, BN, kPerSM>(), kStageBytes = (BM + BN) * kWgRowBytes;
  constexpr int kConsumerWarps = wg_consumers(BM) / 32, kBarrier = sizeof(uint64_t);
  extern __shared__ unsigned char wg_smem[];
  unsigned char* ring = ring_of(wg_smem);
  __shared__ uint64_t full[kStages], empty[kStages], drained;
  const uint32_t ring_at = shared_address(ring), full_at = shared_address(full), empty_at = shared_address(empty);
  const auto stage_of = [&](int stage) {
    return RingStage{ring + stage * kStageBytes, ring_at + static_cast<uint32_t>(stage * kStageBytes)};
  };
  const int t = threadIdx.x, warp = t / 32;
  const int units = work.units();
  if (t == 0) {
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
      mbarrier_init(&full[st], 1);
      mbarrier_init(&empty[st], kConsumerWarps);
    }
    mbarrier_init(&drained, kConsumerWarps);
    fence_mbarrier_init();
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // the producer: one thread asks for each step's tiles
    if (t % 32 == 0) {
      int stage = 0, done_units = 0;
      uint32_t phase = 0;    // the parity of the stages' barriers on this pass over the ring
      bool wrapped = false;  // past the first pass: a stage is refilled once its last step is handed back
      for (int unit = blockIdx.x; unit < units; unit += gridDim.x, ++done_units) {
        if (done_units > 0 && work.results_in_ring()) mbarrier_wait(shared_address(&drained), (done_units - 1) % 2);
        const typename Work::Unit u = work.unit(unit);
        for (int i = 0; i < u.steps; ++i) {
          if (wrapped) mbarrier_wait(empty_at + stage * kBarrier, phase ^ 1);
          mbarrier_arrive_expect_bytes(full_at + stage * kBarrier, kStageBytes);
          work.load(u, i, stage_of(stage), full_at + stage * kBarrier);
          if (++stage == kStages) stage = 0, phase ^= 1, wrapped = true;
        }
      }
    }
    return;  // the consumers' epilogue meets on consumer_barrier, which counts only them
  }

  const int warpgroup = t / 128;
  const bool hands_back = t % 32 == 0;  // one arrival a warp on `empty`
  int stage = 0;
  uint32_t phase = 0;
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const typename Work::Unit u = work.unit(unit);
    typename Work::Carry carry{};
    float acc[1][BN / 8][4];
    float(&d)[BN / 2] = reinterpret_cast<float(&)[BN / 2]>(acc);
#pragma unroll
    for (int r = 0; r < BN / 2; ++r) d[r] = 0.0f;
    int before = 0;  // the stage of the step before
    for (int i = 0; i < u.steps; ++i) {
      mbarrier_wait(full_at + stage * kBarrier, phase);
      work.multiply(u, carry, d, stage_of(stage), warpgroup);
      if (i > 0 && hands_back) mbarrier_arrive(empty_at + before * kBarrier);  // step i - 1's batch is done
      before = stage;
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < BN / 2; ++r) wgmma_hold(d[r]);
    if (u.steps > 0 && hands_back) mbarrier_arrive(empty_at + before * kBarrier);  // the unit's last step
    work.write(u, carry, acc, ring);
    if (work.results_in_ring()) {
      consumer_barrier<BM>();  // every consumer is done reading the staged tile ...
      if (hands_back) mbarrier_arrive(shared_address(&drained));  // ... so the producer may fill the ring again
    }
  }
}

// The forward's work on the pipeline (and the input gradient's, and the weight gradient's as a convolution):
// units (tile, split) of BM pixels x BN filters, a step (tap, 128 bytes of its channels), an im2col box of x
// and a box of the weight. With kForwardWeight (gemm.forward_weight) the weight is the forward's, read as it
// lies: BN / 64 MN-major boxes of 64 of its channels (this GEMM's filters) x 64 of its filters (this k), from
// the flipped tap's plane.
template <typename scalar_t, int BM, int BN, bool kForwardWeight, bool kRoundA = false>
struct ImplicitGemmTiles {
  static constexpr int kStepK = kWgRowBytes / sizeof(scalar_t), kBoxBytes = 64 * kWgRowBytes;
  const TensorCoreGemm& gemm;
  const TmaMaps& maps;
  const scalar_t* bias;
  scalar_t* out;

  struct Unit {
    int j0, o0, split, first, steps;
    Origin origin;  // of the box's first pixel; the map finds the others
  };
  __device__ int tiles() const { return ((gemm.columns + BM - 1) / BM) * ((gemm.out_channels + BN - 1) / BN); }
  __device__ int units() const { return tiles() * gemm.splits; }
  __device__ Unit unit(int u) const {
    Unit r;
    block_tile<BM, BN>(gemm, u % tiles(), r.j0, r.o0);
    r.split = u / tiles();
    const StepRange range = block_steps(gemm, kStepK, r.split);
    r.first = range.first;
    r.steps = range.count;
    r.origin = origin_of(gemm, r.j0);
    return r;
  }
  __device__ void load(const Unit& u, int i, RingStage stage, uint32_t full) const {
    // A step is (tap, 128 bytes of its channels); the producer's one thread finds them every step, so by a
    // multiply (FastDivider), not an integer division (tens of instructions on the GPU).
    const int k_step = u.first + i, tap = static_cast<int>(gemm.steps_per_tap.div(static_cast<uint32_t>(k_step)));
    const int c0 = (k_step - tap * static_cast<int>(gemm.steps_per_tap.d)) * kStepK;
    const Reach reach = reach_of(gemm, tap);
    tma_load_im2col(stage.at, &maps.x, c0, u.origin.iw, u.origin.ih, u.origin.n, static_cast<uint16_t>(reach.dw),
                    static_cast<uint16_t>(reach.dh), full);
    if constexpr (kForwardWeight) {
      const int flipped = static_cast<int>(gemm.s.kernel_h * gemm.s.kernel_w) - 1 - tap;
#pragma unroll
      for (int b = 0; b < BN / 64; ++b) {
        tma_load_tile(stage.at + BM * kWgRowBytes + b * kBoxBytes, &maps.w, u.o0 + 64 * b, flipped, c0, full);
      }
    } else {
      tma_load_tile(stage.at + BM * kWgRowBytes, &maps.w, c0, tap, u.o0, full);
    }
  }
  static_assert(!kRoundA || (std::is_same_v<scalar_t, float> && !kForwardWeight), "kRoundA: TF32, K-major B");
  struct NoCarry {};
  using Carry = std::conditional_t<kRoundA, Tf32Fragments, NoCarry>;
  __device__ void multiply(const Unit&, Carry& carry, float (&d)[BN / 2], RingStage stage, int warpgroup) const {
    if constexpr (kRoundA) {
      multiply_stage_rounding_a<BM, BN>(d, carry, stage.bytes, stage.at, warpgroup);
    } else {
      multiply_stage<scalar_t, BM, BN, false, kForwardWeight>(d, stage.at, warpgroup);
    }
  }
  __device__ void write(const Unit& u, const Carry& carry, const float (&acc)[1][BN / 8][4],
                        unsigned char* ring) const {
    if constexpr (kRoundA) {  // the last batch (waited for by now) read these up to here
#pragma unroll
      for (int slice = 0; slice < kWgRowBytes / 32; ++slice) {
#pragma unroll
        for (int v = 0; v < 4; ++v) wgmma_keep(carry.a[slice][v]);
      }
    }
    write_block_results<scalar_t, BM, BN>(gemm, acc, u.j0, u.o0, bias, out, ring, u.split);
  }
  __device__ bool results_in_ring() const { return stages_results_in_ring(gemm); }
};

template <typename scalar_t, int BM, int BN, int kPerSM, bool kForwardWeight, bool kRoundA = false>
__global__ void __launch_bounds__(wg_consumers(BM) + 32, kPerSM)
    wgmma_tma_gemm_kernel(const TensorCoreGemm gemm, const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                          const __grid_constant__ TmaMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  run_tma_pipeline<BM, BN, kPerSM>(ImplicitGemmTiles<scalar_t, BM, BN, kForwardWeight, kRoundA>{gemm, maps, bias, out});
#endif
}

// For each i with offset[i] >= 0: sum[i] = the splits terms base[offset[i] + split * split_stride], added in
// split order: the same bits on every run (sum[i] = 0 where offset[i] < 0). The terms are read kLoads splits of
// all kSums sums at a time before they are added, so that a thread waits for memory once per kLoads splits, not
// once per term: a 32 x 64 x 56 x 56 weight gradient has 51 splits.
template <int kSums, int kLoads>
__device__ __forceinline__ void sums_in_split_order(const float* __restrict__ base, const int64_t (&offset)[kSums],
                                                    int splits, int64_t split_stride, float (&sum)[kSums]) {
  const auto term = [&](int i, int split) { return offset[i] >= 0 ? base[offset[i] + split * split_stride] : 0.0f; };
#pragma unroll
  for (int i = 0; i < kSums; ++i) sum[i] = 0.0f;
  int split = 0;
  for (; split + kLoads <= splits; split += kLoads) {
    float part[kSums][kLoads];
#pragma unroll
    for (int i = 0; i < kSums; ++i) {
#pragma unroll
      for (int u = 0; u < kLoads; ++u) part[i][u] = term(i, split + u);
    }
#pragma unroll
    for (int i = 0; i < kSums; ++i) {
#pragma unroll
      for (int u = 0; u < kLoads; ++u) sum[i] += part[i][u];
    }
  }
  for (; split < splits; ++split) {
    float part[kSums];
#pragma unroll
    for (int i = 0; i < kSums; ++i) part[i] = term(i, split);
#pragma unroll
    for (int i = 0; i < kSums; ++i) sum[i] += part[i];
  }
}
__device__ __forceinline__ float sum_in_split_order(const float* __restrict__ src, int splits, int64_t split_stride) {
  const int64_t offset[1] = {0};
  float sum[1];
  sums_in_split_order<1, 8>(src, offset, splits, split_stride, sum);
  return sum[0];
}

// *dst = beta * *dst + scale * sum, rounded once; beta 0 does not read *dst (it may be uninitialized memory).
template <typename scalar_t>
__device__ __forceinline__ void scale_into(scalar_t* dst, float sum, float scale, float beta) {
  const float old = beta == 0.0f ? 0.0f : beta * static_cast<float>(*dst);
  *dst = static_cast<scalar_t>(old + scale * sum);
}

// Note [the weight gradient by taps]
// grad_w[o, c, kh, kw] = sum over the batch's output pixels p of g[p, o] * x[p's input pixel at tap (kh, kw), c]:
// a GEMM of O rows by taps * C columns, column q = (tap, c) as the forward's k (tap * C + c), whose k is all
// N * Hout * Wout pixels. Both operands are channels_last tensors read as they are (Note [MN-major operands],
// wgmma.cuh): a step is 64 pixels, g's rows of 64 filters a box (of the (pixels, O) matrix) and, for each 64
// columns, one im2col box of x: the same 64 pixels at that tap's reach, 64 of its channels (the forward's map
// with a box of 64 pixels; TMA supplies the padding's zeros and reads past the batch as zeros). A tile's boxes
// may be channels of one tap or, where C = 64, whole taps: the 56 x 56 layers' 64 filters and 3 x 3 taps of 64
// channels run in tiles of 64 filters x 2 taps, where 128 filters x one tap would leave half of each empty. No
// columns, no copies of a channels_last x or g (an NCHW one is transposed once, as the forward's x is), and k
// is the pixels themselves, so small images waste nothing (the weight gradient as a convolution packs k by 128
// bytes of the batch: float16 at batch 32 fills half a row). A unit is (BM filters, BN columns, split of k);
// float16 and bfloat16 only (the instruction transposes no TF32). A channels_last grad_w (memory (O, kH, kW, C),
// as F.conv2d gives for a channels_last x) has the GEMM's columns in order, so with k whole a unit writes it
// itself, through shared memory (store_through_shared: a warp stores runs of consecutive columns). Else each unit
// writes its float32 sums to partial[split][q][o] (runs of filters) and add_tap_splits_kernel adds the splits
// in order (deterministic) into grad_w. Measured on an H100 (float16, batch 32, 7 x 7, one split): 23.4 us
// for the kernel writing grad_w against 19.3 + 14.0 with the finisher; stored from the accumulators instead
// (8 filters x 16 bytes a store), 28.9. (Into a contiguous grad_w, whose runs are (c, kh, kw), a tile's rows
// were a scatter of 2-byte stores, tap by tap: 49.7. A tile's last unit, counted by an atomic ticket, adding
// the splits itself was tried too: reading a tile a split with enough loads in flight took more registers than
// the kernel has, and ptxas spilled, so it was not timed.)
// The bias gradient (g summed over the pixels) comes with it where that is faster (kernel_sums_bias): the units
// of the first column tile also add up their g boxes in shared memory, each consumer thread 8 filters over 4 of
// a step's 64 pixels, while the step's wgmma batch runs, and write the sums as grad_w's: straight, or as row Q
// of partial[split]. Those units then run longer than the others, and the kernel waits for them: on an
// H100 (float16, both channels_last, us, kernel time with / without, and cuBLAS's gemv that it saves), batch 32
// 56 x 56 (31 steps a unit) 23.7 / 19.7 against 8.7, 28 x 28 (28) 19.5 / 17.1 against 6.9, 14 x 14 (33) 21.6 /
// 18.6 against 6.0, 7 x 7 (25) 27.0 / 23.4 against 4.3; batch 128 56 x 56 (121) 82.7 / 71.3 against 29.2, 28 x
// 28 (112) 64.9 / 54.1 against 13.7, but 14 x 14 (79) 60.1 / 46.9 against 7.4 and 7 x 7 (98) 79.5 / 59.9 against
// 6.5. kernel_sums_bias weighs the two, by constants fitted to these eight measurements.
struct TapWeightGradient {
  TensorCoreGemm conv;  // the forward's problem: where a pixel's taps read x (origin_of, reach_of), q's (tap, c)
  int taps, steps;      // steps of 64 pixels over the batch's output pixels
  int splits = 1, steps_per_split = 0;
  float* partial = nullptr;  // [split][Q + 1][O]: row q = (tap, c), row Q the bias; null: the units write
  void* grad_w = nullptr;    // (O, C, kH, kW) of the kernel's scalar_t, = beta * grad_w + scale * the sum
  void* bias_sum = nullptr;  // (O) of scalar_t, g summed over the pixels (scale 1), where asked
  float scale = 1.0f, beta = 0.0f;
};

template <typename scalar_t, int BM, int BN>
struct TapWeightGradientTiles {
  static constexpr int kStepK = kWgRowBytes / sizeof(scalar_t);  // pixels a step: 64 (2-byte types only)
  static constexpr int kBoxBytes = kStepK * kWgRowBytes;          // a box: 64 pixels x 128 bytes
  static constexpr int kBoxesX = BN / 64;
  const TapWeightGradient& wg;
  const TmaMaps& maps;  // x: im2col boxes of 64 pixels x 64 channels; w: g as (pixels, O), boxes of 64 x 64

  struct Unit {
    int o0, q0, split, first, steps;
    int c[kBoxesX];  // each box of x: its first channel, and its tap's reach
    Reach reach[kBoxesX];
  };
  __device__ int columns() const { return wg.taps * static_cast<int>(wg.conv.s.channels); }
  __device__ int tiles_o() const { return (wg.conv.out_channels + BM - 1) / BM; }
  __device__ int tiles_q() const { return (columns() + BN - 1) / BN; }
  __device__ int units() const { return tiles_q() * tiles_o() * wg.splits; }
  __device__ Unit unit(int u) const {  // the columns fastest, then the filters, the split
    Unit r;
    r.q0 = (u % tiles_q()) * BN;
    u /= tiles_q();
    r.o0 = (u % tiles_o()) * BM;
    r.split = u / tiles_o();
    r.first = r.split * wg.steps_per_split;
    r.steps = min(wg.steps_per_split, wg.steps - r.first);
#pragma unroll
    for (int b = 0; b < kBoxesX; ++b) {  // a box past the last column loads the last one's (its sums go unwritten)
      // C is a multiple of 64, so a box is one tap's
      const TapChannel tc = tap_channel_of(wg.conv, min(r.q0 + 64 * b, columns() - 64));
      r.c[b] = tc.c;
      r.reach[b] = reach_of(wg.conv, tc.tap);
    }
    return r;
  }
  __device__ void load(const Unit& u, int i, RingStage stage, uint32_t full) const {
    const int j = (u.first + i) * kStepK;  // the step's first output pixel
    const Origin origin = origin_of(wg.conv, j);
#pragma unroll
    for (int b = 0; b < BM / 64; ++b) tma_load_tile(stage.at + b * kBoxBytes, &maps.w, u.o0 + 64 * b, j, 0, full);
#pragma unroll
    for (int b = 0; b < kBoxesX; ++b) {
      tma_load_im2col(stage.at + BM * kWgRowBytes + b * kBoxBytes, &maps.x, u.c[b], origin.iw, origin.ih, origin.n,
                      static_cast<uint16_t>(u.reach[b].dw), static_cast<uint16_t>(u.reach[b].dh), full);
    }
  }
  // A consumer thread's part of the bias: filters 8c .. 8c + 7 of the tile (c = t % kBiasChunks), summed over
  // rows (pixels) r, r + 16, r + 32 and r + 48 of each step (r = t / kBiasChunks): one 16-byte load a row.
  static constexpr int kBiasChunks = BM / 8, kBiasRowGroups = wg_consumers(BM) / kBiasChunks;  // 16 either way
  struct Carry {
    float bias[8] = {};
  };
  __device__ bool sums_bias(const Unit& u) const { return wg.bias_sum != nullptr && u.q0 == 0; }
  __device__ void multiply(const Unit& u, Carry& carry, float (&d)[BN / 2], RingStage stage, int warpgroup) const {
    multiply_stage<scalar_t, BM, BN, true>(d, stage.at, warpgroup);
    if (!sums_bias(u)) return;
    // The stage's g boxes (64 pixels x 64 filters, a pixel's filters one swizzled row), read while the wgmma
    // batch runs: the stage stays until this warp hands it back, a step later.
    const int c = threadIdx.x % kBiasChunks, first = threadIdx.x / kBiasChunks;
    const unsigned char* box = stage.bytes + (c / 8) * kBoxBytes;
#pragma unroll
    for (int row = first; row < 64; row += kBiasRowGroups) {
      const auto g = load_pack<8>(reinterpret_cast<const scalar_t*>(box + swizzled_offset(row, (c % 8) * 16)));
#pragma unroll
      for (int i = 0; i < 8; ++i) carry.bias[i] += static_cast<float>(g.val[i]);
    }
  }
  __device__ void write(const Unit& u, const Carry& carry, const float (&acc)[1][BN / 8][4],
                        unsigned char* ring) const {
    const int warp = threadIdx.x / 32, o_first = u.o0 + (warp / 4) * 64 + (warp % 4) * 16;
    const int O = wg.conv.out_channels, Q = columns();  // O * (Q + 1) < 2^31 (the host checks)
    if (sums_bias(u)) write_bias(u, carry, O, Q);
    if (wg.partial != nullptr) {
      float* sums = wg.partial + static_cast<int64_t>(u.split) * (Q + 1) * O;
      const auto row_inside = [&](int row) { return o_first + row < O; };
      for_each_accumulator(acc, row_inside, [&](int row, int col, float value, int, int) {
        if (u.q0 + col < Q) sums[(u.q0 + col) * O + o_first + row] = value;
      });
      return;
    }
    scalar_t* grad_w = static_cast<scalar_t*>(wg.grad_w);  // (O, Q): filter o's columns q in order
    store_through_shared<float, BM, BN>(acc, ring, O - u.o0, Q - u.q0, [](float sum, int) { return sum; },
                                        [&](int row, int col, const float* sums, int n) {
                                          for (int e = 0; e < n; ++e) {
                                            scale_into(grad_w + (u.o0 + row) * Q + u.q0 + col + e, sums[e], wg.scale,
                                                       wg.beta);
                                          }
                                        });
  }
  // The row groups' sums of each filter added in order (the same bits every run), into bias_sum or row Q of
  // partial[split].
  __device__ void write_bias(const Unit& u, const Carry& carry, int O, int Q) const {
    __shared__ float parts[kBiasRowGroups][BM];
    const int t = threadIdx.x, c = t % kBiasChunks;
#pragma unroll
    for (int i = 0; i < 8; ++i) parts[t / kBiasChunks][8 * c + i] = carry.bias[i];
    consumer_barrier<BM>();
    if (t < BM && u.o0 + t < O) {
      float sum = 0.0f;
#pragma unroll
      for (int group = 0; group < kBiasRowGroups; ++group) sum += parts[group][t];
      if (wg.partial == nullptr) {
        static_cast<scalar_t*>(wg.bias_sum)[u.o0 + t] = static_cast<scalar_t>(sum);
      } else {
        wg.partial[(static_cast<int64_t>(u.split) * (Q + 1) + Q) * O + u.o0 + t] = sum;
      }
    }
    consumer_barrier<BM>();  // parts are read before the next unit's write_bias fills them
  }
  __device__ bool results_in_ring() const { return wg.partial == nullptr; }
};

template <typename scalar_t, int BM, int BN, int kPerSM>
__global__ void __launch_bounds__(wg_consumers(BM) + 32, kPerSM)
    wgmma_tma_weight_gradient_kernel(const TapWeightGradient wg, const __grid_constant__ TmaMaps maps) {
  static_assert(BM * (BN + 8) * sizeof(float) <= wg_stages<BM, BN, kPerSM>() * (BM + BN) * kWgRowBytes,
                "the ring holds a tile of float32 results (store_through_shared)");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  run_tma_pipeline<BM, BN, kPerSM>(TapWeightGradientTiles<scalar_t, BM, BN>{wg, maps});
#endif
}

// The tiles the weight gradient by taps runs in: BM filters x BN columns, per_sm blocks a multiprocessor, and
// a guess of their efficiency, a multiprocessor's work a step against one 128 x 128 tile's (launch_by_taps has
// one kernel for each). 64 filters (one consumer warpgroup) serve the 64-filter layers, which leave half of a
// 128-filter tile empty; 192 columns (three boxes of x) make fewer tiles where 128 would need one more wave.
// Measured on an H100, each tile forced (float16, both channels_last, the weight gradient's GPU time in a CUDA
// graph, us, batch 32 / 128; docs/benchmarks/conv_goals/h100_session27_tiles.md): 56 x 56 128 x 128 62.0 /
// 193.4, 64 x 128 50.9 / 125.6; 7 x 7 128 x 128 50.8 / 105.6, 128 x 192 41.3 / 81.6. Tiles of 128 x 64 (two a
// multiprocessor) and 64 x 192 (two, three stages each) were never the fastest, and are not built.
struct TapTile {
  int bm, bn, per_sm;
  double efficiency;
};
constexpr TapTile kTapTiles[] = {{128, 128, 1, 1.0}, {128, 192, 1, 1.0}, {64, 128, 2, 0.8}};

// Where a weight gradient's split sums lie: grad_w's column (c, tap) sums the rows c * channel_stride + (tap /
// kernel_w) * row_stride + (tap % kernel_w) * col_stride of partial[split] (each a run of the filters), the
// splits split_stride apart. By taps, row q = (tap, c) (Note [the weight gradient by taps]), and row Q the bias
// gradient's sums; as a convolution, the transposed problem's output pixel (kh, kw) of image c (Note [the weight
// gradient as a convolution]).
struct SplitRows {
  int channel_stride, row_stride, col_stride, kernel_w;
  int64_t split_stride;
  __device__ int64_t of(int c, int tap) const {
    return int64_t(c) * channel_stride + int64_t(tap / kernel_w) * row_stride + int64_t(tap % kernel_w) * col_stride;
  }
};

// A weight gradient's split sums, finished: grad_w (O, C, kH, kW), contiguous or channels_last, = beta * grad_w +
// scale * the sum of its rows of partial (SplitRows) over the splits, in split order, and bias_sum (when not
// null) the sum of row Q's (by taps). A block takes 32 filters x a run of kChannels * taps of grad_w's columns
// (contiguous: a filter's (c, kh, kw) for kChannels channels; channels_last: kChannels * taps consecutive
// (kh, kw, c)), and goes through shared memory both ways: it reads runs of 32 filters of partial (a warp's 128
// bytes) and writes the runs of grad_w. Straight from one to the other, one of the two would be a scatter, as
// the weight gradient as a convolution's finisher of one thread a value was (TF32, batch 32, 7 x 7,
// channels_last: 43.0 us, and an 18.0 us copy of its result to channels_last; H100, session 31).
// A warp sums kTapSplitsPairs (tap, channel) pairs at once, 4 splits at a time (sums_in_split_order), so that
// it waits for memory once per 32 terms, not once per 8. That did not make it faster (H100, float16, batch 32:
// 7 x 7, one split, 14.2 us in session 26, 14.0 after; 56 x 56, 51 splits in 32 blocks, 13.7 us);
// docs/benchmarks/profiles-2026-11-27/README.md says what bounds it.
// (Blocks of 8 channels were too few to keep the reads in flight: 16 of them for the 64-channel layers.)
// A block's run is kChannels * taps columns; where 4 channels a block make fewer blocks than half the GPU's
// multiprocessors (64 channels, 64 filters: 32 blocks), each takes 1, so that more reads are in flight. Measured
// on an H100 (batch 32, channels_last, 3 x 3, us, 4 -> 1 channel a block): by taps, float16, 56 x 56 11.0 ->
// 10.4 but 28 x 28 (128 blocks) 5.5 -> 8.2; as a convolution, TF32, 56 x 56 15.0 -> 9.8, 28 x 28 6.7 -> 8.8.
// With kByTaps, partial's rows are grad_w's channels_last columns themselves (row q = (tap, c)), found without
// dividing (a division a pair took the by-taps finisher of the 56 x 56 layer from 10.9 to 15.2 us, H100).
constexpr int kTapSplitsFilters = 32, kTapSplitsChannels = 4, kTapSplitsPairs = 8;
template <typename scalar_t, int kChannels, bool kByTaps>
__global__ void __launch_bounds__(kThreadsPerBlock)
    add_weight_splits_kernel(const float* __restrict__ partial, SplitRows rows, int splits, int taps, int channels,
                             int filters, float scale, float beta, bool channels_last, scalar_t* __restrict__ grad_w,
                             scalar_t* __restrict__ bias_sum) {
  extern __shared__ float tile[];  // tile[o][r]: the block's run of grad_w's row o, rows `pitch` apart (odd)
  constexpr int kWarps = kThreadsPerBlock / 32;
  const int o0 = blockIdx.x * kTapSplitsFilters, c0 = blockIdx.y * kChannels;
  const int run = kChannels * taps, pitch = run | 1, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int run0 = blockIdx.y * run, columns = taps * channels;  // the run: grad_w's columns [run0, run0 + run)
  const int valid = channels_last ? min(run, columns - run0) : min(kChannels, channels - c0) * taps;
  // Pair p of the run: the row of partial it sums (that of grad_w's column (c, tap)), and its place r in the
  // run. Contiguous, the run is channels c0 .. c0 + kChannels - 1, each one's taps; channels_last, it is the
  // columns themselves, (tap, c).
  const auto place = [&](int p) { return channels_last ? p : (p % kChannels) * taps + p / kChannels; };
  const auto row_of = [&](int p) -> int64_t {
    if constexpr (kByTaps) {
      return channels_last ? run0 + p : (p / kChannels) * channels + c0 + p % kChannels;
    } else {
      if (channels_last) return rows.of((run0 + p) % channels, (run0 + p) / channels);
      return rows.of(c0 + p % kChannels, p / kChannels);
    }
  };
  const int64_t split_stride = rows.split_stride;
  if (bias_sum != nullptr && blockIdx.y == 0 && warp == 0 && o0 + lane < filters) {
    bias_sum[o0 + lane] = static_cast<scalar_t>(
        sum_in_split_order(partial + static_cast<int64_t>(columns) * filters + o0 + lane, splits, split_stride));
  }
  for (int first = warp; first < run; first += kWarps * kTapSplitsPairs) {  // pairs, a warp's in turn
    int64_t offset[kTapSplitsPairs];
    float sum[kTapSplitsPairs];
#pragma unroll
    for (int i = 0; i < kTapSplitsPairs; ++i) {
      const int pair = first + i * kWarps;
      const bool inside = pair < run && place(pair) < valid && o0 + lane < filters;
      offset[i] = inside ? row_of(pair) * filters + o0 + lane : -1;
    }
    sums_in_split_order<kTapSplitsPairs, 4>(partial, offset, splits, split_stride, sum);
#pragma unroll
    for (int i = 0; i < kTapSplitsPairs; ++i) {
      const int pair = first + i * kWarps;
      if (pair < run) tile[lane * pitch + place(pair)] = sum[i];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTapSplitsFilters * run; i += kThreadsPerBlock) {
    const int o = o0 + i / run, r = i % run;
    if (o >= filters || r >= valid) continue;
    scale_into(grad_w + static_cast<int64_t>(o) * columns + run0 + r, tile[(i / run) * pitch + r], scale, beta);
  }
}

// col2im: a gather, one thread per image pixel summing the column entries
// copied from it (col2im_gather); no atomics, deterministic.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    col2im_kernel(const conv2d_mm::Im2colShape s, const scalar_t* __restrict__ col, scalar_t* __restrict__ image,
                  int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(index, n) {
    image[index] = static_cast<scalar_t>(conv2d_mm::col2im_gather<acc_t>(s, col, index));
  }
}

// out[b, o, l] = bias[o] for every image b and column l: the C that the
// forward GEMM then adds W . columns to (beta = 1). A block is threadIdx.y
// rows (b, o) of blockDim.x threads each, so the channel costs one division
// per row, not per element, and a short row (196 columns of a 14 x 14 plane)
// does not leave most of a block idle; each thread stores V columns at once.
template <int V, typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    broadcast_bias_kernel(const scalar_t* __restrict__ bias, scalar_t* __restrict__ out, int64_t channels,
                          int64_t cols, int64_t channel_stride, int64_t image_stride, int64_t rows) {
  const int64_t packs = cols / V, row_step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += row_step) {
    const int64_t o = row % channels, b = row / channels;
    scalar_t* dst = out + b * image_stride + o * channel_stride;
    Pack<scalar_t, V> value;
#pragma unroll
    for (int u = 0; u < V; ++u) value.val[u] = bias[o];
    for (int64_t q = threadIdx.x; q < packs; q += blockDim.x) store_pack<V>(dst, q, value);
  }
}

// grad_output (nb, O, L) laid out as the (O, nb*L) rows the weight-gradient
// GEMM reads: rows[o, n*L + l] = g[n, o, l] (skipped when rows is null: one
// image is its own rows), and bias[o] = (bias[o] +) the sum of those values,
// the bias gradient (skipped when bias is null). One block per channel o reads
// its nb runs of L values as V-element packs (16 bytes where every run starts
// aligned), thread t the packs t, t + kGatherThreads, ... of all nb runs in
// order, so short runs (a 7 x 7 image has 49 values) still keep every thread
// busy; each thread loads kGatherUnroll packs before it adds them, to keep
// enough bytes in flight, and its sums and the block's are added in a fixed
// order, so the bias gradient is the same on every run. g's runs start
// image_stride apart and hold L values at unit stride, L of a row apart when
// the chunk is a band of output rows.
constexpr int kGatherThreads = 512, kGatherUnroll = 4;
template <int V, typename scalar_t>
__global__ void __launch_bounds__(kGatherThreads)
    gather_rows_kernel(const scalar_t* __restrict__ g, int64_t nb, int64_t L, int64_t image_stride,
                       int64_t channel_stride, scalar_t* __restrict__ rows, scalar_t* __restrict__ bias,
                       bool add_to_bias) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t o = blockIdx.x, packs = L / V;  // packs in a run
  const scalar_t* src = g + o * channel_stride;
  scalar_t* dst = rows == nullptr ? nullptr : rows + o * nb * L;
  // This thread's next pack: pack q of run n; each step moves kGatherThreads packs on.
  int64_t n = threadIdx.x / packs, q = threadIdx.x % packs;
  const int64_t step_n = kGatherThreads / packs, step_q = kGatherThreads % packs;
  acc_t sum = 0;
  while (n < nb) {
    Pack<scalar_t, V> v[kGatherUnroll];
    int64_t run[kGatherUnroll], pack[kGatherUnroll];
#pragma unroll
    for (int u = 0; u < kGatherUnroll; ++u) {
      run[u] = n, pack[u] = q;
      if (n < nb) v[u] = load_pack<V>(src + n * image_stride, q);
      n += step_n, q += step_q;
      if (q >= packs) q -= packs, ++n;
    }
#pragma unroll
    for (int u = 0; u < kGatherUnroll; ++u) {
      if (run[u] >= nb) break;
      if (dst != nullptr) store_pack<V>(dst + run[u] * L, pack[u], v[u]);
#pragma unroll
      for (int e = 0; e < V; ++e) sum += static_cast<acc_t>(v[u].val[e]);
    }
  }
  if (bias == nullptr) return;  // the same for every thread of the block
  __shared__ acc_t warp_sums[kGatherThreads / kWarpSize];
  sum = block_allreduce(sum, Plus<acc_t>{}, acc_t(0), warp_sums);
  if (threadIdx.x == 0) bias[o] = static_cast<scalar_t>(add_to_bias ? static_cast<acc_t>(bias[o]) + sum : sum);
}

// Note [GEMMs without ATen's wrapper]
// at::bmm and at::baddbmm check, resize and view their arguments on every
// call; on an H100 host that cost about 20 us per call, more than the whole
// of cuDNN's convolution on a small input (tools/host_time.py). The GEMMs here
// call cuBLAS directly, on the handle and stream ATen's GEMMs use
// (at::cuda::getCurrentCUDABlasHandle), with the precision ATen would pick:
// float32 on TF32 tensor cores only when torch allows it for matmuls,
// half and bfloat16 accumulated in float. cuBLAS is column-major: a row-major
// matrix M in memory reads as M^T, so a row-major C = A . B is computed as
// C^T = B^T . A^T, operands swapped.

// The cuBLAS types of scalar_t: its data type, the compute type, and the type
// of alpha and beta.
template <typename scalar_t>
struct CublasTypes;
template <>
struct CublasTypes<double> {
  static constexpr cudaDataType_t data = CUDA_R_64F;
  using scale_t = double;
  static cublasComputeType_t compute() { return CUBLAS_COMPUTE_64F; }
};
template <>
struct CublasTypes<float> {
  static constexpr cudaDataType_t data = CUDA_R_32F;
  using scale_t = float;
  static cublasComputeType_t compute() {
    return at::globalContext().allowTF32CuBLAS() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  }
};
template <>
struct CublasTypes<at::Half> {
  static constexpr cudaDataType_t data = CUDA_R_16F;
  using scale_t = float;
  static cublasComputeType_t compute() { return CUBLAS_COMPUTE_32F; }
};
template <>
struct CublasTypes<at::BFloat16> {
  static constexpr cudaDataType_t data = CUDA_R_16BF;
  using scale_t = float;
  static cublasComputeType_t compute() { return CUBLAS_COMPUTE_32F; }
};

int cublas_int(int64_t v, const char* what) {
  TORCH_CHECK(v <= std::numeric_limits<int>::max(), "labops.conv2d_mm: ", what, " = ", v,
              " is too large for one cuBLAS call");
  return static_cast<int>(v);
}

// Column-major C[b] = alpha * op(A[b]) . op(B[b]) + beta * C[b] for b < batch,
// op(X) = X ('n') or X^T ('t'); op(A) is m x k, op(B) k x n, C m x n.
template <typename scalar_t>
void gemm_batched(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, double alpha, const scalar_t* a,
                  int64_t lda, int64_t stride_a, const scalar_t* b, int64_t ldb, int64_t stride_b, double beta,
                  scalar_t* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  using T = CublasTypes<scalar_t>;
  const typename T::scale_t alpha_v = static_cast<typename T::scale_t>(alpha);
  const typename T::scale_t beta_v = static_cast<typename T::scale_t>(beta);
  const auto op = [](char t) { return t == 't' ? CUBLAS_OP_T : CUBLAS_OP_N; };
  const cublasStatus_t status = cublasGemmStridedBatchedEx(
      at::cuda::getCurrentCUDABlasHandle(), op(trans_a), op(trans_b), cublas_int(m, "m"), cublas_int(n, "n"),
      cublas_int(k, "k"), &alpha_v, a, T::data, cublas_int(lda, "lda"), stride_a, b, T::data, cublas_int(ldb, "ldb"),
      stride_b, &beta_v, c, T::data, cublas_int(ldc, "ldc"), stride_c, cublas_int(batch, "batch"), T::compute(),
      CUBLAS_GEMM_DEFAULT);
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "labops.conv2d_mm: cuBLAS GEMM failed: ",
              cublasGetStatusString(status));
}

// A row-major matrix view cuBLAS can read: unit column stride and a row
// stride (leading dimension) of at least the row length; else a copy that is.
at::Tensor gemm_operand(const at::Tensor& m) {
  const bool ok = (m.stride(-1) == 1 || m.size(-1) == 1) && (m.stride(-2) >= m.size(-1) || m.size(-2) == 1);
  return ok ? m : m.contiguous();
}

// The leading dimension cuBLAS gets for a row-major matrix view: its row
// stride. A single row never steps by it (its stride may be anything), but
// cuBLAS still checks it against the row length.
int64_t leading_dim(const at::Tensor& m) {
  return m.size(-2) == 1 ? std::max<int64_t>(1, m.size(-1)) : m.stride(-2);
}

// How implicit_gemm_kernel covers a convolution with out_channels filters: 128 x 128 tiles (256 threads)
// when they make at least one block per multiprocessor, else 64 x 64 tiles (64 threads), four times as
// many blocks, for the small layers (14 x 14, 7 x 7) whose large tiles would leave most of the GPU idle.
// Either size gives the same bits (Note [implicit GEMM]). why_not: why the kernel cannot take the
// convolution ("" when it can): it counts K and its blocks in 32 bits (K below 2^30, so that k0 + BK and
// the FastDivider's numerators stay far from 2^31), and indexes inside an image in 32 bits (C*H*W below
// 2^31, and the padded H and W, so that im2col_source<int> cannot overflow).
struct ImplicitGemmPlan {
  bool big_tiles = false;
  int64_t blocks = 0;
  std::string why_not;

  ImplicitGemmPlan(const conv2d_mm::Im2colShape& s, int64_t out_channels) {
    const int64_t K = s.channels * s.kernel_area(), columns = s.batch * s.blocks();
    if (K >= (int64_t(1) << 30)) {
      why_not = "C*kH*kW = " + std::to_string(K) + " is 2^30 or more (the kernel counts along it in 32 bits)";
      return;
    }
    constexpr int64_t k2To31 = int64_t(1) << 31;
    if (s.channels * s.height * s.width >= k2To31 || s.height + 2 * s.pad_h >= k2To31 ||
        s.width + 2 * s.pad_w >= k2To31) {
      why_not = "an image of x has 2^31 elements or more, or its padded height or width is 2^31 or more "
                "(the kernel indexes inside an image in 32 bits)";
      return;
    }
    constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
    const auto tiles = [&](int64_t bm, int64_t bn) { return ceil_div(out_channels, bm) * ceil_div(columns, bn); };
    big_tiles = tiles(128, 128) >= multiprocessor_count();
    blocks = big_tiles ? tiles(128, 128) : tiles(64, 64);
    if (blocks > kMaxInt) why_not = "it would need 2^31 thread blocks or more";
  }
};

// Note [transposes at copy bandwidth]
// out[b][c][r] = in[b][r][c] for `batch` matrices of rows x cols: x (N, C, H*W) into channels_last (N, H*W, C)
// (ATen's copy into channels_last reads one side and writes the other at a stride: 20 us for a 32 x 128 x 28
// x 28 float16 x on an H100), and the flipped weight (O, C*kH*kW) into (C*kH*kW, O) for the input gradient,
// each row's runs of kH*kW taps read backwards (reversed_runs: that is the flip, with no pass of its own).
// It goes through shared memory in tiles of T x T elements whose rows are 128 bytes (T = 64
// float16 or bfloat16, 32 float32, 16 float64), so that a warp reads and writes whole 128-byte lines. A thread
// moves V elements with one access: 16 bytes where V divides rows and cols (the 56 x 56 and 28 x 28 images),
// less where it does not (14 x 14: 8 bytes of float16; 7 x 7: one element). It reads V consecutive columns of
// a tile row, and for the write gathers V consecutive rows of one column: the tile keeps 16-byte chunk q of row
// i at chunk q ^ ((i / kChunk) % 8), so the 8 groups of rows a warp gathers at once lie in 8 different groups
// of banks. (The 32 x 32 tiles of one element a thread this replaces moved 1.4 TB/s on an H100: 18 us for the
// 12.8 MB of a 32 x 64 x 56 x 56 float16 x.) Reversed runs cost nothing: out[c][r] = in[r][flip(c)], with
// flip(c) = c + run - 1 - 2 (c % run), is column c of a tile written to row flip(c) of out (flip is its own
// inverse), so the reads stay packs.
// The matrices may also sit in memory at other strides (TransposeShape): a channels_last batch (B, H*W, K) becomes
// (K, H*W, B) as H*W matrices B x K, for the weight gradient (Note [the weight gradient as a convolution]).
// Column c of a row read as runs of `run` elements, each run backwards: the flip, its own inverse (run 1: c).
template <typename index_t>
__device__ __forceinline__ index_t flipped_in_run(index_t c, index_t run) {
  return c + run - 1 - 2 * (c % run);
}

// v as the TF32 tensor cores should read it, where `tf32` (float32 only): rounded to the nearest
// (round_to_tf32). The copies that make the operands of rung 5 round them so that its kernel need not (Note
// [warp-specialized TMA pipeline]); the values are the same wherever the rounding happens.
template <typename scalar_t>
__device__ __forceinline__ scalar_t tf32_if(scalar_t v, bool tf32) {
  if constexpr (std::is_same_v<scalar_t, float>) return tf32 ? round_to_tf32(v) : v;
  return v;
}
// The body of a plain rounding copy (launch_elementwise), for operands that need no transpose.
struct RoundToTf32 {
  __device__ float operator()(float v) const { return round_to_tf32(v); }
};

// In (b, r, c) at b * in_batch + r * in_row + c; out (b, c, r) at b * out_batch + c * out_col + r.
struct TransposeShape {
  int64_t batch, rows, cols, in_batch, in_row, out_batch, out_col;
  static TransposeShape dense(int64_t batch, int64_t rows, int64_t cols) {
    return {batch, rows, cols, rows * cols, cols, rows * cols, rows};
  }
};
template <bool kReversedRuns, int V, typename scalar_t>
__global__ void __launch_bounds__(256)
    transpose_kernel(const scalar_t* __restrict__ in, scalar_t* __restrict__ out, const TransposeShape m,
                     int64_t run, bool tf32) {
  const int64_t rows = m.rows, cols = m.cols;
  constexpr int kChunk = 16 / sizeof(scalar_t), T = 8 * kChunk, kPacks = T / V;  // kPacks: packs in a tile row
  constexpr int kRowStep = 256 / kPacks, kPerThread = (T + kRowStep - 1) / kRowStep;
  static_assert(kChunk % V == 0, "a pack lies in one chunk of the tile");
  __shared__ Pack<scalar_t, kChunk> chunks[T * 8];
  scalar_t* tile = reinterpret_cast<scalar_t*>(chunks);
  const auto at = [](int i, int j) { return i * T + ((j / kChunk) ^ ((i / kChunk) % 8)) * kChunk + j % kChunk; };
  const int64_t tiles_r = (rows + T - 1) / T, tiles_c = (cols + T - 1) / T, tiles = m.batch * tiles_r * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t b = t / (tiles_r * tiles_c), rc = t - b * tiles_r * tiles_c;
    const int64_t r0 = rc / tiles_c * T, c0 = rc % tiles_c * T;
    const int n_rows = static_cast<int>(rows - r0 < T ? rows - r0 : T);
    const int n_cols = static_cast<int>(cols - c0 < T ? cols - c0 : T);
    const scalar_t* src = in + b * m.in_batch + r0 * m.in_row + c0;  // tile (i, j) is src[i * in_row + j] ...
    scalar_t* out_b = out + b * m.out_batch;  // ... and goes to out_b[(c0 + j) * out_col + r0 + i]
    // A thread's packs of the tile: column j (or, writing, rows i .. i + V - 1) of every kRowStep-th row.
    Pack<scalar_t, V> packs[kPerThread];  // all of a thread's loads in flight before the first store
    const int lane_j = threadIdx.x % kPacks * V, first = threadIdx.x / kPacks;
    const scalar_t* from = src + first * m.in_row + lane_j;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int i = first + k * kRowStep;
      if (i < n_rows && lane_j < n_cols) {  // V divides cols: a pack is whole or absent
        packs[k] = load_pack<V>(from + k * kRowStep * m.in_row);
      }
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int i = first + k * kRowStep;
      if (i < n_rows && lane_j < n_cols) store_pack<V>(tile + at(i, lane_j), packs[k]);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {  // the same thread indices, now (column j, first of V rows)
      const int j = first + k * kRowStep;
      if (j < n_cols && lane_j < n_rows) {  // V divides rows
        Pack<scalar_t, V> p;
#pragma unroll
        for (int e = 0; e < V; ++e) p.val[e] = tf32_if(tile[at(lane_j + e, j)], tf32);
        const int64_t to = kReversedRuns ? flipped_in_run(c0 + j, run) : c0 + j;
        store_pack<V>(out_b + to * m.out_col + r0 + lane_j, p);
      }
    }
    __syncthreads();  // the tile is read before the next one overwrites it
  }
}

// The same transposes where a matrix is narrower than transpose_kernel's tile (the weight (O, C, kH*kW) into
// (O, kH*kW, C): 9 columns; x of a 7 x 7 image: 49), which would leave most of its tiles empty and, for an odd
// width, move one element at a time. A block takes kNarrowRows rows of one matrix, which are one contiguous run
// of memory: it reads the run into shared memory and writes each of its `cols` columns as a run of up to
// kNarrowRows elements, both in V-element packs (16 bytes where the runs start aligned and the rows come in
// whole packs), so both sides are coalesced, and it counts inside the tile in 32 bits (one element a thread
// with 64-bit divisions took 15.8 us for a 512 x 512 x 3 x 3 float16 weight on an H100; this kernel one element
// at a time 10.9 us, with 16-byte reads and tiles of 128 rows 8.1-9.4 us). Tiles of up to kNarrowRows rows keep
// more bytes in flight a block; fewer rows where there would be too few tiles for the GPU (x of one 7 x 7 layer).
constexpr int kNarrowRows = 256;
// Matrices of elements of `element_size` bytes with fewer columns than this take narrow_transpose_kernel:
// transpose_kernel's tile, 64 float16, 32 float32, 16 float64.
constexpr int64_t narrow_below(int64_t element_size) { return 8 * kPackBytes / element_size; }
template <int V, typename scalar_t>
__global__ void __launch_bounds__(256)
    narrow_transpose_kernel(const scalar_t* __restrict__ in, scalar_t* __restrict__ out, int64_t rows, int cols,
                            int64_t batch, int run, int tile_rows, bool tf32) {
  // tile_rows <= kNarrowRows
  __shared__ Pack<scalar_t, V> packs[kNarrowRows * (narrow_below(sizeof(scalar_t)) - 1) / V];
  const scalar_t* tile = reinterpret_cast<const scalar_t*>(packs);
  const int64_t tiles_r = (rows + tile_rows - 1) / tile_rows, tiles = batch * tiles_r;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t b = t / tiles_r, r0 = (t - b * tiles_r) * tile_rows;
    const int n_rows = static_cast<int>(rows - r0 < tile_rows ? rows - r0 : tile_rows), n = n_rows * cols;
    const scalar_t* src = in + (b * rows + r0) * cols;  // rows r0 .. r0 + n_rows - 1, all columns
    for (int q = threadIdx.x; q < n / V; q += blockDim.x) packs[q] = load_pack<V>(src, q);
    __syncthreads();
    scalar_t* dst = out + b * rows * cols + r0;  // out[b][c][r0 + r], V consecutive r a store
    for (int q = threadIdx.x; q < n / V; q += blockDim.x) {
      const int c = q / (n_rows / V), r = (q - c * (n_rows / V)) * V, from = flipped_in_run(c, run);
      Pack<scalar_t, V> p;
#pragma unroll
      for (int e = 0; e < V; ++e) p.val[e] = tf32_if(tile[(r + e) * cols + from], tf32);
      store_pack<V>(dst + c * rows + r, p);
    }
    __syncthreads();  // the tile is read before the next one overwrites it
  }
}

// Output pixels an image needs before its weight gradient runs as a convolution (below), and the fewer it
// needs where TMA loads that convolution (backward_weight_as_convolution says why).
constexpr int64_t kMinPixelsForWeightGradientAsConvolution = 256, kMinPixelsWithTma = 128;
// Output pixels an image needs before the weight gradient of NCHW tensors runs by taps (backward_weight_by_taps).
constexpr int64_t kMinPixelsByTapsFromNchw = 128;

// The forward with its sum over k split (TensorCorePlan::splits, Note [wgmma implicit GEMM]): out[n, o, p] =
// bias[o] + the splits' float32 sums partial[split][n * L + p][o], added in split order, so the bits are the
// same on every run. A block moves 32 x 32 tiles (pixels x filters) through shared memory so that it reads
// rows of partial and writes rows of an NCHW out, 32 consecutive elements each (as transpose_kernel does);
// a channels_last out has partial's layout, and its rows are written as they were read.
template <typename scalar_t>
__global__ void __launch_bounds__(256)
    add_splits_to_output_kernel(const float* __restrict__ partial, int splits, int64_t columns, int64_t out_channels,
                                int64_t pixels, bool channels_last_out, const scalar_t* __restrict__ bias,
                                scalar_t* __restrict__ out) {
  __shared__ float tile[32][33];  // 33: a column of the tile spreads over the banks
  const int64_t tiles_o = (out_channels + 31) / 32, tiles = (columns + 31) / 32 * tiles_o;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t j0 = t / tiles_o * 32, o0 = t % tiles_o * 32;
    for (int i = ty; i < 32; i += 8) {
      const int64_t j = j0 + i, o = o0 + tx;
      if (j >= columns || o >= out_channels) continue;
      float sum = 0.0f;
      for (int split = 0; split < splits; ++split) sum += partial[(split * columns + j) * out_channels + o];
      tile[i][tx] = sum;
    }
    __syncthreads();
    for (int i = ty; i < 32; i += 8) {
      // channels_last: pixel j0 + i, filters o0 + tx (as read); NCHW: filter o0 + i, pixels j0 + tx
      const int64_t j = channels_last_out ? j0 + i : j0 + tx, o = channels_last_out ? o0 + tx : o0 + i;
      if (j >= columns || o >= out_channels) continue;
      const float sum = channels_last_out ? tile[i][tx] : tile[tx][i];
      const float b = bias != nullptr ? static_cast<float>(bias[o]) : 0.0f;
      const int64_t n = j / pixels, p = j - n * pixels;
      out[channels_last_out ? j * out_channels + o : (n * out_channels + o) * pixels + p] =
          static_cast<scalar_t>(sum + b);
    }
    __syncthreads();  // the tile is read before the next one overwrites it
  }
}

// Note [the weight gradient as a convolution]
// The weight gradient is a convolution too, of x by grad_output, with the batch as its channels:
//   grad_w[o, c, kh, kw] = sum over n, oh, ow of g[n, o, oh, ow] * x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw],
// which is the forward of "images" x'[c] = x[:, c] (C of them, N channels each) by "filters" g'[o] = g[:, o]
// (O of them, kernels Hout x Wout), with the stride and the dilation trading places and the same padding:
// its output pixel (kh, kw) of image c, filter o, is grad_w[o, c, kh, kw]. So the tensor_cores forward
// computes it with no columns matrix (im2col's rung writes and reads C*kH*kW values per output pixel:
// 115 MB for a 32 x 64 x 56 x 56 float16 layer). x' and g' are transposes of x and g (transpose_kernel):
// x' channels_last is x's memory as (N, C*H*W) transposed, g' in (kh, kw, c) order g's as (N, O*L); from a
// channels_last x or g, H*W matrices N x C (N x O) transposed in place of one (batch_last).
// Its GEMM is short and deep: C*kH*kW rows, O filters, N*Hout*Wout terms each (576 x 64 x 100352 for that
// layer: 5 tiles for 132 multiprocessors). So the sum over k is split (TensorCoreGemm::partial): each
// split writes its float32 sums, and add_weight_splits_kernel adds them in split order, so the result has the
// same bits on every run. Where the output of the transposed problem has more pixels than the kernel
// (a stride that does not divide evenly), the extra ones are computed and ignored.
// Whether this build has rung 5's kernel (labops/_build.py compiles for sm_90a where it finds sm_90: wgmma
// exists only there) and the current GPU can run it (compute capability 9.0 exactly: H100, H200).
inline bool wgmma_available() {
#if defined(LABOPS_SM90A)
  const cudaDeviceProp* p = at::cuda::getCurrentDeviceProperties();
  return p->major == 9 && p->minor == 0;
#else
  return false;
#endif
}

// The bounding box of an im2col map's filter bases (Note [TMA tiles]): the input pixel that tap (0, 0) of an
// output pixel reads runs from -pad to the last one whose farthest tap, reach = dilation * (k - 1) away, is
// still inside: dilation * (k - 1) - pad short of the far edge (the map's upper corner counts from it).
struct TmaBox {
  int64_t reach_h, reach_w, lower_h, lower_w, upper_h, upper_w;
  explicit TmaBox(const conv2d_mm::Im2colShape& s)
      : reach_h(s.dilation_h * (s.kernel_h - 1)),
        reach_w(s.dilation_w * (s.kernel_w - 1)),
        lower_h(-s.pad_h),
        lower_w(-s.pad_w),
        upper_h(s.pad_h - reach_h),
        upper_w(s.pad_w - reach_w) {}
};

// How a tensor-core kernel covers a convolution: tensor_core_gemm_kernel (rung 4, Note [tensor-core implicit
// GEMM]) in tiles of 128 x 128, 128 x 64 or 64 x 64 pixels x filters, 4 warps each (a 64 x 128 tile, cuDNN's
// pick for the 28 x 28 layers, measured slower than 128 x 128 there: 0.62 against 0.72 of cuDNN's speed), or
// with `wgmma` wgmma_gemm_kernel (rung 5, Note [wgmma implicit GEMM]) in tiles of 128 x 64 (two blocks a
// multiprocessor) or 128 x 128 (one), with TMA loads also 192 x 128 (one, three consumer warpgroups) and, in
// 2-byte types, 64 x 128 (two, one consumer warpgroup each), its sum
// over k split in up to 4 where the tiles are few. why_not: why the kernel cannot take the convolution (""
// when it can).
struct TensorCorePlan {
  bool wgmma = false;
  bool tma = false;  // wgmma: its tiles loaded by TMA (Note [TMA tiles]) where the maps can describe them
  int bm = 0, bn = 0, per_sm = 0;  // the tile, and how many blocks of it share a multiprocessor
  int splits = 1;                  // wgmma: how many parts the sum over k of a forward is split into
  int64_t blocks = 0;              // tiles (each run by `splits` blocks)
  std::string why_not;

  TensorCorePlan(const conv2d_mm::Im2colShape& s, int64_t out_channels, at::ScalarType dtype, bool use_wgmma = false)
      : wgmma(use_wgmma) {
    const int64_t K = s.channels * s.kernel_area(), columns = s.batch * s.blocks();
    if (dtype == at::kDouble) {
      why_not = "float64 has no tensor cores here (they multiply float16, bfloat16, and float32 as TF32)";
      return;
    }
    if (wgmma && !wgmma_available()) {
      why_not = "it needs an sm_90 GPU (H100, H200) and labops built for sm_90a (wgmma exists only there)";
      return;
    }
    if (dtype == at::kFloat && !at::globalContext().allowTF32CuDNN(at::Float32Op::CONV)) {
      why_not = "float32 with TF32 off for convolutions (torch.backends.cudnn.conv.fp32_precision): its tensor "
                "cores multiply float32 only as TF32";
      return;
    }
    const int64_t chunk = 16 / c10::elementSize(dtype);
    if (s.channels % chunk != 0) {
      why_not = "C = " + std::to_string(s.channels) + " is not a multiple of " + std::to_string(chunk) +
                " (the kernel loads 16 bytes of one pixel's channels at a time)";
      return;
    }
    constexpr int64_t k2To31 = int64_t(1) << 31;
    if (s.channels * s.height * s.width >= k2To31 || s.height + 2 * s.pad_h >= k2To31 ||
        s.width + 2 * s.pad_w >= k2To31 || K >= (int64_t(1) << 30) || columns >= k2To31 || out_channels >= k2To31) {
      why_not = "an image, the batch's output pixels, the filters or C*kH*kW pass its 32-bit counts";
      return;
    }
    // The tile size that finishes first by a rough model: a wave of blocks (as many as fit on the GPU at
    // once) takes as long as the area of the blocks one multiprocessor holds, and smaller tiles do less
    // work per byte they load (the factors are rough guesses, checked by tools/conv_goals.py on an H100).
    const int64_t sms = multiprocessor_count();
    double best = 0;
    // wgmma's plan also counts the blocks that share a multiprocessor where a wave is not full (104 blocks
    // of 128 x 64 on 132 multiprocessors run one each, at `alone` efficiency), and weighs the sum over k split
    // in 2 to 4 (a wave of blocks then takes 1/split as long, for the reading and writing of the float32 sums
    // a rough 30 % more), where each split still has 4 steps of k and the unsplit tiles fill at most half the
    // multiprocessors. Measured on an H100 (float16, fwd, of cuDNN's speed): the 7 x 7 layer at batch 32 ran
    // 0.77 in unsplit 128 x 64 tiles, 0.69 in 128 x 128 and 0.68 split in 2; 128 x 64 tiles alone on a
    // multiprocessor ran 0.96 at 28 x 28 against 1.04 two to a multiprocessor. With TMA loads (session 22, the
    // split forced) splitting still lost: 7 x 7 at batch 32 0.83 / 0.76 / 0.77 split in 2 / 3 / 4 against
    // 0.92-1.01 unsplit, at batch 128 0.55-0.68 against 0.95; 14 x 14 0.55-0.66 against 1.14. Nor did a deeper
    // ring help where 128 x 64 tiles run one a multiprocessor anyway (session 23, 6 stages instead of 4: 7 x 7
    // at batch 32 1.11 against 1.16, forward, float16; session 29, warp-specialized, 8 stages: 0.67-0.68
    // against 0.66-0.67). Nor did pairs of blocks (clusters of two) that share each step's x tile by TMA
    // multicast, so that L2 serves it once (session 29, forward, float16, both channels_last, one run each:
    // batch 32 7 x 7 0.73 against 0.75, 14 x 14 0.92 against 0.97): L2's bandwidth does not limit these
    // tiles. Nor did k split in two within such a cluster, the halves added through distributed shared memory
    // instead of float32 sums in global memory (7 x 7 at batch 32, 64 x 128 tiles: 0.76 either way, against
    // 0.85 unsplit in 128 x 64). (128 x 256 tiles
    // never finish first by this model: a wave of them takes as long as two of 128 x 128, and they come in half
    // as many.)
    const auto consider = [&](int m, int n, int blocks_per_sm, double efficiency, int split = 1,
                              double alone = 0) {
      const int64_t count = ceil_div(columns, int64_t(m)) * ceil_div(out_channels, int64_t(n));
      const int64_t waves = ceil_div(count * split, blocks_per_sm * sms);
      const int64_t sharing =
          alone > 0 ? std::min<int64_t>(blocks_per_sm, ceil_div(count * split, sms)) : blocks_per_sm;
      const double cost = double(waves) * sharing * m * n * (split == 1 ? 1.0 : 1.3) /
                          ((sharing < blocks_per_sm ? alone : efficiency) * split);
      if (bm == 0 || cost < best) bm = m, bn = n, per_sm = blocks_per_sm, blocks = count, splits = split, best = cost;
    };
    tma = wgmma && tma_takes(s, dtype);
    if (wgmma) {
      const int64_t steps = ceil_div<int64_t>(K, kWgRowBytes / c10::elementSize(dtype));
      const bool few_tiles = ceil_div(columns, int64_t(kWgBM)) * ceil_div(out_channels, int64_t(128)) * 2 <= sms;
      for (int split = 1; split <= (few_tiles ? 4 : 1) && (split == 1 || steps / split >= 4); ++split) {
        consider(kWgBM, 128, 1, 1.0, split, 1.0);
        consider(kWgBM, 64, 2, 0.88, split, 0.8);
      }
      // Three warpgroups, 192 pixels (TMA loads only): it wins where it needs fewer waves, where a last wave of
      // 128-pixel tiles would leave multiprocessors idle (the 28 x 28 layer at batch 32: 196 tiles of 128 for
      // 132 multiprocessors, two waves; 131 of 192, one), and, in 2-byte types, where it needs as many waves
      // of proportionally more work: three warpgroups share each step's filter tile, so a multiprocessor's step
      // does more work for the bytes it reads. Measured on an H100 (float16, both channels_last, each tile
      // forced, of cuDNN's speed, forward / input gradient; docs/benchmarks/conv_goals/h100_session28_tiles.md):
      // batch 128, 28 x 28 1.08 / 0.64 against 0.96-0.98 / 0.55-0.58 in 128-pixel tiles, 14 x 14 1.02 / 0.69
      // against 0.83-0.86 / 0.57-0.62. (TF32 was not measured so: 1.0, as before.)
      if (tma) consider(192, 128, 1, c10::elementSize(dtype) == 2 ? 1.1 : 1.0);
      // One warpgroup, 64 pixels x 128 filters, two blocks a multiprocessor (TMA loads, 2-byte types): where
      // they fill one wave two to a multiprocessor and 128 x 128 tiles one wave one each, two blocks' warpgroups
      // keep the tensor cores busier than one block's two. Measured on an H100 (float16, both channels_last,
      // forced for every layer, of cuDNN's speed, fwd / fwd+bwd, one run, session 29): batch 32 14 x 14 1.05 /
      // 1.06 against 0.99 / 1.01 in the model's pick; alone on a multiprocessor (one block each) 0.67 / 0.78;
      // at batch 128 and the other layers slower than the pick (14 x 14 0.87 against 1.04, 7 x 7 at batch 32 0.80
      // against 0.78).
      if (tma && c10::elementSize(dtype) == 2) consider(64, 128, 2, 1.06, 1, 0.8);
    } else {
      consider(128, 128, tc_blocks_per_sm<128, 128>(), 1.0);
      consider(128, 64, tc_blocks_per_sm<128, 64>(), 0.75);
      consider(64, 64, tc_blocks_per_sm<64, 64>(), 0.6);
    }
    if (blocks > std::numeric_limits<int>::max()) why_not = "it would need 2^31 thread blocks or more";
  }

  // Whether TMA can load rung 5's tiles (Note [TMA tiles]): a step's 128 bytes of k are channels of one tap
  // (C a multiple of 64 float16 or bfloat16, 32 float32: else the cp.async loads, which pack k across taps,
  // waste less), and the padding, stride and dilation fit the im2col map's fields (its corners are 8-bit,
  // its traversal strides at most 8, the taps' offsets at most 255).
  static bool tma_takes(const conv2d_mm::Im2colShape& s, at::ScalarType dtype) {
    if (s.channels == 0 || s.channels * c10::elementSize(dtype) % kWgRowBytes != 0) return false;
    const auto corner = [](int64_t v) { return v >= -128 && v <= 127; };
    const TmaBox bounds(s);
    return corner(bounds.lower_h) && corner(bounds.lower_w) && corner(bounds.upper_h) && corner(bounds.upper_w) &&
           bounds.reach_h <= 255 && bounds.reach_w <= 255 && s.stride_h <= 8 && s.stride_w <= 8 &&
           s.batch * s.blocks() > 0;
  }

  // The plan the gradients use (they have no ladder): rung 5's kernel where it takes the convolution, else
  // rung 4's (whose why_not then says why neither can).
  static TensorCorePlan fastest(const conv2d_mm::Im2colShape& s, int64_t out_channels, at::ScalarType dtype) {
    TensorCorePlan hopper(s, out_channels, dtype, true);
    return hopper.why_not.empty() ? hopper : TensorCorePlan(s, out_channels, dtype, false);
  }
};

struct Conv2dMMLauncher {
  // Columns of at most this many bytes at a time (the benchmark layers need
  // up to 231 MB in float32, so they run as one batched GEMM: one
  // strided-batched cuBLAS call instead of THNN's N small GEMMs, whose
  // L = 196..3136 columns each are too few to fill an H100; not yet timed
  // against the per-image loop on a GPU).
  static constexpr int64_t kColumnBudgetBytes = int64_t(512) << 20;

  // The forward's rung (forward_ladder, entry.h), unless one is forced. The textbook and im2col_gemm take
  // any input; implicit_gemm all but sizes past its 32-bit counts (ImplicitGemmPlan); tensor_cores and
  // wgmma what their TensorCorePlan allows.
  static int forward_rung(int forced, const conv2d_mm::Im2colShape& s, int64_t out_channels, at::ScalarType dtype) {
    // By default the fastest tensor-core rung that takes the input, else im2col_gemm. A plan is made only
    // where it is asked about (host time: this runs on every call).
    const auto refusal = [&](int rung) {
      if (rung == 3) return ImplicitGemmPlan(s, out_channels).why_not;
      if (rung == 4 || rung == 5) return TensorCorePlan(s, out_channels, dtype, rung == 5).why_not;
      return std::string();
    };
    const int automatic = refusal(5).empty() ? 5 : refusal(4).empty() ? 4 : 2;
    return conv2d_mm::forward_ladder().run(c10::DeviceType::CUDA, forced, automatic, refusal);
  }

  static constexpr bool kImplicitGemm = true;

  // Rung 3 (Note [implicit GEMM]): out (batch, O, out_h, out_w) contiguous, x, w and bias contiguous.
  template <typename scalar_t>
  static void forward_implicit_gemm(const conv2d_mm::Im2colShape& s, const scalar_t* x, const scalar_t* w,
                                    const scalar_t* bias, int64_t out_channels, scalar_t* out) {
    const ImplicitGemmPlan plan(s, out_channels);
    TORCH_INTERNAL_ASSERT(plan.why_not.empty(), "conv2d_mm: implicit_gemm forced past its refusal: ", plan.why_not);
    const int K = static_cast<int>(s.channels * s.kernel_area());
    const FastDivider kernel_area(static_cast<uint32_t>(s.kernel_area())), kernel_w(static_cast<uint32_t>(s.kernel_w));
    // The epilogue's 4-pixel vectors (Note [implicit GEMM]) need whole, aligned groups of 4 in every row.
    const bool vector_stores = s.blocks() % 4 == 0 && is_aligned(out, sizeof(Pack<scalar_t, 4>));
    const auto launch = [&](auto kernel, int threads) {
      kernel<<<static_cast<unsigned>(plan.blocks), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
          s, x, w, bias, out_channels, K, kernel_area, kernel_w, vector_stores, out);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (plan.big_tiles) {
      launch(implicit_gemm_kernel<128, 128, scalar_t>, igemm_threads<128, 128>());
    } else {
      launch(implicit_gemm_kernel<64, 64, scalar_t>, igemm_threads<64, 64>());
    }
  }

  // Rungs 4 and 5 (Notes [tensor-core implicit GEMM], [wgmma implicit GEMM]) by `plan`: x4 (N, C, H, W) in
  // any layout, weight (O, C, kH, kW), bias (O) or undefined; out (N, O, out_h, out_w) contiguous or
  // channels_last (written as it is). x is read
  // as channels_last (copied when it is not, or when its data is not 16-byte aligned) and the weight in
  // (kh, kw, c) order.
  static void forward_tensor_cores(const conv2d_mm::Im2colShape& s, const at::Tensor& x4, const at::Tensor& weight,
                                   const at::Tensor& bias, const at::Tensor& out, bool wgmma) {
    forward_on_plan(TensorCorePlan(s, weight.size(0), x4.scalar_type(), wgmma), s, x4, weight, bias, out);
  }
  // float32 runs here as TF32 (the plan takes it only then), rounded to the nearest. The copy that makes the
  // weight channels_last rounds it as it goes (weight_in_tf32: the caller's copy of the weight did), and so
  // does the one that makes x channels_last; a channels_last x is copied only to round it, except where the
  // TMA kernel rounds it in registers (Note [TF32 rounded on its way to the tensor cores] says where that
  // pays). The kernels otherwise read float32 as TF32 only (they truncate). Measured on an H100, in one run,
  // forward of cuDNN's TF32 speed, rounding in the cp.async kernel's shared memory / in the copies: 0.58 / 0.96
  // at 7 x 7, 0.80 / 1.06 at 28 x 28 (batch 32).
  // With forward_weight (the input gradient, Note [the input gradient as a convolution]) `weight` is the
  // forward's, (C, O, kH, kW) channels_last, read as it lies, each tap flipped.
  static void forward_on_plan(const TensorCorePlan& plan, const conv2d_mm::Im2colShape& s, const at::Tensor& x4,
                              const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& out,
                              bool weight_in_tf32 = false, bool forward_weight = false) {
    const int64_t O = weight.size(forward_weight ? 1 : 0);
    TORCH_INTERNAL_ASSERT(plan.why_not.empty(), "conv2d_mm: tensor_cores forced past its refusal: ", plan.why_not);
    const bool tf32 = x4.scalar_type() == at::kFloat;
    const bool round_a = tf32 && plan.tma && O <= plan.bn && is_channels_last_in_place(x4);
    const at::Tensor xc = channels_last(x4, tf32 && !round_a);  // (N, H, W, C) in memory
    const at::Tensor wk = forward_weight ? weight : channels_last(weight, tf32 && !weight_in_tf32);  // (O, kH, kW, C)
    TensorCoreGemm gemm(s, O);
    gemm.forward_weight = forward_weight;
    gemm.round_a = round_a;
    gemm.channels_last_out = !out.is_contiguous();  // else contiguous (output_format, entry.h)
    at::Tensor partial;  // the splits' sums, where the plan splits k
    if (plan.splits > 1) {
      const int64_t steps = ceil_div<int64_t>(gemm.K, kWgRowBytes / x4.element_size());
      gemm.steps_per_split = static_cast<int>(ceil_div<int64_t>(steps, plan.splits));
      gemm.splits = static_cast<int>(ceil_div<int64_t>(steps, gemm.steps_per_split));
      partial = labops::empty({gemm.splits, gemm.columns, O}, x4.options().dtype(at::kFloat));
      gemm.partial = partial.mutable_data_ptr<float>();
    }
    AT_DISPATCH_SWITCH(x4.scalar_type(), "labops_conv2d_mm_tensor_cores",
        AT_DISPATCH_CASE(at::kHalf, [&] { launch_tensor_cores<scalar_t>(plan, gemm, xc, wk, bias, out); })
        AT_DISPATCH_CASE(at::kBFloat16, [&] { launch_tensor_cores<scalar_t>(plan, gemm, xc, wk, bias, out); })
        AT_DISPATCH_CASE(at::kFloat, [&] { launch_tensor_cores<scalar_t>(plan, gemm, xc, wk, bias, out); }));
    if (plan.splits > 1) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "labops_add_splits_to_output", [&] {
        const int64_t tiles = ceil_div<int64_t>(gemm.columns, 32) * ceil_div<int64_t>(O, 32);
        const int64_t grid = std::min<int64_t>(tiles, int64_t(multiprocessor_count()) * 8);
        add_splits_to_output_kernel<scalar_t><<<static_cast<unsigned>(grid), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
            partial.const_data_ptr<float>(), gemm.splits, gemm.columns, O, s.blocks(), gemm.channels_last_out,
            bias.defined() ? bias.const_data_ptr<scalar_t>() : nullptr, out.mutable_data_ptr<scalar_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    }
  }

  // Note [the input gradient as a convolution]
  // At stride 1 the input gradient of a convolution is itself a convolution: grad_input[n, c, ih, iw] sums
  // grad_output[n, o, ih + pad - kh * dil, ...] * w[o, c, kh, kw], which is grad_output convolved with the
  // weight transposed (c <-> o) and flipped (kh -> kH - 1 - kh), padded by dil * (k - 1) - pad on each side.
  // So the tensor_cores forward computes it, with no columns and no col2im, whenever that padding is not
  // negative and TensorCorePlan takes the shape (O a multiple of 8, float16, bfloat16 or TF32); the sums run
  // in a fixed order, as every labops backward does. Returns false, computing nothing, when it cannot.
  static bool backward_input_as_convolution(const conv2d_mm::Im2colShape& s, const at::Tensor& g4,
                                            const at::Tensor& weight, const at::Tensor& grad_input) {
    if (s.stride_h != 1 || s.stride_w != 1) return false;
    const int64_t pad_h = s.dilation_h * (s.kernel_h - 1) - s.pad_h, pad_w = s.dilation_w * (s.kernel_w - 1) - s.pad_w;
    if (pad_h < 0 || pad_w < 0) return false;
    const int64_t O = weight.size(0);
    const conv2d_mm::Im2colShape t = conv2d_mm::make_shape(
        s.batch, O, s.out_h, s.out_w,
        {s.kernel_h, s.kernel_w, 1, 1, pad_h, pad_w, s.dilation_h, s.dilation_w});
    if (t.out_h != s.height || t.out_w != s.width) return false;
    const TensorCorePlan plan = TensorCorePlan::fastest(t, s.channels, g4.scalar_type());
    if (!plan.why_not.empty()) return false;
    // The flipped, transposed weight w'[c, o, kh, kw] = w[o, c, kH-1-kh, kW-1-kw]. In float16 and bfloat16 with
    // TMA loads, the kernel reads it from w itself: w channels_last (memory (O, kH, kW, C)) holds, for each
    // tap, an O x C plane with c fastest, which is w' for the flipped tap with c <-> o, a B tile that is
    // MN-major (Note [MN-major operands]); an NCHW w is made channels_last first. For a channels_last w that
    // saves a copy of it to NCHW and the flipped transpose (H100, float16, batch 32, 7 x 7: 6.5 + 4.7 us); fwd+bwd
    // with x, w and g channels_last, of cuDNN's speed, before -> after (one run each, same machine, session 29):
    // batch 32 7 x 7 0.77 -> 0.88, 14 x 14 0.95 -> 1.01, 28 x 28 1.52 -> 1.60 (float16).
    const at::ScalarType dtype = weight.scalar_type();
    if (plan.tma && (dtype == at::kHalf || dtype == at::kBFloat16)) {
      forward_on_plan(plan, t, g4, channels_last(weight), at::Tensor(), grad_input, false, true);
      return true;
    }
    // Else (TF32: its instruction transposes nothing) w' is made channels_last (memory (C, kH, kW, O)): one
    // transpose of the (O, C*kH*kW) matrix that reads each run of kH*kW taps backwards, which is the flip.
    at::Tensor memory = labops::empty({s.channels, s.kernel_h, s.kernel_w, O}, weight.options());
    const bool tf32 = weight.scalar_type() == at::kFloat;
    transpose(weight.contiguous(), 1, O, s.channels * s.kernel_area(), memory, s.kernel_area(), tf32);
    forward_on_plan(plan, t, g4, memory.permute({0, 3, 1, 2}), at::Tensor(), grad_input, tf32);
    return true;
  }

  // The weight gradient by taps (Note [the weight gradient by taps]) where it applies: float16 or bfloat16 on
  // Hopper, C filling whole 128-byte rows (the im2col map), O a multiple of 8 (g's rows are a map's 16-byte
  // strides). gw4 (O, C, kH, kW), contiguous or channels_last, = beta * gw4 + scale * the sum; bias_sum, when
  // defined, gets g summed over (n, oh, ow). Returns whether it ran.
  static bool backward_weight_by_taps(const conv2d_mm::Im2colShape& s, const at::Tensor& g4, const at::Tensor& x4,
                                      const at::Tensor& gw4, double scale, double beta, const at::Tensor& bias_sum) {
    const at::ScalarType dtype = x4.scalar_type();
    const int64_t O = g4.size(1), C = s.channels, pixels = s.batch * s.blocks(), taps = s.kernel_area();
    constexpr int64_t k2To31 = int64_t(1) << 31;
    if ((dtype != at::kHalf && dtype != at::kBFloat16) || !wgmma_available() ||
        !TensorCorePlan::tma_takes(s, dtype) || O % 8 != 0 || pixels >= k2To31 || (taps * C + 1) * O >= k2To31) {
      return false;
    }
    // Where x and g are channels_last already, it reads them as they are, and it measured faster than the other
    // paths at every ResNet-18 layer (H100, float16, fwd+bwd of cuDNN's speed, both channels_last, one run, batch
    // 32 / 128: 56 x 56 0.88 -> 0.97 / 0.80 -> 0.83, 28 x 28 0.95 -> 1.34 / 0.98 -> 1.23, 14 x 14 0.59 -> 0.90 /
    // 0.81 -> 1.03, 7 x 7 0.63 -> 0.65 / 0.67 -> 0.79). From NCHW tensors it copies both to channels_last first,
    // as the convolution path does too, and runs where an image has 128 output pixels or more. With the tiles of
    // kTapTiles (H100, float16, the weight gradient's GPU time in a CUDA graph, us, batch 32 / 128, against the
    // convolution path): 56 x 56 80.9 / 213.9 against 74.6 / 232.3, 28 x 28 53.1 / 130.3 against 58.3 / 136.9,
    // and 7 x 7 47.4 / 99.2 against 42.5 / 118.2: below 128 pixels, it lost at batch 32.
    const bool both_channels_last = conv2d_mm::output_format(x4) == at::MemoryFormat::ChannelsLast &&
                                    conv2d_mm::output_format(g4) == at::MemoryFormat::ChannelsLast;
    if (!both_channels_last && s.blocks() < kMinPixelsByTapsFromNchw) return false;
    const at::Tensor xc = channels_last(x4), gc = channels_last(g4);  // (N, H, W, C), (N, Hout, Wout, O) in memory
    // The tile (filters x columns, and how many blocks share a multiprocessor) and the split of k that finish
    // first by a rough model: waves of units times a unit's steps, plus, unless the units write a channels_last
    // grad_w themselves, the float32 sums they write and add_tap_splits_kernel reads, and its launch (the
    // constants are rough guesses for an H100, float16; efficiency: a multiprocessor's work a step against one
    // 128 x 128 tile's).
    const bool channels_last_gw = !gw4.is_contiguous();  // the caller's: contiguous or channels_last
    constexpr double kStepMicros = 0.47;     // one 128 x 128 tile's step of 64 pixels on a multiprocessor
    constexpr double kBytesPerMicro = 3e6;   // memory bandwidth
    constexpr double kFinisherMicros = 2.0;  // add_tap_splits_kernel's launch and last wave
    const int64_t steps = ceil_div<int64_t>(pixels, 64), places = multiprocessor_count();
    const auto tiles_of = [&](const TapTile& tile) {
      return ceil_div<int64_t>(O, tile.bm) * ceil_div<int64_t>(taps * C, tile.bn);
    };
    size_t best_tile = 0;
    int64_t best_splits = 1;
    double best = 0;
    for (size_t index = 0; index < std::size(kTapTiles); ++index) {
      const TapTile& tile = kTapTiles[index];
      const int64_t tiles = tiles_of(tile);
      const double wave_step = kStepMicros * tile.per_sm * tile.bm * tile.bn / (128.0 * 128.0) / tile.efficiency;
      for (int64_t split = 1; split <= 64 && (split == 1 || steps / split >= 4); ++split) {
        const int64_t waves = ceil_div<int64_t>(tiles * split, tile.per_sm * places);
        const bool units_write = split == 1 && channels_last_gw;
        const double sums =
            units_write ? 0.0 : 2.0 * split * taps * O * C * sizeof(float) / kBytesPerMicro + kFinisherMicros;
        const double cost = double(waves) * ceil_div<int64_t>(steps, split) * wave_step + sums;
        if (best == 0 || cost < best) best_tile = index, best_splits = split, best = cost;
      }
    }
    TapWeightGradient wg{TensorCoreGemm(s, O), static_cast<int>(taps), static_cast<int>(steps)};
    wg.steps_per_split = static_cast<int>(ceil_div<int64_t>(steps, best_splits));
    wg.splits = static_cast<int>(ceil_div<int64_t>(steps, wg.steps_per_split));
    wg.grad_w = gw4.data_ptr();
    if (bias_sum.defined() && kernel_sums_bias(wg.steps_per_split, pixels * O * gc.element_size())) {
      TORCH_INTERNAL_ASSERT(bias_sum.scalar_type() == dtype && bias_sum.is_contiguous());
      wg.bias_sum = bias_sum.data_ptr();
    } else if (bias_sum.defined()) {  // g as a (pixels, O) matrix times ones: cuBLAS's gemv, the same bits every run
      const at::Tensor g2 = gc.permute({0, 2, 3, 1}).reshape({pixels, O});
      at::mv_out(const_cast<at::Tensor&>(bias_sum), g2.t(), at::ones({pixels}, gc.options()));
    }
    wg.scale = static_cast<float>(scale);
    wg.beta = static_cast<float>(beta);
    at::Tensor partial;  // kept until the kernels have run (the caching allocator follows the stream)
    const bool units_write = wg.splits == 1 && channels_last_gw;
    if (!units_write) {
      partial = labops::empty({wg.splits, taps * C + 1, O}, x4.options().dtype(at::kFloat));
      wg.partial = partial.mutable_data_ptr<float>();
    }
    TmaMaps maps;
    maps.x = x_im2col_map(s, xc, 64);
    const cuuint64_t row = O * gc.element_size();  // g as a (pixels, O) matrix, boxes of 64 pixels x 64 filters
    const cuuint64_t g_dims[3] = {static_cast<cuuint64_t>(O), static_cast<cuuint64_t>(pixels), 1};
    const cuuint64_t g_strides[2] = {row, row * static_cast<cuuint64_t>(pixels)};
    const cuuint32_t g_box[3] = {64, 64, 1};
    maps.w = tiled_map(gc, g_dims, g_strides, g_box, "grad_output");
    const TapTile& tile = kTapTiles[best_tile];
    const int64_t units = tiles_of(tile) * wg.splits;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(units, int64_t(tile.per_sm) * places));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_REDUCED_FLOATING_TYPES(dtype, "labops_conv2d_mm_weight_gradient_by_taps", [&] {
      launch_by_taps<scalar_t>(best_tile, blocks, wg, maps, stream, std::make_index_sequence<std::size(kTapTiles)>());
      if (!units_write) {
        const int kw = static_cast<int>(s.kernel_w);
        const SplitRows rows{1, kw * static_cast<int>(C), static_cast<int>(C), kw, (wg.taps * C + 1) * O};
        add_weight_splits<scalar_t, true>(wg.partial, rows, wg.splits, wg.taps, C, O, wg.scale, wg.beta,
                                          channels_last_gw, wg.grad_w, wg.bias_sum, stream);
      }
    });
    return true;
  }

  // Whether the weight gradient by taps sums the bias too (Note [the weight gradient by taps]): its units of the
  // first column tile, each `steps` steps long, then take about kBiasStepMicros a step longer (the time of the
  // kernel), against cuBLAS's gemv over g's `bytes` (two kernels). Fitted to H100 measurements, float16.
  static bool kernel_sums_bias(int64_t steps, int64_t bytes) {
    constexpr double kBiasStepMicros = 0.14, kGemvMicros = 3.0, kGemvBytesPerMicro = 1.8e6;
    return steps * kBiasStepMicros < kGemvMicros + bytes / kGemvBytesPerMicro;
  }

  // The kernel of kTapTiles[tile], one instantiation for each entry of the table.
  template <typename scalar_t, size_t... kIndices>
  static void launch_by_taps(size_t tile, unsigned blocks, const TapWeightGradient& wg, const TmaMaps& maps,
                             cudaStream_t stream, std::index_sequence<kIndices...>) {
    ((tile == kIndices ? launch_tile_by_taps<scalar_t, kTapTiles[kIndices].bm, kTapTiles[kIndices].bn,
                                           kTapTiles[kIndices].per_sm>(blocks, wg, maps, stream)
                     : void()),
     ...);
  }
  template <typename scalar_t, int BM, int BN, int kPerSM>
  static void launch_tile_by_taps(unsigned blocks, const TapWeightGradient& wg, const TmaMaps& maps,
                                  cudaStream_t stream) {
    constexpr int kBytes = wg_smem_bytes<BM, BN, kPerSM>();
    const auto kernel = with_shared_memory<wgmma_tma_weight_gradient_kernel<scalar_t, BM, BN, kPerSM>, kBytes>();
    kernel<<<blocks, wg_consumers(BM) + 32, kBytes, stream>>>(wg, maps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // add_weight_splits_kernel's shared memory: 32 filters x a run of channels_per_block * taps columns (at most 4).
  static int64_t weight_splits_bytes(int64_t taps, int64_t channels_per_block = kTapSplitsChannels) {
    return kTapSplitsFilters * ((channels_per_block * taps) | 1) * static_cast<int64_t>(sizeof(float));
  }
  template <typename scalar_t, bool kByTaps>
  static void add_weight_splits(const float* partial, const SplitRows& rows, int splits, int64_t taps, int64_t C,
                                int64_t O, float scale, float beta, bool channels_last, void* grad_w, void* bias_sum,
                                cudaStream_t stream) {
    const int64_t filter_blocks = ceil_div<int64_t>(O, kTapSplitsFilters);
    const auto launch = [&](auto channels_per_block) {
      constexpr int kChannels = decltype(channels_per_block)::value;
      const dim3 grid(static_cast<unsigned>(filter_blocks), static_cast<unsigned>(ceil_div<int64_t>(C, kChannels)));
      const int bytes = static_cast<int>(weight_splits_bytes(taps, kChannels));
      const auto kernel = add_weight_splits_kernel<scalar_t, kChannels, kByTaps>;
      if (bytes > 48 * 1024) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      }
      kernel<<<grid, kThreadsPerBlock, bytes, stream>>>(partial, rows, splits, static_cast<int>(taps),
                                                        static_cast<int>(C), static_cast<int>(O), scale, beta,
                                                        channels_last, static_cast<scalar_t*>(grad_w),
                                                        static_cast<scalar_t*>(bias_sum));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (2 * filter_blocks * ceil_div<int64_t>(C, kTapSplitsChannels) < multiprocessor_count()) {
      launch(std::integral_constant<int, 1>{});
    } else {
      launch(std::integral_constant<int, kTapSplitsChannels>{});
    }
  }

  // Note [the weight gradient as a convolution]: gw4 (O, C, kH, kW), contiguous or channels_last, = beta * gw4
  // + scale * the weight gradient of g4 (N, O, Hout, Wout) and x4 (N, C, H, W), each NCHW or channels_last
  // (batch_last), and bias_sum (when defined) = the bias gradient at scale 1. Returns false, computing nothing,
  // where TensorCorePlan does not take the transposed problem (N not a multiple of 8, float64, ...), the columns
  // are faster, or the finisher's shared memory cannot hold a run of 4 * kH * kW columns.
  static bool backward_weight_as_convolution(const conv2d_mm::Im2colShape& s, const at::Tensor& g4,
                                             const at::Tensor& x4, const at::Tensor& gw4, double scale,
                                             double beta, const at::Tensor& bias_sum) {
    const int64_t O = g4.size(1), N = s.batch, C = s.channels;
    TORCH_INTERNAL_ASSERT(gw4.is_contiguous() || gw4.is_contiguous(at::MemoryFormat::ChannelsLast));
    if (weight_splits_bytes(s.kernel_area()) > max_shared_bytes_per_block()) return false;
    const conv2d_mm::Im2colShape t = conv2d_mm::make_shape(
        C, N, s.height, s.width,
        {s.out_h, s.out_w, s.dilation_h, s.dilation_w, s.pad_h, s.pad_w, s.stride_h, s.stride_w});
    if (t.out_h < s.kernel_h || t.out_w < s.kernel_w) return false;
    const TensorCorePlan plan = TensorCorePlan::fastest(t, O, x4.scalar_type());
    if (!plan.why_not.empty()) return false;
    // Small images have small columns, and there the columns and cuBLAS can be faster. Measured on an H100
    // (fwd+bwd of cuDNN's speed, docs/benchmarks/conv_goals/h100_weight_gradient_tma/): where rung 5 loads the
    // transposed problem by cp.async (its channels, the batch, fill less than 128 bytes: float16 at batch 32)
    // the columns won at 14 x 14 and 7 x 7 (1.03 and 0.97 against 0.96 and 0.69); where TMA loads it, this
    // convolution won for TF32 at both (batch 32: 0.85 and 0.62 against 0.64 and 0.48; the columns' cuBLAS GEMM
    // runs in full float32, as matmuls default to) and for float16 at batch 128 at 14 x 14 (0.84 against 0.72),
    // not at 7 x 7 (0.81 against 0.88). From 256 pixels an image it wins everywhere measured.
    const int64_t pixels = s.blocks();
    const bool convolution_faster = pixels >= kMinPixelsForWeightGradientAsConvolution ||
                                    (plan.tma && (x4.scalar_type() == at::kFloat || pixels >= kMinPixelsWithTma));
    if (!convolution_faster) return false;
    // x' (C, N, H, W) channels_last and g' (O, N, Hout, Wout) in (kh, kw, c) order: one transpose each, from
    // NCHW or channels_last. float32 (TF32) rounded as they go (forward_on_plan says why), except g' where the
    // bias gradient, which must be summed from values not rounded, can only come from g' (a channels_last g4):
    // that g' is rounded once the bias is summed.
    const bool float32 = x4.scalar_type() == at::kFloat;
    const bool bias_from_g4 = float32 && bias_sum.defined() && g4.is_contiguous();
    const bool round_g_in_copy = float32 && (!bias_sum.defined() || bias_from_g4);
    at::Tensor x_memory = labops::empty({C, s.height, s.width, N}, x4.options());
    batch_last(x4, x_memory, float32);
    at::Tensor g_memory = labops::empty({O, s.out_h, s.out_w, N}, g4.options());
    batch_last(g4, g_memory, round_g_in_copy);
    // The bias gradient: each filter's row of g' summed (gather_rows with no rows to write: 16-byte loads, one
    // block per filter, several times faster than ATen's sum over (n, l): 9.8 against 40 us for a 32 x 64 x 56 x
    // 56 float16 grad_output on an H100, docs/benchmarks/conv_goals/h100_kernel_times_fast_sums.md).
    if (bias_sum.defined()) {
      gather_rows(bias_from_g4 ? g4.view({N, O, s.blocks()}) : g_memory.view({1, O, s.blocks() * N}), at::Tensor(),
                  bias_sum, false);
    }
    if (float32 && !round_g_in_copy) g_memory = round_to_tf32_copy(g_memory);
    TensorCoreGemm gemm(t, O);
    // Splits: as many as one wave of blocks holds (TensorCorePlan's tiles times the splits), at least 16 steps
    // each. Rounded down: one split more than fits leaves a few blocks a second wave of their own, which takes
    // as long as the first (rounded up, 36 tiles of the 14 x 14 layer made 144 blocks for 132 places).
    const int64_t step_bytes = plan.wgmma ? kWgRowBytes : kTcRowBytes;
    const int64_t steps = ceil_div<int64_t>(gemm.K, step_bytes / x4.element_size());
    const int64_t places = int64_t(plan.per_sm) * multiprocessor_count();
    const int64_t wanted = places / plan.blocks;
    const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(wanted, steps / 16));
    gemm.steps_per_split = static_cast<int>(ceil_div<int64_t>(steps, splits));
    gemm.splits = static_cast<int>(ceil_div<int64_t>(steps, gemm.steps_per_split));
    at::Tensor partial = labops::empty({gemm.splits, gemm.columns, O}, x4.options().dtype(at::kFloat));
    gemm.partial = partial.mutable_data_ptr<float>();
    const at::Tensor xc = x_memory.permute({0, 3, 1, 2}), wk = g_memory.permute({0, 3, 1, 2});
    AT_DISPATCH_SWITCH(x4.scalar_type(), "labops_conv2d_mm_weight_gradient",
        AT_DISPATCH_CASE(at::kHalf, [&] { launch_tensor_cores<scalar_t>(plan, gemm, xc, wk, at::Tensor(), partial); })
        AT_DISPATCH_CASE(at::kBFloat16, [&] {
          launch_tensor_cores<scalar_t>(plan, gemm, xc, wk, at::Tensor(), partial);
        })
        AT_DISPATCH_CASE(at::kFloat, [&] { launch_tensor_cores<scalar_t>(plan, gemm, xc, wk, at::Tensor(), partial); }));
    // The transposed problem's output pixel (kh, kw) of image c is grad_w's column (c, tap).
    const int pixels_per_image = static_cast<int>(t.out_h * t.out_w), out_w = static_cast<int>(t.out_w);
    const SplitRows rows{pixels_per_image, out_w, 1, static_cast<int>(s.kernel_w), int64_t(gemm.columns) * O};
    const auto finish = [&](auto zero) {
      using scalar_t = decltype(zero);
      add_weight_splits<scalar_t, false>(gemm.partial, rows, gemm.splits, s.kernel_area(), C, O,
                                         static_cast<float>(scale), static_cast<float>(beta), !gw4.is_contiguous(),
                                         gw4.mutable_data_ptr(), nullptr, c10::cuda::getCurrentCUDAStream());
    };
    AT_DISPATCH_SWITCH(gw4.scalar_type(), "labops_add_weight_splits",
        AT_DISPATCH_CASE(at::kHalf, [&] { finish(scalar_t{}); })
        AT_DISPATCH_CASE(at::kBFloat16, [&] { finish(scalar_t{}); })
        AT_DISPATCH_CASE(at::kFloat, [&] { finish(scalar_t{}); }));
    return true;
  }

  // t (B, C, H, W) with its memory (B, H, W, C), 16-byte aligned: t itself when it is so already, else a
  // copy (transpose_kernel from a contiguous t). With tf32 (float32) always a copy, rounded to TF32: a
  // channels_last t by one elementwise pass (round_to_tf32_copy says why).
  static bool is_channels_last_in_place(const at::Tensor& t) {
    return t.is_contiguous(at::MemoryFormat::ChannelsLast) && is_aligned(t.const_data_ptr());
  }
  static at::Tensor channels_last(const at::Tensor& t, bool tf32 = false) {
    if (is_channels_last_in_place(t)) {
      return tf32 ? round_to_tf32_copy(t) : t;
    }
    const at::Tensor src = t.contiguous();
    at::Tensor out = labops::empty(src.sizes(), src.options(), at::MemoryFormat::ChannelsLast);
    transpose(src, src.size(0), src.size(1), src.size(2) * src.size(3), out, 1, tf32);
    return out;
  }

  // A copy of the float32 t (dense, in its own layout), rounded to TF32. Rounding in rung 5's kernel instead
  // (a pass over each stage in shared memory, and a barrier) made its GEMM about twice as long: on an H100,
  // TF32, batch 32, channels_last x, 7 x 7 114 us against 52.5 us with NCHW x rounded by its transpose, 28 x
  // 28 48.6 against 29.3 (docs/benchmarks/conv_goals/h100_kernel_times_session25.md).
  static at::Tensor round_to_tf32_copy(const at::Tensor& t) {
    TORCH_INTERNAL_ASSERT(t.scalar_type() == at::kFloat && t.is_non_overlapping_and_dense());
    at::Tensor out = at::empty_like(t);
    const float* src = t.const_data_ptr<float>();
    float* dst = out.mutable_data_ptr<float>();
    const bool vector_loads = is_aligned(src) && is_aligned(dst);
    launch_elementwise(std::array<const float*, 1>{src}, dst, t.numel(), RoundToTf32{}, vector_loads);
    return out;
  }

  // t contiguous: itself, or a copy; from channels_last (N, C, H, W) by one transpose of the N (H*W) x C
  // matrices of its memory (ATen's copy of a channels_last tensor to NCHW ran a few times slower on an H100).
  static at::Tensor contiguous(const at::Tensor& t) {
    if (t.dim() != 4 || t.is_contiguous() || !t.is_contiguous(at::MemoryFormat::ChannelsLast)) return t.contiguous();
    at::Tensor out = labops::empty(t.sizes(), t.options());
    transpose(t, t.size(0), t.size(2) * t.size(3), t.size(1), out);
    return out;
  }

  // out's memory = the `batch` row-major rows x cols matrices of src's (contiguous) memory, each transposed;
  // with reversed_runs > 1, each row read as runs of that many elements, each run backwards (a flip); with
  // tf32, float32 values rounded to TF32 (tf32_if).
  static void transpose(const at::Tensor& src, int64_t batch, int64_t rows, int64_t cols, const at::Tensor& out,
                        int64_t reversed_runs = 1, bool tf32 = false) {
    if (out.numel() == 0) return;
    TORCH_INTERNAL_ASSERT(reversed_runs >= 1 && cols % reversed_runs == 0);
    if (cols >= narrow_below(src.element_size())) {
      transpose_strided(src, TransposeShape::dense(batch, rows, cols), out, reversed_runs, tf32);
      return;
    }
    // Narrow matrices: the weight's (C, kH*kW), a small image's (C, H*W). Tiles of up to kNarrowRows rows, fewer
    // where that would leave the GPU short of two blocks a multiprocessor.
    const int64_t sms = multiprocessor_count();
    int tile_rows = kNarrowRows;
    while (tile_rows > 32 && batch * ceil_div<int64_t>(rows, tile_rows) < 2 * sms) tile_rows /= 2;
    const int64_t grid = std::min<int64_t>(batch * ceil_div<int64_t>(rows, tile_rows), sms * 16);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "labops_transpose", [&] {
      // Packs where every tile's run starts on a 16-byte boundary and holds whole packs.
      constexpr int kVec = vec_width<scalar_t>();
      const bool packed = rows % kVec == 0 && is_aligned(src.const_data_ptr()) && is_aligned(out.const_data_ptr());
      const auto kernel = packed ? narrow_transpose_kernel<kVec, scalar_t> : narrow_transpose_kernel<1, scalar_t>;
      kernel<<<static_cast<unsigned>(grid), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
          src.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), rows, static_cast<int>(cols), batch,
          static_cast<int>(reversed_runs), tile_rows, tf32);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }

  // transpose_kernel over matrices at any strides (TransposeShape), src's and out's memory from their starts.
  static void transpose_strided(const at::Tensor& src, const TransposeShape& m, const at::Tensor& out,
                                int64_t reversed_runs = 1, bool tf32 = false) {
    if (m.batch * m.rows * m.cols == 0) return;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "labops_transpose", [&] {
      // The widest pack (Note [transposes at copy bandwidth]) that divides the sizes, the strides and both starts.
      constexpr int kChunk = vec_width<scalar_t>(), kTile = 8 * kChunk;
      int v = kChunk;
      const auto fits = [&](int64_t n) {
        return m.rows % n == 0 && m.cols % n == 0 && m.in_batch % n == 0 && m.in_row % n == 0 &&
               m.out_batch % n == 0 && m.out_col % n == 0 && is_aligned(src.const_data_ptr(), n * src.element_size()) &&
               is_aligned(out.const_data_ptr(), n * src.element_size());
      };
      while (v > 1 && !fits(v)) v /= 2;
      const int64_t tiles = m.batch * ceil_div<int64_t>(m.rows, kTile) * ceil_div<int64_t>(m.cols, kTile);
      const int64_t grid = std::min<int64_t>(tiles, int64_t(multiprocessor_count()) * 8);
      const auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(grid), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
            src.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), m, reversed_runs, tf32);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      const auto launch_packs = [&](auto reversed) {
        constexpr bool kReversed = decltype(reversed)::value;
        if (v == 1) launch(transpose_kernel<kReversed, 1, scalar_t>);
        else if (v == 2) launch(transpose_kernel<kReversed, 2, scalar_t>);
        else if constexpr (kChunk >= 4) {
          if (v == 4) launch(transpose_kernel<kReversed, 4, scalar_t>);
          else if constexpr (kChunk >= 8) launch(transpose_kernel<kReversed, 8, scalar_t>);
        }
      };
      if (reversed_runs > 1) launch_packs(std::true_type{});
      else launch_packs(std::false_type{});
    });
  }

  // out's memory (K, H, W, B) = t (B, K, H, W), NCHW or channels_last (else a contiguous copy first): the
  // weight gradient's x' and g' (Note [the weight gradient as a convolution]), one pass from either layout.
  static void batch_last(const at::Tensor& t, const at::Tensor& out, bool tf32 = false) {
    const int64_t B = t.size(0), K = t.size(1), P = t.size(2) * t.size(3);
    if (!t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast)) {
      transpose_strided(t, {P, B, K, K, P * K, B, P * B}, out, 1, tf32);  // P matrices B x K: (b, p, k) -> (k, p, b)
    } else {
      transpose(t.contiguous(), 1, B, K * P, out, 1, tf32);
    }
  }

  // A driver function, found once through the runtime (labops links no libcuda of its own).
  template <typename Function>
  static Function driver_function(const char* name) {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
    C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found));
    TORCH_CHECK(found == cudaDriverEntryPointSuccess && function != nullptr, "labops: the CUDA driver has no ", name);
    return reinterpret_cast<Function>(function);
  }

  // Note [TMA tiles]: rung 5's maps of x (N, C, H, W with memory (N, H, W, C)) and the weight (O, C, kH, kW with
  // memory (O, kH, kW, C)), as gemm.s and the plan's tile read them.
  static TmaMaps tma_maps(const TensorCorePlan& plan, const TensorCoreGemm& gemm, const at::Tensor& x,
                          const at::Tensor& w) {
    const cuuint64_t bytes = x.element_size(), C = gemm.s.channels, pixel = C * bytes, taps = gemm.s.kernel_area();
    TmaMaps maps;
    maps.x = x_im2col_map(gemm.s, x, plan.bm);
    const auto row = kWgRowBytes / static_cast<cuuint32_t>(bytes);
    if (gemm.forward_weight) {  // the forward's weight (C, O, kH, kW) here, memory (C, taps, O): boxes of 64 x 64
      const cuuint64_t O = gemm.out_channels, w_dims[3] = {O, taps, C}, w_strides[2] = {O * bytes, O * bytes * taps};
      const cuuint32_t box[3] = {row, 1, row};
      maps.w = tiled_map(w, w_dims, w_strides, box, "the weight");
      return maps;
    }
    // The weight as (C, taps, O), a box of 128 bytes of channels x one tap x BN filters.
    const cuuint64_t w_dims[3] = {C, taps, static_cast<cuuint64_t>(gemm.out_channels)};
    const cuuint64_t w_strides[2] = {pixel, pixel * taps};
    const cuuint32_t box[3] = {row, 1, static_cast<cuuint32_t>(plan.bn)};
    maps.w = tiled_map(w, w_dims, w_strides, box, "the weight");
    return maps;
  }

  static CUtensorMapDataType tma_type(const at::Tensor& t) {
    return t.scalar_type() == at::kHalf       ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
           : t.scalar_type() == at::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                              : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  }
  static void check_map(CUresult r, const char* what) {
    TORCH_CHECK(r == CUDA_SUCCESS, "labops.conv2d_mm: the driver refused the TMA map of ", what, " (CUresult ",
                static_cast<int>(r), ")");
  }

  // x as im2col boxes of `pixels` consecutive output pixels x 128 bytes of channels: dims and strides fastest
  // first; the bounding box of the filter bases (TmaBox); the traversal steps by the conv stride.
  static CUtensorMap x_im2col_map(const conv2d_mm::Im2colShape& s, const at::Tensor& x, int pixels) {
    static const auto encode_im2col = driver_function<PFN_cuTensorMapEncodeIm2col_v12000>("cuTensorMapEncodeIm2col");
    const cuuint64_t bytes = x.element_size(), C = s.channels, pixel = C * bytes;
    const cuuint64_t x_dims[4] = {C, static_cast<cuuint64_t>(s.width), static_cast<cuuint64_t>(s.height),
                                  static_cast<cuuint64_t>(s.batch)};
    const cuuint64_t x_strides[3] = {pixel, pixel * s.width, pixel * s.width * s.height};
    const TmaBox bounds(s);
    const int lower[2] = {static_cast<int>(bounds.lower_w), static_cast<int>(bounds.lower_h)};
    const int upper[2] = {static_cast<int>(bounds.upper_w), static_cast<int>(bounds.upper_h)};
    const cuuint32_t x_steps[4] = {1, static_cast<cuuint32_t>(s.stride_w), static_cast<cuuint32_t>(s.stride_h), 1};
    CUtensorMap map;
    check_map(encode_im2col(&map, tma_type(x), 4, const_cast<void*>(x.const_data_ptr()), x_dims, x_strides, lower,
                            upper, kWgRowBytes / static_cast<cuuint32_t>(bytes), static_cast<cuuint32_t>(pixels),
                            x_steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              "x");
    return map;
  }

  // A 3-d tiled map of t (dims and byte strides fastest first), boxes of `box`, 128-byte swizzled rows.
  static CUtensorMap tiled_map(const at::Tensor& t, const cuuint64_t (&dims)[3], const cuuint64_t (&strides)[2],
                               const cuuint32_t (&box)[3], const char* what) {
    static const auto encode_tiled = driver_function<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled");
    const cuuint32_t steps[3] = {1, 1, 1};
    CUtensorMap map;
    check_map(encode_tiled(&map, tma_type(t), 3, const_cast<void*>(t.const_data_ptr()), dims, strides, box, steps,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              what);
    return map;
  }

  template <typename scalar_t>
  static void launch_tensor_cores(const TensorCorePlan& plan, const TensorCoreGemm& gemm_in, const at::Tensor& x,
                                  const at::Tensor& w, const at::Tensor& bias, const at::Tensor& out) {
    TensorCoreGemm gemm = gemm_in;
    const dim3 grid(static_cast<unsigned>(plan.blocks), static_cast<unsigned>(gemm.splits));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const scalar_t* bias_data = bias.defined() ? bias.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* out_data = gemm.partial != nullptr ? nullptr : out.mutable_data_ptr<scalar_t>();
    const auto launch = [&](auto kernel, int threads, int bytes) {
      kernel<<<grid, threads, bytes, stream>>>(gemm, x.const_data_ptr<scalar_t>(), w.const_data_ptr<scalar_t>(),
                                               bias_data, out_data);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (plan.wgmma) {  // a warpgroup per 64 pixels, and with TMA a producer warp
      if (plan.tma) {
        gemm.steps_per_tap = FastDivider(static_cast<uint32_t>(gemm.s.channels * x.element_size() / kWgRowBytes));
      }
      const auto launch_wgmma = [&](auto bm, auto bn, auto per_sm) {
        constexpr int kBM = decltype(bm)::value, kBN = decltype(bn)::value, kPerSM = decltype(per_sm)::value;
        constexpr int kBytes = wg_smem_bytes<kBM, kBN, kPerSM>();
        if (plan.tma) {
          // Persistent (Note [warp-specialized TMA pipeline]): as many blocks as run at once, or fewer units.
          const int64_t units = plan.blocks * gemm.splits;
          const int64_t blocks = std::min<int64_t>(units, int64_t(kPerSM) * multiprocessor_count());
          const auto launch_tma = [&](auto kernel) {
            kernel<<<static_cast<unsigned>(blocks), wg_consumers(kBM) + 32, kBytes, stream>>>(
                gemm, bias_data, out_data, tma_maps(plan, gemm, x, w));
            C10_CUDA_KERNEL_LAUNCH_CHECK();
          };
          if constexpr (sizeof(scalar_t) == 2) {  // the transposed B that forward_weight needs: 2-byte types
            if (gemm.forward_weight) {
              launch_tma(with_shared_memory<wgmma_tma_gemm_kernel<scalar_t, kBM, kBN, kPerSM, true>, kBytes>());
              return;
            }
          }
          TORCH_INTERNAL_ASSERT(!gemm.forward_weight, "conv2d_mm: the forward's weight as B needs 2-byte types");
          if constexpr (std::is_same_v<scalar_t, float>) {
            if (gemm.round_a) {
              launch_tma(with_shared_memory<wgmma_tma_gemm_kernel<float, kBM, kBN, kPerSM, false, true>, kBytes>());
              return;
            }
          }
          TORCH_INTERNAL_ASSERT(!gemm.round_a, "conv2d_mm: A rounded in registers is TF32 only");
          launch_tma(with_shared_memory<wgmma_tma_gemm_kernel<scalar_t, kBM, kBN, kPerSM, false>, kBytes>());
        } else if constexpr (kBM == kWgBM) {
          launch(with_shared_memory<wgmma_gemm_kernel<scalar_t, kBN, kPerSM>, kBytes>(), wg_consumers(kBM), kBytes);
        } else {
          TORCH_INTERNAL_ASSERT(false, "conv2d_mm: a tile of ", kBM, " pixels needs TMA loads");
        }
      };
      // (pixels, filters, blocks a multiprocessor): the tiles TensorCorePlan weighs for wgmma.
      const auto tile = [&](auto bm, auto bn, auto per_sm) {
        if (plan.bm == bm && plan.bn == bn) launch_wgmma(bm, bn, per_sm);
      };
      tile(std::integral_constant<int, kWgBM>{}, std::integral_constant<int, 64>{}, std::integral_constant<int, 2>{});
      tile(std::integral_constant<int, kWgBM>{}, std::integral_constant<int, 128>{}, std::integral_constant<int, 1>{});
      tile(std::integral_constant<int, 192>{}, std::integral_constant<int, 128>{}, std::integral_constant<int, 1>{});
      tile(std::integral_constant<int, 64>{}, std::integral_constant<int, 128>{}, std::integral_constant<int, 2>{});
      return;
    }
    constexpr int kWarps4 = 128;
    if (plan.bm == 128 && plan.bn == 128) {
      launch(with_shared_memory<tensor_core_gemm_kernel<scalar_t, 128, 128, 2, 2>, tc_smem_bytes<128, 128>()>(),
             kWarps4, tc_smem_bytes<128, 128>());
    } else if (plan.bm == 128) {
      launch(with_shared_memory<tensor_core_gemm_kernel<scalar_t, 128, 64, 2, 2>, tc_smem_bytes<128, 64>()>(),
             kWarps4, tc_smem_bytes<128, 64>());
    } else {
      launch(with_shared_memory<tensor_core_gemm_kernel<scalar_t, 64, 64, 2, 2>, tc_smem_bytes<64, 64>()>(), kWarps4,
             tc_smem_bytes<64, 64>());
    }
  }

  // `kernel`, allowed the kBytes of shared memory a block of it needs: over 48 KB a block must be allowed it,
  // once per kernel and device.
  template <auto kernel, int kBytes>
  static auto with_shared_memory() {
    static std::atomic<uint64_t> allowed_on{0};
    const uint64_t bit = uint64_t(1) << (current_device() % 64);
    if ((allowed_on.load(std::memory_order_relaxed) & bit) == 0) {
      C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
      allowed_on.fetch_or(bit, std::memory_order_relaxed);
    }
    return kernel;
  }

  template <typename scalar_t>
  static void forward_textbook(const conv2d_mm::Im2colShape& s, const scalar_t* x, const scalar_t* w,
                               const scalar_t* bias, int64_t out_channels, scalar_t* out) {
    const int64_t n = s.batch * out_channels * s.blocks();
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    forward_textbook_kernel<scalar_t><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(s, x, w, bias, out_channels,
                                                                                        out, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <int V, typename scalar_t>
  static void launch_im2col(const conv2d_mm::Im2colShape& s, const scalar_t* x, scalar_t* col) {
    const int64_t items = s.planes() * ceil_div<int64_t>(s.blocks(), V);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    im2col_kernel<V, scalar_t><<<get_blocks(items, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(s, x, col, items);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t>
  static void im2col(const conv2d_mm::Im2colShape& s, const scalar_t* x, scalar_t* col) {
    if (s.column_numel() == 0) return;
    if (im2col_through_shared(s, x, col)) return;
    // 16-byte stores (4 floats), but 8-byte ones for 2-byte types: a thread
    // then gathers 4 pixels per tap instead of 8, which measured 1.5x faster
    // for float16 on an H100 (and 14x14 planes, 196 positions, divide by 4).
    constexpr int V = sizeof(scalar_t) == 2 ? 4 : vec_width<scalar_t>();
    constexpr int kStoreBytes = V * sizeof(scalar_t);
    // Vector stores need every (plane, tap) row segment to start on a
    // multiple of V elements of a suitably aligned buffer.
    const bool vec = s.blocks() % V == 0 && s.col_row_stride % V == 0 && s.col_batch_stride % V == 0 &&
                     is_aligned(col, kStoreBytes);
    if (vec) {
      launch_im2col<V>(s, x, col);
    } else {
      launch_im2col<1>(s, x, col);
    }
  }

  // Note [im2col through shared memory]: where the images of a row sit side by side and a plane's window
  // fits the shared memory. Returns false, writing nothing, where it does not take the shape.
  template <typename scalar_t>
  static bool im2col_through_shared(const conv2d_mm::Im2colShape& s, const scalar_t* x, scalar_t* col) {
    constexpr int64_t kSharedBytes = 16384;
    const int64_t L = s.blocks();
    if (s.col_batch_stride != L || s.col_row_stride < s.batch * L || s.height * s.width == 0) return false;
    const WindowCopy window(s);
    const int64_t window_bytes = int64_t(window.rows) * window.columns * int64_t(sizeof(scalar_t));
    if (window_bytes > kSharedBytes || s.batch * L >= (int64_t(1) << 31)) return false;
    // Images a block: as many windows as kSharedBytes hold, fewer where that would leave fewer than 8 blocks a
    // multiprocessor (the 14 x 14 layer at batch 32 made 256 blocks of 32 images, for 132 multiprocessors).
    const int64_t sms = multiprocessor_count();
    const int64_t groups = std::max<int64_t>(1, ceil_div<int64_t>(8 * sms, s.channels));
    const int64_t group = std::max<int64_t>(1, std::min({kSharedBytes / window_bytes, s.batch,
                                                         ceil_div<int64_t>(s.batch, groups)}));
    const int64_t items = s.channels * ceil_div<int64_t>(s.batch, group);
    const int64_t grid = std::min<int64_t>(items, sms * 16);
    im2col_through_shared_kernel<scalar_t><<<static_cast<unsigned>(grid), kThreadsPerBlock,
                                             static_cast<int>(group * window_bytes),
                                             c10::cuda::getCurrentCUDAStream()>>>(s, window, x, col,
                                                                                  static_cast<int>(group));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return true;
  }

  template <typename scalar_t>
  static void launch_broadcast_bias(const scalar_t* bias, const at::Tensor& out, int64_t nb, int64_t O, int64_t L) {
    const int64_t rows = nb * O;
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    // The widest store (16 bytes down to one element) that every row's start and length allow.
    const auto fits = [&](int v) {
      return L % v == 0 && out.stride(1) % v == 0 && out.stride(0) % v == 0 && is_aligned(dst, v * sizeof(scalar_t));
    };
    const auto launch = [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      const int64_t x = std::min<int64_t>(kThreadsPerBlock, ceil_div<int64_t>(L / V, 32) * 32);
      const dim3 block(static_cast<unsigned>(x), static_cast<unsigned>(kThreadsPerBlock / x));
      const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(rows, block.y), int64_t(multiprocessor_count()) * 32);
      cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
      broadcast_bias_kernel<V, scalar_t><<<static_cast<unsigned>(blocks), block, 0, stream>>>(
          bias, dst, O, L, out.stride(1), out.stride(0), rows);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    constexpr int kVec = vec_width<scalar_t>();
    if (fits(kVec)) launch(std::integral_constant<int, kVec>{});
    else if (kVec >= 4 && fits(kVec / 2)) launch(std::integral_constant<int, std::max(1, kVec / 2)>{});
    else if (kVec >= 8 && fits(kVec / 4)) launch(std::integral_constant<int, std::max(1, kVec / 4)>{});
    else launch(std::integral_constant<int, 1>{});
  }

  // out[b] = w . cols[b] (+ bias), out (nb, O, Lc) with any row stride (a band of the output).
  static void gemm_forward(const at::Tensor& out, const at::Tensor& weight, const at::Tensor& columns,
                           const std::optional<at::Tensor>& bias) {
    const at::Tensor w = gemm_operand(weight), cols = gemm_operand(columns);
    const int64_t nb = cols.size(0), O = w.size(0), K = w.size(1), L = cols.size(2);
    TORCH_INTERNAL_ASSERT(out.stride(2) == 1, "conv2d_mm: the output's columns must be contiguous");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "labops_conv2d_mm_gemm", [&] {
      if (bias.has_value()) launch_broadcast_bias(bias->contiguous().const_data_ptr<scalar_t>(), out, nb, O, L);
      // out^T (L x O) = cols^T (L x K) . w^T (K x O); w is shared by the batch (stride 0).
      gemm_batched<scalar_t>('n', 'n', L, O, K, 1.0, cols.const_data_ptr<scalar_t>(), leading_dim(cols),
                             cols.stride(0), w.const_data_ptr<scalar_t>(), leading_dim(w), 0,
                             bias.has_value() ? 1.0 : 0.0, out.mutable_data_ptr<scalar_t>(), leading_dim(out),
                             out.stride(0), nb);
    });
  }

  // cols[b] = w^T . g[b], cols (nb, K, L) contiguous.
  static void gemm_backward_input(const at::Tensor& cols, const at::Tensor& weight, const at::Tensor& grad) {
    const at::Tensor w = gemm_operand(weight), g = gemm_operand(grad);
    const int64_t nb = g.size(0), O = w.size(0), K = w.size(1), L = g.size(2);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, cols.scalar_type(), "labops_conv2d_mm_gemm", [&] {
      // cols^T (L x K) = g^T (L x O) . w (O x K); w's memory reads as w^T, hence 't'.
      gemm_batched<scalar_t>('n', 't', L, K, O, 1.0, g.const_data_ptr<scalar_t>(), leading_dim(g), g.stride(0),
                             w.const_data_ptr<scalar_t>(), leading_dim(w), 0, 0.0, cols.mutable_data_ptr<scalar_t>(),
                             leading_dim(cols), cols.stride(0), nb);
    });
  }

  // gw = beta * gw + scale * g . cols^T, gw (O, K), g (O, M), cols (K, M); beta 0: gw's old values are not used.
  static void gemm_acc_grad_weight(const at::Tensor& gw, const at::Tensor& grad, const at::Tensor& columns,
                                   double scale, double beta) {
    const at::Tensor g = gemm_operand(grad), cols = gemm_operand(columns);
    const int64_t O = g.size(0), M = g.size(1), K = cols.size(0);
    TORCH_INTERNAL_ASSERT(gw.stride(1) == 1 && leading_dim(gw) >= K, "conv2d_mm: grad_weight must be row-major");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gw.scalar_type(), "labops_conv2d_mm_gemm", [&] {
      // beta = 0 runs as beta = 1 onto zeros (a memset, no kernel of ATen's): the same cuBLAS call as
      // accGradParameters into a zeroed buffer, so autograd's weight gradient has its bits exactly.
      if (beta == 0.0) {
        C10_CUDA_CHECK(cudaMemset2DAsync(gw.mutable_data_ptr<scalar_t>(), leading_dim(gw) * sizeof(scalar_t), 0,
                                         K * sizeof(scalar_t), O, c10::cuda::getCurrentCUDAStream()));
      }
      // gw^T (K x O) += scale * cols (K x M) . g^T (M x O); cols' memory reads as cols^T, hence 't'.
      gemm_batched<scalar_t>('t', 'n', K, O, M, scale, cols.const_data_ptr<scalar_t>(), leading_dim(cols), 0,
                             g.const_data_ptr<scalar_t>(), leading_dim(g), 0, 1.0, gw.mutable_data_ptr<scalar_t>(),
                             leading_dim(gw), 0, 1);
    });
  }

  // The chunks run in order on the stream, so the kernel that lays grad_output out can also sum the
  // bias gradient: one launch where a copy and a sum would be two ATen ops (tools/host_pieces.py).
  static constexpr bool kSumsBiasWhileGathering = true;
  static void gather_rows(const at::Tensor& g, const at::Tensor& rows, const at::Tensor& bias, bool add_to_bias) {
    const int64_t nb = g.size(0), O = g.size(1), L = g.size(2);
    if ((!rows.defined() && !bias.defined()) || O == 0) return;
    TORCH_INTERNAL_ASSERT(g.stride(2) == 1 && (!rows.defined() || rows.is_contiguous()),
                          "conv2d_mm: gather_rows reads and writes rows at unit stride");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "labops_conv2d_mm_gather_rows", [&] {
      cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
      scalar_t* dst = rows.defined() ? rows.mutable_data_ptr<scalar_t>() : nullptr;
      const auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(O), kGatherThreads, 0, stream>>>(
            g.const_data_ptr<scalar_t>(), nb, L, g.stride(0), g.stride(1), dst,
            bias.defined() ? bias.mutable_data_ptr<scalar_t>() : nullptr, add_to_bias);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      // Packs where every run of g and of rows starts on a 16-byte boundary.
      constexpr int kVec = vec_width<scalar_t>();
      const bool packed = L % kVec == 0 && g.stride(0) % kVec == 0 && g.stride(1) % kVec == 0 &&
                          is_aligned(g.const_data_ptr()) && (dst == nullptr || is_aligned(dst));
      if (packed) launch(gather_rows_kernel<kVec, scalar_t>);
      else launch(gather_rows_kernel<1, scalar_t>);
    });
  }

  template <typename scalar_t>
  static void col2im(const conv2d_mm::Im2colShape& s, const scalar_t* col, scalar_t* image) {
    const int64_t n = s.image_numel();
    if (n == 0) return;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    col2im_kernel<scalar_t><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(s, col, image, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::conv2d_mm::register_kernels<labops::conv2d_mm::Entry<labops::cuda::Conv2dMMLauncher>>(m);
}
