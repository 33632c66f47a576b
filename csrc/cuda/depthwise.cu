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

constexpr int kTileRows = 4;  // output rows per tiled thread (Note [tiled kernels])
// Output columns per tiled thread. One-column tiles were bound by their loads
// and conversions, not by the memory (a float16 plane took as long as a
// float32 one); two columns read a 3-tap row with four loads instead of six,
// and on an H100 cut the forward's time by a fifth to a third in float32 and
// float16 (four columns for 2-byte types were slower than two).
constexpr int kTileCols = 2;

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
// Templated on the kernel size and stride. A thread computes a tile of
// kTileRows x kTileCols outputs, so each input it loads serves
// every output of the tile that reads it, from registers (Note [row reuse in
// a tile], ops/depthwise.h); the weights sit in registers; neighbouring
// threads take neighbouring tiles of a row (coalesced loads; the overlap
// between their spans hits L1); and the index arithmetic (divisions) is paid
// once per tile, in 32-bit.

// Row reuse for a tile of V x U outputs whose top-left output is (oh0, ow0)
// (Note [row reuse in a tile]): each of the tile's input rows is loaded once
// as a span of tile_span(U, SW, KW) inputs (zeros in the padding), then
// f(v, kh, span) runs for every output row v that reads it through tap kh.
// All loops unroll, so v and kh are constants and the caller's register
// arrays stay in registers.
template <int KH, int KW, int SH, int SW, int V, int U, typename scalar_t, typename F>
__device__ __forceinline__ void for_each_tap_row(const scalar_t* plane, int oh0, int ow0, int pad_h,
                                                 int pad_w, int in_h, int in_w, F&& f) {
  using acc_t = at::opmath_type<scalar_t>;
  const int ih0 = conv::input_coord<int>(oh0, 0, SH, pad_h, 1);
  const int iw0 = conv::input_coord<int>(ow0, 0, SW, pad_w, 1);
#pragma unroll
  for (int r = 0; r < tile_span(V, SH, KH); ++r) {
    const int ih = ih0 + r;
    if (!conv::in_bounds(ih, in_h)) continue;  // zero padding rows
    acc_t span[tile_span(U, SW, KW)];
#pragma unroll
    for (int e = 0; e < tile_span(U, SW, KW); ++e) {
      const int iw = iw0 + e;
      span[e] = conv::in_bounds(iw, in_w) ? static_cast<acc_t>(plane[pixel(ih, iw, in_w)]) : acc_t(0);
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int kh = tile_tap(r, v, SH);
      if (kh >= 0 && kh < KH) f(v, kh, span);
    }
  }
}

