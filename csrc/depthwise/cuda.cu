// CUDA kernels of depthwise_conv2d: the shared entry points (depthwise/entry.h)
// with a CUDA launcher. Two kinds of kernel, which are also the forward's
// rungs (forward_ladder in entry.h): 1 textbook = generic, 2 tiled, 3 tiled
// with vector row loads.
//  * generic: the grid-stride loop (LABOPS_KERNEL_LOOP) over the per-element
//    bodies of depthwise/depthwise.h (forward_at, backward_input_at,
//    backward_weight_term), any kernel size, stride and dilation;
//  * tiled (3x3 and 5x5, stride 1 or 2, dilation 1): see Note [tiled kernels];
//    their index math is the tile helpers of depthwise/depthwise.h. Each is written
//    once for NCHW and channels_last (NHWC) tensors: Note [one tiled kernel,
//    two layouts].
// Backward-input is a gather (no atomics); backward-weight and backward-bias
// are split reductions, see Note [split reductions] in depthwise/depthwise.h. No
// atomics anywhere: results are bitwise reproducible run to run.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "entry.h"
#include "../common/empty.h"
#include "../common/cuda/device.cuh"
#include "../common/cuda/reduce.cuh"
#include "../common/cuda/vec.cuh"

namespace labops::cuda {
namespace {

using namespace labops::depthwise;  // the layer's bodies and named index helpers

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

// ------------------------------------------------------------------ tiled ----
// Note [tiled kernels]
// Templated on the kernel size and stride. A thread computes a tile of
// kTileRows x kTileCols outputs, so each input it loads serves
// every output of the tile that reads it, from registers (Note [row reuse in
// a tile], depthwise/depthwise.h); the weights sit in registers; neighbouring
// threads take neighbouring tiles of a row (coalesced loads; the overlap
// between their spans hits L1); and the index arithmetic (divisions) is paid
// once per tile, in 32-bit.
//
// Note [one tiled kernel, two layouts]
// Each tiled kernel is written once for both memory layouts (Note
// [channels_last], depthwise/depthwise.h). A layout struct says which tile and
// channels thread `flat` takes, where a plane starts and how it is strided,
// and the tile's size; every value is a Pack of kPack adjacent channels: one
// for NCHW, 2 or 4 for NHWC (one 8- or 16-byte load of float, a 4- or 8-byte
// one of half; ForwardNhwc and the others below say which kernel takes
// which). The reductions (weight and bias gradients) give a block kLanes
// packs of channels: one channel for NCHW (its planes are contiguous), 8
// packs for NHWC (adjacent in memory).

// A tiled thread's work: tile (row_tile, col_tile) of image n, channels c .. c + kPack - 1.
struct TileWork {
  int n, c, row_tile, col_tile;
};

// NCHW: one channel per thread, flat = ((n*channels + c)*row_tiles + row_tile)*col_tiles + col_tile.
// Rows are read VW columns per load (Note [vector row loads], depthwise/depthwise.h),
// in tiles at least VW columns wide.
template <int VW = 1, int TR = kTileRows, int TC = (VW > kTileCols ? VW : kTileCols)>
struct ChannelsFirst {
  static constexpr int kPack = 1, kLanes = 1, kRowVector = VW;
  static constexpr int kTileRows = TR, kTileCols = TC;
  static_assert(kTileCols % VW == 0, "a tile's columns are whole vectors");
  __device__ static TileWork work(int flat, int channels, int row_tiles, int col_tiles) {
    const TileIndex t = tile_index(flat, col_tiles, row_tiles);
    const Split<int> nc = split_index(t.plane, channels);
    return {nc.outer, nc.inner, t.row_tile, t.col_tile};
  }
  __device__ static int64_t base(int n, int c, int channels, int h, int w) {
    return plane_offset(n, c, channels, int64_t(h) * w);
  }
  __device__ static PlaneStrides strides(int /*channels*/, int w) { return nchw_plane_strides(w); }
};

// NHWC: P adjacent channels per thread, the pack fastest (packed_tile_index).
template <int P, int TR = kTileRows, int TC = kTileCols>
struct ChannelsLast {
  static constexpr int kPack = P, kLanes = 8, kRowVector = 1;
  static constexpr int kTileRows = TR, kTileCols = TC;
  __device__ static TileWork work(int flat, int channels, int row_tiles, int col_tiles) {
    const PackedTileIndex t = packed_tile_index(flat, channels / P, col_tiles, row_tiles);
    return {t.tile.plane, t.pack * P, t.tile.row_tile, t.tile.col_tile};
  }
  __device__ static int64_t base(int n, int c, int channels, int h, int w) {
    return nhwc_offset(n, c, channels, int64_t(h) * w);
  }
  __device__ static PlaneStrides strides(int channels, int w) { return nhwc_plane_strides(w, channels); }
};

// Channels per pack of the NHWC kernels: 4 (16 bytes of float, 8 of half), 2 doubles.
constexpr int nhwc_pack(size_t element_size) { return std::min<int>(4, kPackBytes / int(element_size)); }

// p[0 .. P-1] in the accumulation type (p aligned to the pack).
template <int P, typename acc_t, typename scalar_t>
__device__ __forceinline__ Pack<acc_t, P> load_acc(const scalar_t* p) {
  const Pack<scalar_t, P> raw = load_pack<P>(p);
  Pack<acc_t, P> out;
#pragma unroll
  for (int e = 0; e < P; ++e) out.val[e] = static_cast<acc_t>(raw.val[e]);
  return out;
}

template <int P, typename scalar_t, typename acc_t>
__device__ __forceinline__ void store_acc(scalar_t* p, const Pack<acc_t, P>& v) {
  Pack<scalar_t, P> raw;
#pragma unroll
  for (int e = 0; e < P; ++e) raw.val[e] = static_cast<scalar_t>(v.val[e]);
  store_pack<P>(p, raw);
}

// The layer's multiply-accumulate (mac, depthwise/depthwise.h), channel by channel.
template <typename acc_t, int P>
__device__ __forceinline__ void mac_pack(Pack<acc_t, P>& acc, const Pack<acc_t, P>& a, const Pack<acc_t, P>& b) {
#pragma unroll
  for (int e = 0; e < P; ++e) mac(acc.val[e], a.val[e], b.val[e]);
}

// span[e] = the input at (ih, iw0 + e) of `plane` (zeros in the padding), e < S:
// column by column, or as whole vectors of Layout::kRowVector columns when the
// layout reads rows that way (Note [vector row loads]); kPhase = row_phase(pad_w, VW).
// Offsets stay 32-bit plane_at()s added to the plane's pointer, as elsewhere.
template <typename Layout, int kPhase, int S, int P, typename acc_t, typename scalar_t>
__device__ __forceinline__ void load_span(const scalar_t* plane, const PlaneStrides& s, int ih, int iw0, int width,
                                          Pack<acc_t, P> (&span)[S]) {
  constexpr int VW = Layout::kRowVector;
  if constexpr (VW == 1) {
#pragma unroll
    for (int e = 0; e < S; ++e) {
      const int iw = iw0 + e;
      span[e] = conv::in_bounds(iw, width) ? load_acc<P, acc_t>(plane + plane_at(s, ih, iw)) : Pack<acc_t, P>{};
    }
  } else {
    static_assert(P == 1, "vector rows are NCHW: one channel per thread");
    const int first = iw0 - kPhase;  // a multiple of VW
#pragma unroll
    for (int k = 0; k < span_vectors(S, VW, kPhase); ++k) {
      const int col = first + k * VW;
      const Pack<acc_t, VW> v =
          conv::in_bounds(col, width) ? load_acc<VW, acc_t>(plane + plane_at(s, ih, col)) : Pack<acc_t, VW>{};
#pragma unroll
      for (int j = 0; j < VW; ++j) {
        const int e = k * VW + j - kPhase;
        if (e >= 0 && e < S) span[e].val[0] = v.val[j];
      }
    }
  }
}

// The U values of row `h` from column c0 on (U and c0 multiples of
// kRowVector): vals[u] = plane[h, c0 + u] (zeros outside the height x width
// plane), or plane[h, c0 + u] = vals[u] inside it. A vector lies wholly inside
// or wholly past the row.
template <typename Layout, int U, int P, typename acc_t, typename scalar_t>
__device__ __forceinline__ void load_row(const scalar_t* plane, const PlaneStrides& s, int h, int c0, int height,
                                         int width, Pack<acc_t, P> (&vals)[U]) {
  constexpr int VW = Layout::kRowVector;
#pragma unroll
  for (int k = 0; k < U / VW; ++k) {
    const int col = c0 + k * VW;
    if constexpr (VW == 1) {
      vals[k] = h < height && col < width ? load_acc<P, acc_t>(plane + plane_at(s, h, col)) : Pack<acc_t, P>{};
    } else {
      const Pack<acc_t, VW> v =
          h < height && col < width ? load_acc<VW, acc_t>(plane + plane_at(s, h, col)) : Pack<acc_t, VW>{};
#pragma unroll
      for (int j = 0; j < VW; ++j) vals[k * VW + j].val[0] = v.val[j];
    }
  }
}
template <typename Layout, int U, int P, typename acc_t, typename scalar_t>
__device__ __forceinline__ void store_row(scalar_t* plane, const PlaneStrides& s, int h, int c0, int height,
                                          int width, const Pack<acc_t, P> (&vals)[U]) {
  constexpr int VW = Layout::kRowVector;
#pragma unroll
  for (int k = 0; k < U / VW; ++k) {
    const int col = c0 + k * VW;
    if constexpr (VW == 1) {
      if (h < height && col < width) store_acc<P>(plane + plane_at(s, h, col), vals[k]);
    } else {
      Pack<acc_t, VW> v;
#pragma unroll
      for (int j = 0; j < VW; ++j) v.val[j] = vals[k * VW + j].val[0];
      if (h < height && col < width) store_acc<VW>(plane + plane_at(s, h, col), v);
    }
  }
}

// wr[t].val[e] = tap t of channel c + e (the kernel flipped when kFlipped, see
// Note [flipped-kernel identity]).
template <int TAPS, bool kFlipped, int P, typename acc_t, typename scalar_t>
__device__ __forceinline__ void load_taps(const scalar_t* w, int c, Pack<acc_t, P> (&wr)[TAPS]) {
#pragma unroll
  for (int e = 0; e < P; ++e) {
    const scalar_t* wk = weights_of(w, c + e, TAPS);
#pragma unroll
    for (int t = 0; t < TAPS; ++t) wr[t].val[e] = static_cast<acc_t>(wk[kFlipped ? flipped_tap(t, TAPS) : t]);
  }
}

// Row reuse for a tile of V x U outputs whose top-left output is (oh0, ow0)
// (Note [row reuse in a tile]): each of the tile's input rows is loaded once
// from `plane` (in_h x in_w, strides s) as a span of tile_span(U, SW, KW)
// values, load_span<Layout, kPhase> (zeros in the padding), then f(v, kh, span)
// runs for every output row v that reads it through tap kh. All loops unroll,
// so v and kh are constants and the caller's register arrays stay in registers.
template <typename Layout, int kPhase, int KH, int KW, int SH, int SW, int V, int U, typename value_t,
          typename scalar_t, typename F>
__device__ __forceinline__ void for_each_tap_row(const scalar_t* plane, const PlaneStrides& s, int in_h, int in_w,
                                                 int oh0, int ow0, int pad_h, int pad_w, F&& f) {
  const int ih0 = conv::input_coord<int>(oh0, 0, SH, pad_h, 1);
  const int iw0 = conv::input_coord<int>(ow0, 0, SW, pad_w, 1);
#pragma unroll
  for (int r = 0; r < tile_span(V, SH, KH); ++r) {
    const int ih = ih0 + r;
    if (!conv::in_bounds(ih, in_h)) continue;  // zero padding rows
    value_t span[tile_span(U, SW, KW)];
    load_span<Layout, kPhase>(plane, s, ih, iw0, in_w, span);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int kh = tile_tap(r, v, SH);
      if (kh >= 0 && kh < KH) f(v, kh, span);
    }
  }
}

// updateOutput: a V x U tile of outputs, weights in registers. kFlipped reads
// the kernel flipped: updateGradInput at stride 1 (flipped_forward_geometry).
template <typename scalar_t, int KH, int KW, int SH, int SW, int V, int U, bool kFlipped, typename Layout>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_tiled_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ w,
                         const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                         const Geometry g, int row_tiles, int col_tiles, int64_t total) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int P = Layout::kPack;
  using pack_t = Pack<acc_t, P>;
  const int in_channels = g.in_channels, out_channels = g.out_channels, multiplier = g.multiplier;
  const int in_h = g.in_h, in_w = g.in_w, out_h = g.out_h, out_w = g.out_w;
  const PlaneStrides in_s = Layout::strides(in_channels, in_w), out_s = Layout::strides(out_channels, out_w);
  // Vector rows are launched for 'same' padding only (pad_w == KW / 2, with_layout).
  constexpr int kPhase = row_phase(KW / 2, Layout::kRowVector);
  LABOPS_KERNEL_LOOP(i, total) {
    const TileWork t = Layout::work(static_cast<int>(i), out_channels, row_tiles, col_tiles);
    pack_t wr[KH * KW];
    load_taps<KH * KW, kFlipped>(w, t.c, wr);
    pack_t b{};
    if (bias) {
#pragma unroll
      for (int e = 0; e < P; ++e) b.val[e] = static_cast<acc_t>(bias[t.c + e]);
    }
    pack_t acc[V][U];
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int u = 0; u < U; ++u) acc[v][u] = b;
    const int oh0 = tile_first(t.row_tile, V), ow0 = tile_first(t.col_tile, U);
    const scalar_t* src = x + Layout::base(t.n, input_channel(t.c, multiplier), in_channels, in_h, in_w);
    for_each_tap_row<Layout, kPhase, KH, KW, SH, SW, V, U, pack_t>(
        src, in_s, in_h, in_w, oh0, ow0, g.pad_h, g.pad_w, [&](int v, int kh, const auto& span) {
#pragma unroll
          for (int u = 0; u < U; ++u)
#pragma unroll
            for (int kw = 0; kw < KW; ++kw) mac_pack(acc[v][u], wr[tap_index(kh, kw, KW)], span[span_element(u, kw, SW)]);
        });
    scalar_t* dst = out + Layout::base(t.n, t.c, out_channels, out_h, out_w);
