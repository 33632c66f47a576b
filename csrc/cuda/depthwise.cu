// CUDA kernels of depthwise_conv2d: the shared entry points (ops/depthwise_ops.h)
// with a CUDA launcher. Two kinds of kernel:
//  * generic: the grid-stride loop (LABOPS_KERNEL_LOOP) over the per-element
//    bodies of ops/depthwise.h (forward_at, backward_input_at,
//    backward_weight_term), any kernel size, stride and dilation;
//  * tiled (3x3 and 5x5, stride 1 or 2, dilation 1): see Note [tiled kernels];
//    their index math is the tile helpers of ops/depthwise.h.
// Backward-input is a gather (no atomics); backward-weight and backward-bias
// are split reductions, see Note [split reductions] in ops/depthwise.h. No
// atomics anywhere: results are bitwise reproducible run to run.
#include <cstdint>
#include <type_traits>

#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../ops/depthwise_ops.h"
#include "device.cuh"
#include "reduce.cuh"
#include "vec.cuh"

namespace labops::cuda {
namespace {

using namespace ops::depthwise;  // the layer's bodies and named index helpers

constexpr int kTileRows = 4;  // outputs per thread, down a column

// ---------------------------------------------------------------- generic ----

template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_generic_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ w,
                           const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                           const Geometry g, int64_t total) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(i, total) { out[i] = static_cast<scalar_t>(forward_at<acc_t>(i, x, w, bias, g)); }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_input_generic_kernel(const scalar_t* __restrict__ grad_out,
                                  const scalar_t* __restrict__ w, scalar_t* __restrict__ grad_in,
                                  const Geometry g, int64_t total) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(i, total) {
    grad_in[i] = static_cast<scalar_t>(backward_input_at<acc_t>(i, grad_out, w, g));
  }
}

// Block (oc, split) reduces its items split_items(...) of channel oc's N*outH*outW
// positions, one tap at a time (the fallback for kernels without a tiled path).
template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_weight_generic_kernel(const scalar_t* __restrict__ grad_out,
                                   const scalar_t* __restrict__ x,
                                   at::opmath_type<scalar_t>* __restrict__ partial, const Geometry g,
                                   int64_t items, int64_t chunk) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t oc = blockIdx.x, split = blockIdx.y, taps = g.taps();
  const conv::Range<int64_t> mine = split_items<int64_t>(split, chunk, items);
  for (int64_t t = 0; t < taps; ++t) {
    const Split<int64_t> khw = split_index(t, g.k_w);
    acc_t acc[1] = {acc_t(0)};
    for (int64_t it = mine.lo + threadIdx.x; it < mine.hi; it += blockDim.x) {
      const Position p = output_position(it, g);
      backward_weight_term(acc[0], grad_out, x, p.n, oc, p.oh, p.ow, khw.outer, khw.inner, g);
    }
    block_sum_store<1>(acc, partial + partial_offset(oc, split, gridDim.y, taps) + t);
  }
}

// out[c, t] = sum over splits s of partial[c, s, t], in order.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    sum_partials_kernel(const at::opmath_type<scalar_t>* __restrict__ partial,
                        scalar_t* __restrict__ out, int64_t count, int64_t splits, int64_t taps) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(i, count) {
    const Split<int64_t> ct = split_index(i, taps);  // (channel, tap)
    acc_t s = acc_t(0);
    for (int64_t k = 0; k < splits; ++k) s += partial[partial_offset(ct.outer, k, splits, taps) + ct.inner];
    out[i] = static_cast<scalar_t>(s);
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_bias_kernel(const scalar_t* __restrict__ grad_out,
                         at::opmath_type<scalar_t>* __restrict__ partial, int64_t channels,
                         int64_t plane, int64_t items, int64_t chunk) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t c = blockIdx.x, split = blockIdx.y;
  const conv::Range<int64_t> mine = split_items<int64_t>(split, chunk, items);
  acc_t acc[1] = {acc_t(0)};
  for (int64_t it = mine.lo + threadIdx.x; it < mine.hi; it += blockDim.x) {
    acc[0] += static_cast<acc_t>(grad_out[channel_item_offset(it, c, channels, plane)]);
  }
  block_sum_store<1>(acc, partial + partial_offset(c, split, gridDim.y, 1));
}