// updateOutput: a V x U tile of outputs, weights in registers. kFlipped reads
// the kernel flipped: updateGradInput at stride 1 (flipped_forward_geometry).
template <typename scalar_t, int KH, int KW, int SH, int SW, int V, int U, bool kFlipped>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_tiled_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ w,
                         const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                         const Geometry g, int row_tiles, int col_tiles, int64_t total) {
  using acc_t = at::opmath_type<scalar_t>;
  const int out_channels = g.out_channels, multiplier = g.multiplier;
  const int out_h = g.out_h, out_w = g.out_w;
  LABOPS_KERNEL_LOOP(i, total) {
    const TileIndex t = tile_index(static_cast<int>(i), col_tiles, row_tiles);
    const Split<int> nc = split_index(t.plane, out_channels);
    const int oc = nc.inner, n = nc.outer;
    const scalar_t* wk = weights_of(w, oc, KH * KW);
    acc_t wr[KH * KW];
#pragma unroll
    for (int k = 0; k < KH * KW; ++k) wr[k] = static_cast<acc_t>(wk[kFlipped ? flipped_tap(k, KH * KW) : k]);
    acc_t acc[V][U];
    const acc_t b = bias ? static_cast<acc_t>(bias[oc]) : acc_t(0);
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int u = 0; u < U; ++u) acc[v][u] = b;
    const int oh0 = tile_first(t.row_tile, V), ow0 = tile_first(t.col_tile, U);
    for_each_tap_row<KH, KW, SH, SW, V, U>(
        x + input_plane_offset(n, input_channel(oc, multiplier), g), oh0, ow0, g.pad_h, g.pad_w, g.in_h,
        g.in_w, [&](int v, int kh, const acc_t (&span)[tile_span(U, SW, KW)]) {
#pragma unroll
          for (int u = 0; u < U; ++u)
#pragma unroll
            for (int kw = 0; kw < KW; ++kw) mac(acc[v][u], wr[tap_index(kh, kw, KW)], span[span_element(u, kw, SW)]);
        });
    scalar_t* dst = out + output_plane_offset(n, oc, g);
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int oh = oh0 + v, ow = ow0 + u;
        if (oh < out_h && ow < out_w) dst[pixel<int64_t>(oh, ow, out_w)] = static_cast<scalar_t>(acc[v][u]);
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
    const TileIndex t = tile_index(static_cast<int>(i), in_w, tiles_h);  // tiles one column wide
    const int iw = t.col_tile;
    const Split<int> nc = split_index(t.plane, in_channels);
    const int c = nc.inner, n = nc.outer;
    const int ih0 = tile_first(t.row_tile, V);
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

// accGradParameters (weight). Block (oc, split) walks items (n, row tile, col
// tile) of channel oc; each thread keeps all KH*KW sums in registers, then the
// block reduces them. Same tiles and row reuse as the forward (for_each_tap_row).
template <typename scalar_t, int KH, int KW, int SH, int SW, int V, int U>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_weight_tiled_kernel(const scalar_t* __restrict__ grad_out,
                                 const scalar_t* __restrict__ x,
                                 at::opmath_type<scalar_t>* __restrict__ partial, const Geometry g,
                                 int row_tiles, int col_tiles, int items, int chunk) {
  using acc_t = at::opmath_type<scalar_t>;
  const int out_h = g.out_h, out_w = g.out_w;
  const int oc = blockIdx.x, split = blockIdx.y;
  const int ic = input_channel(oc, static_cast<int>(g.multiplier));
  const conv::Range<int> mine = split_items<int>(split, chunk, items);
  acc_t acc[KH * KW];
#pragma unroll
  for (int t = 0; t < KH * KW; ++t) acc[t] = acc_t(0);
  for (int it = mine.lo + threadIdx.x; it < mine.hi; it += blockDim.x) {
    const TileIndex t = tile_index(it, col_tiles, row_tiles);  // plane = n here: one channel per block
    const scalar_t* gsrc = grad_out + output_plane_offset(t.plane, oc, g);
    const int oh0 = tile_first(t.row_tile, V), ow0 = tile_first(t.col_tile, U);
    acc_t gv[V][U];  // grad_output of the tile; zero outside the plane
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int oh = oh0 + v, ow = ow0 + u;
        gv[v][u] = oh < out_h && ow < out_w ? static_cast<acc_t>(gsrc[pixel(oh, ow, out_w)]) : acc_t(0);
      }
    for_each_tap_row<KH, KW, SH, SW, V, U>(
        x + input_plane_offset(t.plane, ic, g), oh0, ow0, g.pad_h, g.pad_w, g.in_h, g.in_w,
        [&](int v, int kh, const acc_t (&span)[tile_span(U, SW, KW)]) {
#pragma unroll
          for (int u = 0; u < U; ++u)
#pragma unroll
            for (int kw = 0; kw < KW; ++kw) mac(acc[tap_index(kh, kw, KW)], gv[v][u], span[span_element(u, kw, SW)]);
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

// How the tiled kernels cover g's output planes: row_tiles x col_tiles tiles each.
struct OutputTiles {
  int64_t rows, cols;
};
OutputTiles output_tiles(const Geometry& g) {
  return {ceil_div<int64_t>(g.out_h, kTileRows), ceil_div<int64_t>(g.out_w, kTileCols)};
}

// The tiled forward for g, if one exists for its kernel size and stride.
template <bool kFlipped, typename scalar_t>
bool launch_forward_tiled(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* out,
                          const Geometry& g, cudaStream_t stream) {
  return dispatch_tiled(g, [&](auto kh, auto kw, auto sh, auto sw) {
    const OutputTiles tiles = output_tiles(g);
    const int64_t total = g.batch * g.out_channels * tiles.rows * tiles.cols;
    forward_tiled_kernel<scalar_t, kh.value, kw.value, sh.value, sw.value, kTileRows, kTileCols, kFlipped>
        <<<blocks_for(total), kThreadsPerBlock, 0, stream>>>(x, w, bias, out, g, int(tiles.rows), int(tiles.cols),
                                                             total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

struct DepthwiseLauncher {
  template <typename scalar_t>
  static void forward(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* out,
                      const Geometry& g) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const bool tiled = launch_forward_tiled<false>(x, w, bias, out, g, stream);
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
    // Stride 1, multiplier 1: the forward's tiles over grad_output, kernel
    // flipped, reuse each loaded value for a whole tile; the gather below
    // loads KH*KW values per input pixel.
    if (gather_is_flipped_forward(g) &&
        launch_forward_tiled<true>(grad_out, w, static_cast<const scalar_t*>(nullptr), grad_in,
                                   flipped_forward_geometry(g), stream)) {
      return;
    }
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
      const OutputTiles tiles = output_tiles(g);
      const int64_t items = g.batch * tiles.rows * tiles.cols;
      splits = splits_for(g.out_channels, items);
      const int64_t chunk = ceil_div<int64_t>(items, splits);
      partial = workspace<acc_t>(g.out_channels * splits * g.taps());
      backward_weight_tiled_kernel<scalar_t, kh.value, kw.value, sh.value, sw.value, kTileRows, kTileCols>
          <<<dim3(g.out_channels, splits), kThreadsPerBlock, 0, stream>>>(
              grad_out, x, partial.mutable_data_ptr<acc_t>(), g, int(tiles.rows), int(tiles.cols), int(items),
              int(chunk));
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