#pragma unroll
    for (int v = 0; v < V; ++v) store_row<Layout>(dst, out_s, oh0 + v, ow0, out_h, out_w, acc[v]);
  }
}

// updateGradInput, a gather by tiles (Note [gather tiles], depthwise/depthwise.h):
// a thread owns SH*V x SW*U inputs of channel c and collects them from the
// gather_span(V, SH, KH) x gather_span(U, SW, KW) grad_output values of each of
// its m output channels that reach them, every value loaded once. The taps
// that land are fixed at compile time: the loops below unroll to exactly the
// multiplies that contribute.
template <typename scalar_t, int KH, int KW, int SH, int SW, int V, int U, typename Layout>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_input_tiled_kernel(const scalar_t* __restrict__ grad_out,
                                const scalar_t* __restrict__ w, scalar_t* __restrict__ grad_in,
                                const Geometry g, int row_tiles, int col_tiles, int64_t total) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int P = Layout::kPack;
  using pack_t = Pack<acc_t, P>;
  constexpr int kRows = SH * V, kCols = SW * U;  // the tile's inputs
  const int in_h = g.in_h, in_w = g.in_w, out_h = g.out_h, out_w = g.out_w;
  const int in_channels = g.in_channels, out_channels = g.out_channels, multiplier = g.multiplier;
  const PlaneStrides in_s = Layout::strides(in_channels, in_w), out_s = Layout::strides(out_channels, out_w);
  LABOPS_KERNEL_LOOP(i, total) {
    const TileWork t = Layout::work(static_cast<int>(i), in_channels, row_tiles, col_tiles);
    const int oh0 = tile_first(t.row_tile, V), ow0 = tile_first(t.col_tile, U);
    const int ih0 = conv::input_coord<int>(oh0, 0, SH, g.pad_h, 1);
    const int iw0 = conv::input_coord<int>(ow0, 0, SW, g.pad_w, 1);
    pack_t acc[kRows][kCols];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int col = 0; col < kCols; ++col) acc[r][col] = pack_t{};
    for (int j = 0; j < multiplier; ++j) {
      const int oc = output_channel(t.c, j, multiplier);
      const scalar_t* src = grad_out + Layout::base(t.n, oc, out_channels, out_h, out_w);
      pack_t wr[KH * KW];
      load_taps<KH * KW, false>(w, oc, wr);
#pragma unroll
      for (int q = 0; q < gather_span(V, SH, KH); ++q) {
        const int oh = oh0 - gather_lead(KH, SH) + q;
        if (!conv::in_bounds(oh, out_h)) continue;  // no such output: contributes zero
        pack_t span[gather_span(U, SW, KW)];
        load_span<Layout, 0>(src, out_s, oh, ow0 - gather_lead(KW, SW), out_w, span);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int kh = gather_tap(r, q, SH, KH);
          if (kh < 0 || kh >= KH) continue;
#pragma unroll
          for (int col = 0; col < kCols; ++col)
#pragma unroll
            for (int e = 0; e < gather_span(U, SW, KW); ++e) {
              const int kw = gather_tap(col, e, SW, KW);
              if (kw >= 0 && kw < KW) mac_pack(acc[r][col], wr[tap_index(kh, kw, KW)], span[e]);
            }
        }
      }
    }
    scalar_t* dst = grad_in + Layout::base(t.n, t.c, in_channels, in_h, in_w);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (!conv::in_bounds(ih0 + r, in_h)) continue;