// ------------------------------------------------------------------ tiled ----
// Note [tiled kernels]
// Templated on the kernel size and stride. A thread computes kTileRows
// outputs down one column, so each input row it loads serves up to kH of its
// outputs from registers (Note [row reuse in a tile], ops/depthwise.h); the
// weights sit in registers; neighbouring threads take neighbouring columns
// (coalesced loads; the kW-wide overlap between them hits L1); and the index
// arithmetic (divisions) is paid once per tile, in 32-bit.

// The input column of each tap kw for output column ow.
template <int KW, int SW>
__device__ __forceinline__ void tap_columns(int ow, int pad_w, int (&col)[KW]) {
#pragma unroll
  for (int kw = 0; kw < KW; ++kw) col[kw] = conv::input_coord<int>(ow, kw, SW, pad_w, 1);
}

// Row reuse for a tile of V outputs down one column, starting at output row oh0
// (Note [row reuse in a tile]): each of the tile's input rows has its KW taps
// loaded once (zeros in the padding), then f(v, kh, xr) runs for every
// (v, kh) pair that uses it. All loops unroll, so v
// and kh are constants and the caller's register arrays stay in registers.
template <int KH, int KW, int SH, int V, typename scalar_t, typename F>
__device__ __forceinline__ void for_each_tap_row(const scalar_t* plane, int oh0, const int (&col)[KW],
                                                 int pad_h, int in_h, int in_w, F&& f) {
  using acc_t = at::opmath_type<scalar_t>;
  const int ih0 = conv::input_coord<int>(oh0, 0, SH, pad_h, 1);
#pragma unroll
  for (int r = 0; r < tile_rows(V, SH, KH); ++r) {
    const int ih = ih0 + r;
    if (!conv::in_bounds(ih, in_h)) continue;  // zero padding rows
    acc_t xr[KW];
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
      xr[kw] = conv::in_bounds(col[kw], in_w) ? static_cast<acc_t>(plane[pixel(ih, col[kw], in_w)]) : acc_t(0);
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int kh = tile_tap(r, v, SH);
      if (kh >= 0 && kh < KH) f(v, kh, xr);
    }
  }
}

// updateOutput: V outputs down a column, weights in registers.
template <typename scalar_t, int KH, int KW, int SH, int SW, int V>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_tiled_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ w,
                         const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                         const Geometry g, int tiles_h, int64_t total) {
  using acc_t = at::opmath_type<scalar_t>;
  const int out_channels = g.out_channels, multiplier = g.multiplier;
  LABOPS_KERNEL_LOOP(i, total) {
    const TileIndex t = tile_index(static_cast<int>(i), g.out_w, tiles_h);
    const Split<int> nc = split_index(t.plane, out_channels);
    const int oc = nc.inner, n = nc.outer;
    const scalar_t* wk = weights_of(w, oc, KH * KW);
    acc_t wr[KH * KW];
#pragma unroll
    for (int k = 0; k < KH * KW; ++k) wr[k] = static_cast<acc_t>(wk[k]);
    acc_t acc[V];
    const acc_t b = bias ? static_cast<acc_t>(bias[oc]) : acc_t(0);
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = b;
    int col[KW];
    tap_columns<KW, SW>(t.col, g.pad_w, col);
    const int oh0 = tile_first(t.tile, V);
    for_each_tap_row<KH, KW, SH, V>(x + input_plane_offset(n, input_channel(oc, multiplier), g), oh0, col,
                                    g.pad_h, g.in_h, g.in_w, [&](int v, int kh, const acc_t (&xr)[KW]) {
#pragma unroll
      for (int kw = 0; kw < KW; ++kw) mac(acc[v], wr[tap_index(kh, kw, KW)], xr[kw]);
    });
    scalar_t* dst = out + output_plane_offset(n, oc, g);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int oh = oh0 + v;
      if (oh < g.out_h) dst[pixel<int64_t>(oh, t.col, g.out_w)] = static_cast<scalar_t>(acc[v]);
    }
  }
}