#pragma unroll
      for (int col = 0; col < kCols; ++col) {
        if (conv::in_bounds(iw0 + col, in_w)) store_acc<P>(dst + plane_at(in_s, ih0 + r, iw0 + col), acc[r][col]);
      }
    }
  }
}

// accGradParameters (weight). Block (b, split) walks items (n, row tile, col
// tile) of its Layout::kLanes packs of output channels (b's), one pack per
// lane, kThreadsPerBlock / kLanes threads per lane; each thread keeps all
// KH*KW sums of its pack in registers, then the block reduces them per lane.
// Same tiles and row reuse as the forward (for_each_tap_row).
template <typename scalar_t, int KH, int KW, int SH, int SW, int V, int U, typename Layout>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_weight_tiled_kernel(const scalar_t* __restrict__ grad_out,
                                 const scalar_t* __restrict__ x,
                                 at::opmath_type<scalar_t>* __restrict__ partial, const Geometry g,
                                 int row_tiles, int col_tiles, int items, int chunk) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int P = Layout::kPack, kLanes = Layout::kLanes, kTaps = KH * KW;
  using pack_t = Pack<acc_t, P>;
  const int in_channels = g.in_channels, out_channels = g.out_channels;
  const int in_h = g.in_h, in_w = g.in_w, out_h = g.out_h, out_w = g.out_w;
  const PlaneStrides in_s = Layout::strides(in_channels, in_w), out_s = Layout::strides(out_channels, out_w);
  constexpr int kPhase = row_phase(KW / 2, Layout::kRowVector);  // 'same' padding (with_layout)
  const int split = blockIdx.y;
  const auto first_channel = [&](int lane) { return lane_first_channel<int>(blockIdx.x, lane, kLanes, P); };
  const int oc = first_channel(threadIdx.x % kLanes);
  const conv::Range<int> mine = split_items<int>(split, chunk, items);
  pack_t acc[kTaps];
#pragma unroll
  for (int t = 0; t < kTaps; ++t) acc[t] = pack_t{};
  if (oc < out_channels) {
    const int ic = input_channel(oc, static_cast<int>(g.multiplier));
    for (int it = mine.lo + threadIdx.x / kLanes; it < mine.hi; it += kThreadsPerBlock / kLanes) {
      const TileIndex t = tile_index(it, col_tiles, row_tiles);  // plane = n here
      const scalar_t* gsrc = grad_out + Layout::base(t.plane, oc, out_channels, out_h, out_w);
      const int oh0 = tile_first(t.row_tile, V), ow0 = tile_first(t.col_tile, U);
      pack_t gv[V][U];  // grad_output of the tile; zero outside the plane
#pragma unroll
      for (int v = 0; v < V; ++v) load_row<Layout>(gsrc, out_s, oh0 + v, ow0, out_h, out_w, gv[v]);
      const scalar_t* xsrc = x + Layout::base(t.plane, ic, in_channels, in_h, in_w);
      for_each_tap_row<Layout, kPhase, KH, KW, SH, SW, V, U, pack_t>(
          xsrc, in_s, in_h, in_w, oh0, ow0, g.pad_h, g.pad_w, [&](int v, int kh, const auto& span) {
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
              for (int kw = 0; kw < KW; ++kw) mac_pack(acc[tap_index(kh, kw, KW)], gv[v][u], span[span_element(u, kw, SW)]);
          });
    }
  }
  // value k = (tap, channel e of the pack); lane L's sums go to its channels' partials
  block_lane_sums<kLanes, kTaps * P, acc_t>(
      [&](int k) { return acc[k / P].val[k % P]; },
      [&](int lane, int k, acc_t sum) {
        const int c = first_channel(lane) + k % P;
        if (c < out_channels) partial[partial_offset(c, split, gridDim.y, kTaps) + k / P] = sum;
      });
}