// updateGradInput, a gather: input (ih0 + v, iw) collects output
// (output_coord(ih0 + v, kh), output_coord(iw, kw)) of each of its m channels.
template <typename scalar_t, int KH, int KW, int SH, int SW, int V>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_input_tiled_kernel(const scalar_t* __restrict__ grad_out,
                                const scalar_t* __restrict__ w, scalar_t* __restrict__ grad_in,
                                const Geometry g, int tiles_h, int64_t total) {
  using acc_t = at::opmath_type<scalar_t>;
  const int in_h = g.in_h, in_w = g.in_w, out_h = g.out_h, out_w = g.out_w;
  const int in_channels = g.in_channels, multiplier = g.multiplier;
  const int pad_h = g.pad_h, pad_w = g.pad_w;
  LABOPS_KERNEL_LOOP(i, total) {
    const TileIndex t = tile_index(static_cast<int>(i), in_w, tiles_h);
    const int iw = t.col;
    const Split<int> nc = split_index(t.plane, in_channels);
    const int c = nc.inner, n = nc.outer;
    const int ih0 = tile_first(t.tile, V);
    int orow[V][KH], ocol[KW];  // -1: that tap reaches no output
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int kh = 0; kh < KH; ++kh) orow[v][kh] = conv::output_coord<int>(ih0 + v, kh, SH, pad_h, 1, out_h);
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) ocol[kw] = conv::output_coord<int>(iw, kw, SW, pad_w, 1, out_w);
    acc_t acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = acc_t(0);
    for (int j = 0; j < multiplier; ++j) {
      const int oc = output_channel(c, j, multiplier);
      const scalar_t* src = grad_out + output_plane_offset(n, oc, g);
      const scalar_t* wk = weights_of(w, oc, KH * KW);
      acc_t wr[KH * KW];
#pragma unroll
      for (int t = 0; t < KH * KW; ++t) wr[t] = static_cast<acc_t>(wk[t]);
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int kh = 0; kh < KH; ++kh) {
          if (orow[v][kh] < 0) continue;
          const scalar_t* row = src + pixel(orow[v][kh], 0, out_w);
#pragma unroll
          for (int kw = 0; kw < KW; ++kw) {
            if (ocol[kw] >= 0) mac(acc[v], wr[tap_index(kh, kw, KW)], row[ocol[kw]]);
          }
        }
    }
    scalar_t* dst = grad_in + input_plane_offset(n, c, g);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (ih0 + v < in_h) dst[pixel(ih0 + v, iw, in_w)] = static_cast<scalar_t>(acc[v]);
    }
  }
}

// accGradParameters (weight). Block (oc, split) walks items (n, tile, ow) of
// channel oc; each thread keeps all KH*KW sums in registers, then the block
// reduces them. Same row reuse as the forward (for_each_tap_row).
template <typename scalar_t, int KH, int KW, int SH, int SW, int V>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_weight_tiled_kernel(const scalar_t* __restrict__ grad_out,
                                 const scalar_t* __restrict__ x,
                                 at::opmath_type<scalar_t>* __restrict__ partial, const Geometry g,
                                 int tiles_h, int items, int chunk) {
  using acc_t = at::opmath_type<scalar_t>;
  const int out_h = g.out_h, out_w = g.out_w;
  const int oc = blockIdx.x, split = blockIdx.y;
  const int ic = input_channel(oc, static_cast<int>(g.multiplier));
  const conv::Range<int> mine = split_items<int>(split, chunk, items);
  acc_t acc[KH * KW];
#pragma unroll
  for (int t = 0; t < KH * KW; ++t) acc[t] = acc_t(0);
  for (int it = mine.lo + threadIdx.x; it < mine.hi; it += blockDim.x) {
    const TileIndex t = tile_index(it, out_w, tiles_h);  // plane = n here: one channel per block
    const scalar_t* gsrc = grad_out + output_plane_offset(t.plane, oc, g);
    const int oh0 = tile_first(t.tile, V);
    acc_t gv[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      gv[v] = oh0 + v < out_h ? static_cast<acc_t>(gsrc[pixel(oh0 + v, t.col, out_w)]) : acc_t(0);
    }
    int col[KW];
    tap_columns<KW, SW>(t.col, g.pad_w, col);
    for_each_tap_row<KH, KW, SH, V>(x + input_plane_offset(t.plane, ic, g), oh0, col, g.pad_h, g.in_h,
                                    g.in_w, [&](int v, int kh, const acc_t (&xr)[KW]) {
#pragma unroll
      for (int kw = 0; kw < KW; ++kw) mac(acc[tap_index(kh, kw, KW)], gv[v], xr[kw]);
    });
  }
  block_sum_store<KH * KW>(acc, partial + partial_offset(oc, split, gridDim.y, KH * KW));
}