// accGradParameters (bias). Block (b, split) sums items split_items(...) of
// its Layout::kLanes packs of channels, item `it` of channel c at
// channel_item_offset(it, c, channels, plane). Packs of P > 1 adjacent
// channels need plane == 1: rows of channels, which is what channels_last
// memory is (Note [channels_last]).
template <typename scalar_t, typename Layout>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_bias_kernel(const scalar_t* __restrict__ grad_out,
                         at::opmath_type<scalar_t>* __restrict__ partial, int64_t channels,
                         int64_t plane, int64_t items, int64_t chunk) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int P = Layout::kPack, kLanes = Layout::kLanes;
  const int64_t split = blockIdx.y;
  const auto first_channel = [&](int lane) { return lane_first_channel<int64_t>(blockIdx.x, lane, kLanes, P); };
  const int64_t c = first_channel(threadIdx.x % kLanes);
  const conv::Range<int64_t> mine = split_items<int64_t>(split, chunk, items);
  Pack<acc_t, P> acc{};
  if (c < channels) {
    for (int64_t it = mine.lo + threadIdx.x / kLanes; it < mine.hi; it += kThreadsPerBlock / kLanes) {
      const Pack<acc_t, P> v = load_acc<P, acc_t>(grad_out + channel_item_offset(it, c, channels, plane));
#pragma unroll
      for (int e = 0; e < P; ++e) acc.val[e] += v.val[e];
    }
  }
  block_lane_sums<kLanes, P, acc_t>([&](int k) { return acc.val[k]; }, [&](int lane, int k, acc_t sum) {
    const int64_t ch = first_channel(lane) + k;
    if (ch < channels) partial[partial_offset(ch, split, gridDim.y, 1)] = sum;
  });
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

// The NHWC kernels' packs and tiles: for each kernel, the fastest of five
// (packs of 2 or 4 channels; tiles of 4x2, 2x2 or 4x1 outputs) timed on an
// H100 against cuDNN's channels_last kernels, MobileNetV2's shapes, float32
// and float16. Packs of 4 need about 115 registers in the forward (two
// blocks per SM); packs of 2 about 64, and the forward ran 5-15 % faster.
using ForwardNhwc = ChannelsLast<2, kTileRows, kTileCols>;  // also updateGradInput at stride 1
// The strided gather's tiles (Note [gather tiles]): one grad_output row of two
// columns, 2 x 4 inputs at stride 2; NHWC threads take packs of 2 channels.
// Four settings were timed on an H100 over MobileNet-like stride-2 3x3 and 5x5
// layers, float32 and float16: NCHW tiles of 4x2, 2x2, 2x4 and 1x2 grad_output
// rows x columns; NHWC tiles of 1x1 and 1x2 with packs of 4, 2x2 and 1x2 with
// packs of 2. These won 14 of 16 rows (NHWC float16 5x5 ran 5-10 % faster in
// 2x2 tiles). They hold 48 registers a thread in the NCHW 3x3 kernel (79-80
// for 4x2 and 2x4) and 121 in the NHWC 5x5 one (163-177 with packs of 4).
using GatherNchw = ChannelsFirst<1, 1, 2>;
using GatherNhwc = ChannelsLast<2, 1, 2>;
using WeightNhwc = ChannelsLast<2, 2, 2>;

// Columns per NCHW row load (Note [vector row loads]): the widest of
// max_vector, .., 2 that both planes' widths are multiples of and every
// pointer in `data` is aligned to, when the padding is 'same' (pad_w ==
// k_w / 2, the phase the kernels assume); else 1.
int row_vector(const Geometry& g, std::initializer_list<const void*> data, int element_size, int max_vector) {
  if (g.channels_last || g.pad_w != g.k_w / 2) return 1;
  for (int vw = max_vector; vw > 1; vw /= 2) {
    bool fits = g.in_w % vw == 0 && g.out_w % vw == 0;
    for (const void* p : data) fits = fits && is_aligned(p, vw * element_size);
    if (fits) return vw;
  }
  return 1;
}

// The widest row vectors each kernel gains from, measured on an H100 over the
// depthwise suite: the forward (also the flipped grad-input) up to 16 bytes a
// load, 4 columns at most; the weight gradient, which keeps a tile of
// grad_output in registers beside the input span, up to 8 bytes at stride 1
// and 4 at stride 2 (wider ones spilled registers or loaded columns the
// strided span skips, and ran slower than narrower ones).
template <typename scalar_t>
constexpr int kForwardRowVector = std::min<int>(4, kPackBytes / int(sizeof(scalar_t)));
template <typename scalar_t>
constexpr int kWeightRowVector = std::max<int>(1, std::min<int>(4, 8 / int(sizeof(scalar_t))));
template <typename scalar_t>
int weight_row_vector(const Geometry& g, const scalar_t* grad_out, const scalar_t* x) {
  const int max_vector = g.stride_w == 1 ? kWeightRowVector<scalar_t> : kWeightRowVector<scalar_t> / 2;
  return row_vector(g, {grad_out, x}, sizeof(scalar_t), std::max(1, max_vector));
}

// f(layout) with the layout struct of g's activations: NhwcLayout when they
// are channels_last, else ChannelsFirst reading rows `row_vector` columns at a
// time (at most kMaxVector: instantiates f for those layouts only); returns what f returns.
template <typename NhwcLayout, int kMaxVector, typename F>
auto with_layout(const Geometry& g, int row_vector, F&& f) {
  if (g.channels_last) return f(NhwcLayout{});
  if constexpr (kMaxVector >= 4) {
    if (row_vector == 4) return f(ChannelsFirst<4>{});
  }
  if constexpr (kMaxVector >= 2) {
    if (row_vector == 2) return f(ChannelsFirst<2>{});
  }
  return f(ChannelsFirst<1>{});
}

// Enough blocks to cover `work` threads, at most a few resident waves (the
// grid-stride loops cover the rest).
int64_t blocks_for(int64_t work) {
  return std::max<int64_t>(1, std::min<int64_t>(ceil_div<int64_t>(work, kThreadsPerBlock),
                                                int64_t(multiprocessor_count()) * 32));
}

// How many blocks share one reduction (`groups` of them, a block each per
// split, `rows` threads per item lane): aim for ~4 blocks per SM in all, but
// give each thread at least 4 items.
int64_t splits_for(int64_t groups, int64_t items, int64_t rows = kThreadsPerBlock) {
  const int64_t want = ceil_div<int64_t>(int64_t(multiprocessor_count()) * 4, groups);
  const int64_t most = std::max<int64_t>(1, items / (rows * 4));
  return std::max<int64_t>(1, std::min<int64_t>({want, most, 65535}));
}

template <typename acc_t>
at::Tensor workspace(int64_t n) {
  return labops::empty({n}, at::TensorOptions()
                            .dtype(c10::CppTypeToScalarType<acc_t>::value)
                            .device(at::kCUDA, c10::cuda::current_device()));
}

// How the tiled kernels cover g's output planes: row_tiles x col_tiles tiles each.
struct OutputTiles {
  int64_t rows, cols;
};
template <typename Layout>
OutputTiles output_tiles(const Geometry& g) {
  return {ceil_div<int64_t>(g.out_h, Layout::kTileRows), ceil_div<int64_t>(g.out_w, Layout::kTileCols)};
}