// ------------------------------------------------------------- launching ----

template <int N>
using IntC = std::integral_constant<int, N>;

// Calls f(KH, KW, SH, SW) as compile-time constants when a tiled kernel exists
// for this geometry; returns false (and calls nothing) otherwise.
template <typename F>
bool dispatch_tiled(const Geometry& g, F&& f) {
  const int64_t biggest = std::max(g.batch * g.in_channels * g.in_plane(),
                                   g.batch * g.out_channels * g.out_plane());
  if (g.dil_h != 1 || g.dil_w != 1 || !fits_int32(biggest)) return false;
  const auto is = [&](int kh, int kw, int sh, int sw) {
    return g.k_h == kh && g.k_w == kw && g.stride_h == sh && g.stride_w == sw;
  };
  if (is(3, 3, 1, 1)) return f(IntC<3>{}, IntC<3>{}, IntC<1>{}, IntC<1>{}), true;
  if (is(3, 3, 2, 2)) return f(IntC<3>{}, IntC<3>{}, IntC<2>{}, IntC<2>{}), true;
  if (is(5, 5, 1, 1)) return f(IntC<5>{}, IntC<5>{}, IntC<1>{}, IntC<1>{}), true;
  if (is(5, 5, 2, 2)) return f(IntC<5>{}, IntC<5>{}, IntC<2>{}, IntC<2>{}), true;
  return false;
}

// Enough blocks to cover `work` threads, at most a few resident waves (the
// grid-stride loops cover the rest).
int64_t blocks_for(int64_t work) {
  return std::max<int64_t>(1, std::min<int64_t>(ceil_div<int64_t>(work, kThreadsPerBlock),
                                                int64_t(multiprocessor_count()) * 32));
}

// How many blocks share one channel's reduction: aim for ~4 blocks per SM in
// all, but give each block at least 4 items per thread.
int64_t splits_for(int64_t channels, int64_t items) {
  const int64_t want = ceil_div<int64_t>(int64_t(multiprocessor_count()) * 4, channels);
  const int64_t most = std::max<int64_t>(1, items / (int64_t(kThreadsPerBlock) * 4));
  return std::max<int64_t>(1, std::min<int64_t>({want, most, 65535}));
}

template <typename acc_t>
at::Tensor workspace(int64_t n) {
  return at::empty({n}, at::TensorOptions()
                            .dtype(c10::CppTypeToScalarType<acc_t>::value)
                            .device(at::kCUDA, c10::cuda::current_device()));
}