// The tiled forward for g, if one exists for its kernel size and stride.
template <bool kFlipped, typename Layout, typename scalar_t>
bool launch_forward_tiled(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* out,
                          const Geometry& g, cudaStream_t stream) {
  return dispatch_tiled(g, [&](auto kh, auto kw, auto sh, auto sw) {
    const OutputTiles tiles = output_tiles<Layout>(g);
    const int64_t total = g.batch * (g.out_channels / Layout::kPack) * tiles.rows * tiles.cols;
    forward_tiled_kernel<scalar_t, kh.value, kw.value, sh.value, sw.value, Layout::kTileRows, Layout::kTileCols,
                         kFlipped, Layout>
        <<<blocks_for(total), kThreadsPerBlock, 0, stream>>>(x, w, bias, out, g, int(tiles.rows), int(tiles.cols),
                                                             total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// The sums of `partial` (channels x splits x width) over splits, into out.
template <typename scalar_t>
void sum_partials(const at::Tensor& partial, scalar_t* out, int64_t channels, int64_t splits, int64_t width,
                  cudaStream_t stream) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t count = channels * width;
  sum_partials_kernel<scalar_t><<<get_blocks(count, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(
      partial.const_data_ptr<acc_t>(), out, count, splits, width);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

struct DepthwiseLauncher {
  // The NHWC kernels (Note [channels_last]) are the tiled ones, for multiplier
  // 1 and whole packs of channels, on data aligned to the pack. `data` are the
  // caller's tensors: those already channels_last are read in place, the
  // others are copied into fresh (aligned) memory.
  static bool has_nhwc_kernels(const Geometry& g, at::ArrayRef<at::Tensor> data) {
    const int64_t pack = nhwc_pack(data[0].element_size());
    if (g.multiplier != 1 || g.out_channels % pack != 0 || !dispatch_tiled(g, [](auto...) {})) return false;
    for (const at::Tensor& t : data) {
      const bool in_place = t.is_contiguous(at::MemoryFormat::ChannelsLast);
      if (in_place && !is_aligned(t.const_data_ptr(), pack * t.element_size())) return false;
    }
    return true;
  }

  // The forward reads channels_last in place only in its tiled rung (2). Rungs 1 and 3 read NCHW: a
  // forced 1 or 3 has channels_last tensors copied, as the default does for geometries without NHWC kernels.
  static bool forward_has_nhwc_kernels(const Geometry& g, at::ArrayRef<at::Tensor> data, int forced) {
    return (forced == 0 || forced == 2) && has_nhwc_kernels(g, data);
  }

  // updateOutput, the forward's ladder (forward_ladder, entry.h): rung 1 (textbook) the generic
  // kernel, rung 2 (tiled) the tiled kernels, rung 3 (tiled_vector_rows) the same reading rows in
  // vectors. The fastest that can take g runs unless `forced` names one.
  template <typename scalar_t>
  static void forward(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* out,
                      const Geometry& g, int forced) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const bool tiled = dispatch_tiled(g, [](auto...) {});
    const int vector = row_vector(g, {x, out}, sizeof(scalar_t), kForwardRowVector<scalar_t>);
    const int rung = forward_ladder().run(c10::DeviceType::CUDA, forced, !tiled ? 1 : vector > 1 ? 3 : 2, [&](int r) {
      if (r >= 2 && !tiled) {
        return "the tiled kernels take 3x3 and 5x5 kernels, stride 1 or 2 (the same on both axes), dilation 1, "
               "tensors under 2^31 elements; got a " + std::to_string(g.k_h) + "x" + std::to_string(g.k_w) +
               " kernel, stride (" + std::to_string(g.stride_h) + ", " + std::to_string(g.stride_w) +
               "), dilation (" + std::to_string(g.dil_h) + ", " + std::to_string(g.dil_w) + ")";
      }
      if (r == 3 && vector == 1) {
        return std::string("rows are read in vectors only from NCHW tensors with padding_w = kW / 2, even input and "
                           "output widths, and x aligned to two elements; got width ") +
               std::to_string(g.in_w) + " -> " + std::to_string(g.out_w) + ", padding_w " + std::to_string(g.pad_w) +
               (g.channels_last ? ", channels_last" : "");
      }
      return std::string();
    });
    if (rung == 1) {
      TORCH_INTERNAL_ASSERT(!g.channels_last, "depthwise: the generic kernel reads NCHW");
      const int64_t total = g.batch * g.out_channels * g.out_plane();
      forward_generic_kernel<scalar_t>
          <<<get_blocks(total, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(x, w, bias, out, g, total);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    with_layout<ForwardNhwc, kForwardRowVector<scalar_t>>(g, rung == 3 ? vector : 1, [&](auto layout) {
      return launch_forward_tiled<false, decltype(layout)>(x, w, bias, out, g, stream);
    });
  }

  template <typename scalar_t>
  static void backward_input(const scalar_t* grad_out, const scalar_t* w, scalar_t* grad_in,
                             const Geometry& g) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    // Stride 1, multiplier 1: the forward's tiles over grad_output, kernel
    // flipped (Note [flipped-kernel identity]). Otherwise the tiled gather
    // (Note [gather tiles]), else one thread per input pixel.
    if (gather_is_flipped_forward(g)) {
      const Geometry flipped = flipped_forward_geometry(g);
      const int vector = row_vector(flipped, {grad_out, grad_in}, sizeof(scalar_t), kForwardRowVector<scalar_t>);
      if (with_layout<ForwardNhwc, kForwardRowVector<scalar_t>>(flipped, vector, [&](auto layout) {
            return launch_forward_tiled<true, decltype(layout)>(
                grad_out, w, static_cast<const scalar_t*>(nullptr), grad_in, flipped, stream);
          })) {
        return;
      }
    }
    const auto gather = [&](auto layout) {
      using Layout = decltype(layout);
      return dispatch_tiled(g, [&](auto kh, auto kw, auto sh, auto sw) {
        constexpr int V = Layout::kTileRows, U = Layout::kTileCols;
        const int64_t row_tiles = gather_tiles(g.in_h, g.pad_h, sh.value, V);
        const int64_t col_tiles = gather_tiles(g.in_w, g.pad_w, sw.value, U);
        const int64_t total = g.batch * (g.in_channels / Layout::kPack) * row_tiles * col_tiles;
        backward_input_tiled_kernel<scalar_t, kh.value, kw.value, sh.value, sw.value, V, U, Layout>
            <<<blocks_for(total), kThreadsPerBlock, 0, stream>>>(grad_out, w, grad_in, g, int(row_tiles),
                                                                 int(col_tiles), total);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    };
    const bool tiled = g.channels_last ? gather(GatherNhwc{}) : gather(GatherNchw{});
    if (!tiled) {
      TORCH_INTERNAL_ASSERT(!g.channels_last, "depthwise: no NHWC kernel for this geometry");
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
    const int vector = weight_row_vector(g, grad_out, x);
    const bool tiled = with_layout<WeightNhwc, kWeightRowVector<scalar_t>>(g, vector, [&](auto layout) {
      using Layout = decltype(layout);
      return dispatch_tiled(g, [&](auto kh, auto kw, auto sh, auto sw) {
        const OutputTiles tiles = output_tiles<Layout>(g);
        const int64_t items = g.batch * tiles.rows * tiles.cols;
        const int64_t groups = ceil_div<int64_t>(g.out_channels / Layout::kPack, Layout::kLanes);
        splits = splits_for(groups, items, kThreadsPerBlock / Layout::kLanes);
        const int64_t chunk = ceil_div<int64_t>(items, splits);
        partial = workspace<acc_t>(g.out_channels * splits * g.taps());
        backward_weight_tiled_kernel<scalar_t, kh.value, kw.value, sh.value, sw.value, Layout::kTileRows,
                                     Layout::kTileCols, Layout>
            <<<dim3(groups, splits), kThreadsPerBlock, 0, stream>>>(
                grad_out, x, partial.mutable_data_ptr<acc_t>(), g, int(tiles.rows), int(tiles.cols), int(items),
                int(chunk));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
    if (!tiled) {
      TORCH_INTERNAL_ASSERT(!g.channels_last, "depthwise: no NHWC kernel for this geometry");
      const int64_t items = g.batch * g.out_plane();
      splits = splits_for(g.out_channels, items);
      partial = workspace<acc_t>(g.out_channels * splits * g.taps());
      backward_weight_generic_kernel<scalar_t><<<dim3(g.out_channels, splits), kThreadsPerBlock, 0, stream>>>(
          grad_out, x, partial.mutable_data_ptr<acc_t>(), g, items, ceil_div<int64_t>(items, splits));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    sum_partials<scalar_t>(partial, grad_w, g.out_channels, splits, g.taps(), stream);
  }

  template <typename scalar_t>
  static void backward_bias(const scalar_t* grad_out, scalar_t* grad_b, int64_t batch,
                            int64_t channels, int64_t plane) {
    using acc_t = at::opmath_type<scalar_t>;
    using Rows = ChannelsLast<nhwc_pack(sizeof(scalar_t))>;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t items = batch * plane;
    at::Tensor partial;
    int64_t splits = 1;
    const auto launch = [&](auto layout) {
      using Layout = decltype(layout);
      const int64_t groups = ceil_div<int64_t>(ceil_div<int64_t>(channels, Layout::kPack), Layout::kLanes);
      splits = splits_for(groups, items, kThreadsPerBlock / Layout::kLanes);
      partial = workspace<acc_t>(channels * splits);
      backward_bias_kernel<scalar_t, Layout><<<dim3(groups, splits), kThreadsPerBlock, 0, stream>>>(
          grad_out, partial.mutable_data_ptr<acc_t>(), channels, plane, items, ceil_div<int64_t>(items, splits));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    // Rows of adjacent channels (plane 1: channels_last memory): packs of them per lane.
    if (plane == 1 && channels % Rows::kPack == 0 && is_aligned(grad_out, Rows::kPack * sizeof(scalar_t))) {
      launch(Rows{});
    } else {
      launch(ChannelsFirst<>{});
    }
    sum_partials<scalar_t>(partial, grad_b, channels, splits, 1, stream);
  }
};

}  // namespace
}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::depthwise::register_kernels<labops::depthwise::Entry<labops::cuda::DepthwiseLauncher>>(m);
}