struct DepthwiseLauncher {
  template <typename scalar_t>
  static void forward(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* out,
                      const Geometry& g) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const bool tiled = dispatch_tiled(g, [&](auto kh, auto kw, auto sh, auto sw) {
      const int64_t tiles = ceil_div<int64_t>(g.out_h, kTileRows);
      const int64_t total = g.batch * g.out_channels * tiles * g.out_w;
      forward_tiled_kernel<scalar_t, kh.value, kw.value, sh.value, sw.value, kTileRows>
          <<<blocks_for(total), kThreadsPerBlock, 0, stream>>>(x, w, bias, out, g, int(tiles), total);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    if (!tiled) {
      const int64_t total = g.batch * g.out_channels * g.out_plane();
      forward_generic_kernel<scalar_t>
          <<<get_blocks(total, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(x, w, bias, out, g, total);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }

  template <typename scalar_t>
  static void backward_input(const scalar_t* grad_out, const scalar_t* w, scalar_t* grad_in,
                             const Geometry& g) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const bool tiled = dispatch_tiled(g, [&](auto kh, auto kw, auto sh, auto sw) {
      const int64_t tiles = ceil_div<int64_t>(g.in_h, kTileRows);
      const int64_t total = g.batch * g.in_channels * tiles * g.in_w;
      backward_input_tiled_kernel<scalar_t, kh.value, kw.value, sh.value, sw.value, kTileRows>
          <<<blocks_for(total), kThreadsPerBlock, 0, stream>>>(grad_out, w, grad_in, g, int(tiles), total);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    if (!tiled) {
      const int64_t total = g.batch * g.in_channels * g.in_plane();
      backward_input_generic_kernel<scalar_t>
          <<<get_blocks(total, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(grad_out, w, grad_in, g, total);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }

  template <typename scalar_t>
  static void backward_weight(const scalar_t* grad_out, const scalar_t* x, scalar_t* grad_w,
                              const Geometry& g) {
    using acc_t = at::opmath_type<scalar_t>;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    at::Tensor partial;
    int64_t splits = 1;
    const bool tiled = dispatch_tiled(g, [&](auto kh, auto kw, auto sh, auto sw) {
      const int64_t tiles = ceil_div<int64_t>(g.out_h, kTileRows);
      const int64_t items = g.batch * tiles * g.out_w;
      splits = splits_for(g.out_channels, items);
      const int64_t chunk = ceil_div<int64_t>(items, splits);
      partial = workspace<acc_t>(g.out_channels * splits * g.taps());
      backward_weight_tiled_kernel<scalar_t, kh.value, kw.value, sh.value, sw.value, kTileRows>
          <<<dim3(g.out_channels, splits), kThreadsPerBlock, 0, stream>>>(
              grad_out, x, partial.mutable_data_ptr<acc_t>(), g, int(tiles), int(items), int(chunk));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    if (!tiled) {
      const int64_t items = g.batch * g.out_plane();
      splits = splits_for(g.out_channels, items);
      partial = workspace<acc_t>(g.out_channels * splits * g.taps());
      backward_weight_generic_kernel<scalar_t><<<dim3(g.out_channels, splits), kThreadsPerBlock, 0, stream>>>(
          grad_out, x, partial.mutable_data_ptr<acc_t>(), g, items, ceil_div<int64_t>(items, splits));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    const int64_t count = g.out_channels * g.taps();
    sum_partials_kernel<scalar_t><<<get_blocks(count, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(
        partial.const_data_ptr<acc_t>(), grad_w, count, splits, g.taps());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t>
  static void backward_bias(const scalar_t* grad_out, scalar_t* grad_b, int64_t batch,
                            int64_t channels, int64_t plane) {
    using acc_t = at::opmath_type<scalar_t>;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t items = batch * plane;
    const int64_t splits = splits_for(channels, items);
    at::Tensor partial = workspace<acc_t>(channels * splits);
    backward_bias_kernel<scalar_t><<<dim3(channels, splits), kThreadsPerBlock, 0, stream>>>(
        grad_out, partial.mutable_data_ptr<acc_t>(), channels, plane, items, ceil_div<int64_t>(items, splits));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    sum_partials_kernel<scalar_t><<<get_blocks(channels, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(
        partial.const_data_ptr<acc_t>(), grad_b, channels, splits, 1);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace
}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::ops::depthwise::DepthwiseOps<labops::cuda::DepthwiseLauncher>::register_kernels(m);
}
