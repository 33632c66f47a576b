// Depthwise 2-D convolution: the math of the layer, in one place.
//
//   out[n, oc, oh, ow] = bias[oc] + sum_{kh, kw} w[oc, 0, kh, kw] * x[n, oc / m, ih, iw],
//   ih = input_coord(oh, kh), iw = input_coord(ow, kw)      (common/conv_index.h)
//
// terms in the zero padding skipped; m = C_out / C_in is the channel
// multiplier: F.conv2d(x, w, b, stride, padding, dilation, groups=C_in).
//
// Who calls what (every path is tested equal to the per-element bodies):
//   * the per-element bodies (forward_at, backward_input_at, backward_weight_at,
//     backward_bias_at): depthwise/cpu.cpp's DepthwiseTextbookLauncher
//     (labops::_depthwise_conv2d_textbook) and depthwise/cuda.cu's generic kernels;
//   * the bordered-plane helpers, see Note [zero-bordered planes] and
//     Note [flipped-kernel identity]: depthwise/cpu.cpp's DepthwiseLauncher, the CPU
//     kernel of labops::depthwise_conv2d and its backward ops;
//   * the tile helpers, see Note [row reuse in a tile]: the tiled 3x3 / 5x5
//     kernels of depthwise/cuda.cu.
// Index helpers are templates on the index type, so the tiled CUDA kernels
// can run them in 32-bit.
#pragma once

#include <cstdint>

#include "../common/conv_index.h"
#include "../common/loop.h"

namespace labops::depthwise {

// Every size of one depthwise convolution. Built (and checked) once by the
// tensor-level code in depthwise_ops.h, then passed by value to kernels.
struct Geometry {
  int64_t batch, in_channels, multiplier, out_channels;
  int64_t in_h, in_w, out_h, out_w;
  int64_t k_h, k_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  // x, out and their gradients are stored channels_last (NHWC), see Note
  // [channels_last]; set only for a launcher whose NHWC kernels take g.
  bool channels_last = false;

  LABOPS_HOST_DEVICE int64_t taps() const { return k_h * k_w; }
  LABOPS_HOST_DEVICE int64_t in_plane() const { return in_h * in_w; }
  LABOPS_HOST_DEVICE int64_t out_plane() const { return out_h * out_w; }
};

// ---- layout: where things are in memory --------------------------------------

// flat = outer * width + inner, split back into its two parts.
template <typename index_t>
struct Split {
  index_t outer, inner;
};
template <typename index_t>
LABOPS_HOST_DEVICE Split<index_t> split_index(index_t flat, index_t width) {
  return {flat / width, flat % width};
}

// Element (row, col) of a row-major plane `width` wide.
template <typename index_t>
LABOPS_HOST_DEVICE index_t pixel(index_t row, index_t col, index_t width) {
  return row * width + col;
}

// Tap (kh, kw) of a row-major kH x kW kernel.
template <typename index_t>
LABOPS_HOST_DEVICE index_t tap_index(index_t kh, index_t kw, index_t k_w) {
  return kh * k_w + kw;
}

// Offset of plane (n, c) in an (N, channels, plane) tensor.
LABOPS_HOST_DEVICE int64_t plane_offset(int64_t n, int64_t c, int64_t channels, int64_t plane) {
  return (n * channels + c) * plane;
}
LABOPS_HOST_DEVICE int64_t input_plane_offset(int64_t n, int64_t c, const Geometry& g) {
  return plane_offset(n, c, g.in_channels, g.in_plane());
}
LABOPS_HOST_DEVICE int64_t output_plane_offset(int64_t n, int64_t oc, const Geometry& g) {
  return plane_offset(n, oc, g.out_channels, g.out_plane());
}

// Output channel j of the m made from input channel c, and the input channel
// that output channel oc reads.
template <typename index_t>
LABOPS_HOST_DEVICE index_t output_channel(index_t c, index_t j, index_t multiplier) {
  return c * multiplier + j;
}
template <typename index_t>
LABOPS_HOST_DEVICE index_t input_channel(index_t oc, index_t multiplier) {
  return oc / multiplier;
}

// The kH*kW weights (or weight gradients) of output channel oc.
template <typename pointer_t>
LABOPS_HOST_DEVICE pointer_t weights_of(pointer_t w, int64_t oc, int64_t taps) {
  return w + oc * taps;
}

// The one multiply-accumulate of the layer, in the accumulation type
// (float for half/bfloat16 data).
template <typename acc_t, typename a_t, typename b_t>
LABOPS_HOST_DEVICE void mac(acc_t& acc, a_t a, b_t b) {
  acc += static_cast<acc_t>(a) * static_cast<acc_t>(b);
}

// ---- the per-element bodies ---------------------------------------------------

// ---- updateOutput: one output element from its flat index (n, oc, oh, ow) ----
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t forward_at(int64_t index, const scalar_t* x, const scalar_t* w,
                                   const scalar_t* bias, const Geometry& g) {
  const Split<int64_t> row = split_index(index, g.out_w);     // (n, oc, oh), ow
  const Split<int64_t> plane = split_index(row.outer, g.out_h);  // (n, oc), oh
  const Split<int64_t> nc = split_index(plane.outer, g.out_channels);
  const int64_t oh = plane.inner, ow = row.inner, oc = nc.inner;
  const scalar_t* src = x + input_plane_offset(nc.outer, input_channel(oc, g.multiplier), g);
  const scalar_t* wk = weights_of(w, oc, g.taps());
  acc_t acc = bias ? static_cast<acc_t>(bias[oc]) : acc_t(0);
  for (int64_t kh = 0; kh < g.k_h; ++kh) {
    const int64_t ih = conv::input_coord(oh, kh, g.stride_h, g.pad_h, g.dil_h);
    if (!conv::in_bounds(ih, g.in_h)) continue;  // zero padding
    for (int64_t kw = 0; kw < g.k_w; ++kw) {
      const int64_t iw = conv::input_coord(ow, kw, g.stride_w, g.pad_w, g.dil_w);
      if (!conv::in_bounds(iw, g.in_w)) continue;
      mac(acc, wk[tap_index(kh, kw, g.k_w)], src[pixel(ih, iw, g.in_w)]);
    }
  }
  return acc;
}

// ---- updateGradInput: one input-gradient element (n, c, ih, iw), as a gather ----
// Sums over the m output channels made from input channel c, and over the taps
// whose window covers (ih, iw). No two threads write the same element, so no
// atomics and the result does not depend on scheduling.
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t backward_input_at(int64_t index, const scalar_t* grad_out,
                                           const scalar_t* w, const Geometry& g) {
  const Split<int64_t> row = split_index(index, g.in_w);
  const Split<int64_t> plane = split_index(row.outer, g.in_h);
  const Split<int64_t> nc = split_index(plane.outer, g.in_channels);
  const int64_t ih = plane.inner, iw = row.inner, c = nc.inner;
  acc_t acc = acc_t(0);
  for (int64_t j = 0; j < g.multiplier; ++j) {
    const int64_t oc = output_channel(c, j, g.multiplier);
    const scalar_t* src = grad_out + output_plane_offset(nc.outer, oc, g);
    const scalar_t* wk = weights_of(w, oc, g.taps());
    for (int64_t kh = 0; kh < g.k_h; ++kh) {
      const int64_t oh = conv::output_coord(ih, kh, g.stride_h, g.pad_h, g.dil_h, g.out_h);
      if (oh < 0) continue;
      for (int64_t kw = 0; kw < g.k_w; ++kw) {
        const int64_t ow = conv::output_coord(iw, kw, g.stride_w, g.pad_w, g.dil_w, g.out_w);
        if (ow < 0) continue;
        mac(acc, wk[tap_index(kh, kw, g.k_w)], src[pixel(oh, ow, g.out_w)]);
      }
    }
  }
  return acc;
}

// ---- accGradParameters: one term of grad_w[oc, kh, kw] ----
// The contribution of output position (n, oh, ow) of channel oc: grad_out
// times the input that tap read (nothing in the padding). A reduction over every (n, oh, ow) of
// these is the weight gradient; the CUDA generic kernel splits that reduction
// over blocks, backward_weight_at below runs it whole.
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE void backward_weight_term(acc_t& acc, const scalar_t* grad_out,
                                             const scalar_t* x, int64_t n, int64_t oc, int64_t oh,
                                             int64_t ow, int64_t kh, int64_t kw, const Geometry& g) {
  const int64_t ih = conv::input_coord(oh, kh, g.stride_h, g.pad_h, g.dil_h);
  const int64_t iw = conv::input_coord(ow, kw, g.stride_w, g.pad_w, g.dil_w);
  if (!conv::in_bounds(ih, g.in_h) || !conv::in_bounds(iw, g.in_w)) return;
  mac(acc, grad_out[output_plane_offset(n, oc, g) + pixel(oh, ow, g.out_w)],
      x[input_plane_offset(n, input_channel(oc, g.multiplier), g) + pixel(ih, iw, g.in_w)]);
}

// The output position (n, oh, ow) of item `item` of one channel's N*outH*outW.
struct Position {
  int64_t n, oh, ow;
};
LABOPS_HOST_DEVICE Position output_position(int64_t item, const Geometry& g) {
  const Split<int64_t> row = split_index(item, g.out_w);
  const Split<int64_t> plane = split_index(row.outer, g.out_h);
  return {plane.outer, plane.inner, row.inner};
}

// accGradParameters: one weight-gradient element grad_w[oc, kh, kw] from its
// flat index, the whole reduction over (n, oh, ow) in that order.
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t backward_weight_at(int64_t index, const scalar_t* grad_out,
                                            const scalar_t* x, const Geometry& g) {
  const Split<int64_t> tap = split_index(index, g.taps());  // oc, kh*kW + kw
  const Split<int64_t> khw = split_index(tap.inner, g.k_w);
  acc_t acc = acc_t(0);
  for (int64_t item = 0; item < g.batch * g.out_plane(); ++item) {
    const Position p = output_position(item, g);
    backward_weight_term(acc, grad_out, x, p.n, tap.outer, p.oh, p.ow, khw.outer, khw.inner, g);
  }
  return acc;
}

// Element `item` of channel c's N*plane positions in an (N, channels, plane) tensor.
LABOPS_HOST_DEVICE int64_t channel_item_offset(int64_t item, int64_t c, int64_t channels,
                                               int64_t plane) {
  const Split<int64_t> ni = split_index(item, plane);
  return plane_offset(ni.outer, c, channels, plane) + ni.inner;
}

// accGradParameters: grad_b[c], the sum of grad_out over (n, oh, ow).
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t backward_bias_at(int64_t c, const scalar_t* grad_out, int64_t batch,
                                          int64_t channels, int64_t plane) {
  acc_t acc = acc_t(0);
  for (int64_t item = 0; item < batch * plane; ++item) {
    acc += static_cast<acc_t>(grad_out[channel_item_offset(item, c, channels, plane)]);
  }
  return acc;
}

// ---- the fast CPU path's helpers ------------------------------------------------

// Note [zero-bordered planes]
// The fast CPU path copies a plane into a buffer with a zero border, after
// which every tap of every output reads inside the buffer: no padding tests,
// and a tap is one SIMD multiply-add over a whole row. Buffer (r, c) holds
// input (r - pH, c - pW), and input_coord(o, k) + p = o*s + k*d, so tap
// (kh, kw) of output (oh, ow) reads buffer position
//     row_start(oh) + ow * sW + tap_offset(kh, kw),
//     row_start(oh) = oh*sH * P,  tap_offset(kh, kw) = kh*dH * P + kw*dW
// with P the buffer's row pitch. At stride 1 an output stored at oh*P + ow
// reads flat position (oh*P + ow) + tap_offset, so one flat loop over
// out_h * P outputs covers the plane (the P - out_w extra columns per row are
// computed and dropped; see flat_plane): 7x7 planes keep the SIMD lanes as busy
// as 56x56 ones.
struct BorderedPlane {
  int64_t rows, pitch;
  int64_t row0, col0;  // where plane element (0, 0) sits
  int64_t dil_h, dil_w, k_w;

  // Elements to allocate: the flat loops run up to tap_offset past the last
  // row, and a stride-2 SIMD load reads two vectors (so, 4 * 64 of slack).
  LABOPS_HOST_DEVICE int64_t size() const { return rows * pitch + (k_w - 1) * dil_w + 4 * 64; }
  // Buffer position of plane element (r, c).
  LABOPS_HOST_DEVICE int64_t at(int64_t r, int64_t c) const { return pixel(r + row0, c + col0, pitch); }
  // Offset of flat tap t = kh*kW + kw from tap (0, 0).
  LABOPS_HOST_DEVICE int64_t tap_offset(int64_t t) const {
    const Split<int64_t> khw = split_index(t, k_w);
    return pixel(khw.outer * dil_h, khw.inner * dil_w, pitch);
  }
  // Buffer position of tap (0, 0) of output row oh.
  LABOPS_HOST_DEVICE int64_t row_start(int64_t oh, int64_t stride_h) const { return oh * stride_h * pitch; }
};

// The input plane with its zero padding (forward, backward-weight).
LABOPS_HOST_DEVICE BorderedPlane padded_input_plane(const Geometry& g) {
  return {g.in_h + 2 * g.pad_h, g.in_w + 2 * g.pad_w, g.pad_h, g.pad_w, g.dil_h, g.dil_w, g.k_w};
}

// Stride 1: the whole plane is one flat loop over rows of the buffer's pitch
// (see Note [zero-bordered planes]); otherwise a loop over output rows.
LABOPS_HOST_DEVICE bool flat_plane(const Geometry& g) { return g.stride_h == 1 && g.stride_w == 1; }

// Row pitch of a per-plane output (or grad_output) buffer: the bordered
// plane's pitch when flat, else out_w.
LABOPS_HOST_DEVICE int64_t output_pitch(const Geometry& g, const BorderedPlane& b) {
  return flat_plane(g) ? b.pitch : g.out_w;
}

// Note [flipped-kernel identity]
// updateGradInput as a stride-1 correlation, per axis (K taps, dilation d):
//     grad_x[i] = sum_k w[k] * g[o(i, k)],   o(i, k) = output_coord(i, k)
// (terms with no such o dropped). Spread g into a zeroed buffer, g[o] at
//     q(o) = input_coord(o, K-1) = o*s - p + (K-1)*d.
// For tap k, q(o) = i + (K-1-k)*d exactly when o*s - p + k*d = i, i.e. when
// o = o(i, k); when there is no such o, nothing was spread there and the
// buffer holds zero. Renaming k' = K-1-k,
//     grad_x[i] = sum_k' w[K-1-k'] * buf[i + k'*d],
// the forward's stride-1 correlation with the kernel flipped. In 2-D both axes
// flip, which reverses the flat tap index: see flipped_tap. Reads stay inside
// [0, in + (K-1)*d), so a q(o) outside it is never read and is dropped
// (spread_coord returns -1; it happens when p > (K-1)*d).

// The buffer the grad_output plane is spread into (element (r, c) at r*P + c).
LABOPS_HOST_DEVICE BorderedPlane spread_grad_plane(const Geometry& g) {
  return {g.in_h + (g.k_h - 1) * g.dil_h, g.in_w + (g.k_w - 1) * g.dil_w, 0, 0, g.dil_h, g.dil_w, g.k_w};
}

// q(o) of Note [flipped-kernel identity] along one axis, or -1 when it falls
// outside the spread buffer's `extent`.
LABOPS_HOST_DEVICE int64_t spread_coord(int64_t o, int64_t k, int64_t s, int64_t p, int64_t d,
                                        int64_t extent) {
  const int64_t q = conv::input_coord(o, k - 1, s, p, d);
  return conv::in_bounds(q, extent) ? q : int64_t(-1);
}

// Flipping a row-major kH x kW kernel along both axes maps flat tap t to
// taps - 1 - t: (kH-1-kh)*kW + (kW-1-kw) = kH*kW - 1 - (kh*kW + kw).
LABOPS_HOST_DEVICE int64_t flipped_tap(int64_t t, int64_t taps) { return taps - 1 - t; }

// At stride 1 the identity needs no spreading: q(o) = o + (K-1)*d - p, so
// updateGradInput is the forward's correlation, kernel flipped, over
// grad_output padded by (K-1)*d - p. With multiplier 1 (one output channel per
// input channel) that is a forward with this geometry: grad_output as the
// input, grad_input as the output. The tiled CUDA backward-input uses it.
LABOPS_HOST_DEVICE bool gather_is_flipped_forward(const Geometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.multiplier == 1 && g.pad_h <= (g.k_h - 1) * g.dil_h &&
         g.pad_w <= (g.k_w - 1) * g.dil_w;
}
LABOPS_HOST_DEVICE Geometry flipped_forward_geometry(const Geometry& g) {
  Geometry f = g;
  f.in_h = g.out_h;
  f.in_w = g.out_w;
  f.out_h = g.in_h;
  f.out_w = g.in_w;
  f.pad_h = (g.k_h - 1) * g.dil_h - g.pad_h;
  f.pad_w = (g.k_w - 1) * g.dil_w - g.pad_w;
  return f;
}

// ---- channels_last -------------------------------------------------------------------

// Note [channels_last]
// A channels_last (NHWC) tensor of sizes (N, C, H, W) stores element
// (n, c, h, w) at ((n*H + h)*W + w)*C + c: the C channels of a pixel sit side
// by side, and a plane is no longer contiguous. It is the layout MobileNet
// users train in (cuDNN's fastest depthwise kernels run on it), so the op
// keeps it: channels_last x gives a channels_last output, and a channels_last
// grad_output a channels_last grad_input. Which code runs on it:
//   * the tiled CUDA kernels (multiplier 1, C a multiple of the pack): the
//     same kernel bodies as for NCHW, with a thread taking a pack of P
//     adjacent channels of its tile, neighbouring threads the next packs of
//     the same pixels (coalesced loads), see ChannelsLast in depthwise/cuda.cu;
//   * the bias gradient everywhere: NHWC memory is an (N*H*W, C) matrix, whose
//     column sums are the NCHW bias gradient of an (N*H*W, C, 1) tensor;
//   * everything else (the CPU, other kernel sizes, multiplier > 1) copies to
//     NCHW, computes there, and copies the result back to channels_last.
// In a plane view (row stride, column stride), element (h, w) of plane
// (n, c) is at base + h*row + w*col: NCHW planes have strides (W, 1) from
// base plane_offset(n, c), NHWC ones (W*C, C) from base nhwc_offset(n, c).

// Offset of channel c of pixel (0, 0) of image n in an NHWC tensor.
LABOPS_HOST_DEVICE int64_t nhwc_offset(int64_t n, int64_t c, int64_t channels, int64_t plane) {
  return n * plane * channels + c;
}

// Strides of a plane's rows and columns, in elements.
struct PlaneStrides {
  int row, col;
};
LABOPS_HOST_DEVICE int plane_at(const PlaneStrides& s, int h, int w) { return h * s.row + w * s.col; }
LABOPS_HOST_DEVICE PlaneStrides nchw_plane_strides(int width) { return {width, 1}; }
LABOPS_HOST_DEVICE PlaneStrides nhwc_plane_strides(int width, int channels) { return {width * channels, channels}; }

// ---- the tiled CUDA kernels' helpers -----------------------------------------------

// Note [row reuse in a tile]
// A tiled CUDA thread computes a tile of V x U outputs: rows oh0 .. oh0+V-1 of
// columns ow0 .. ow0+U-1 (dilation 1, stride (SH, SW), KH x KW taps). Output
// row oh0 + v reads input rows first_row + v*SH + kh, so the tile reads the
// tile_span(V, SH, KH) = (V-1)*SH + KH rows from first_row on, and row r of
// them serves output row v through tap kh = tile_tap(r, v, SH) when
// 0 <= kh < KH. Columns work the same way: each of those rows is loaded once
// as a span of tile_span(U, SW, KW) inputs, and tap kw of output column u is
// element u*SW + kw of it (span_element). Every input the tile reads is loaded
// once and reused by every output of the tile that reads it: per output,
// (tile_span(V,SH,KH) * tile_span(U,SW,KW)) / (V*U) loads instead of KH*KW.

// The thread's tile: flat = (plane * row_tiles + row_tile) * col_tiles + col_tile.
struct TileIndex {
  int col_tile, row_tile, plane;
};
LABOPS_HOST_DEVICE TileIndex tile_index(int flat, int col_tiles, int row_tiles) {
  const Split<int> row = split_index(flat, col_tiles);
  const Split<int> pt = split_index(row.outer, row_tiles);
  return {row.inner, pt.inner, pt.outer};
}

// The channels_last thread's tile and pack of P channels (Note [channels_last]):
// flat = ((n * row_tiles + row_tile) * col_tiles + col_tile) * packs + pack,
// the pack fastest so a warp reads the adjacent channels of its pixels.
struct PackedTileIndex {
  TileIndex tile;  // tile.plane is n
  int pack;
};
LABOPS_HOST_DEVICE PackedTileIndex packed_tile_index(int flat, int packs, int col_tiles, int row_tiles) {
  const Split<int> tp = split_index(flat, packs);
  return {tile_index(tp.outer, col_tiles, row_tiles), tp.inner};
}

// First output (or input) row or column of tile `tile` of `size` rows or columns.
LABOPS_HOST_DEVICE int tile_first(int tile, int size) { return tile * size; }

// Input rows (columns) read by a tile of `size` output rows (columns), stride s, k taps.
LABOPS_HOST_DEVICE constexpr int tile_span(int size, int s, int k) { return (size - 1) * s + k; }

// The tap through which span row r serves the tile's output row v (may be out of [0, KH)).
LABOPS_HOST_DEVICE constexpr int tile_tap(int r, int v, int sh) { return r - v * sh; }

// The span element that tap kw of the tile's output column u reads.
LABOPS_HOST_DEVICE constexpr int span_element(int u, int kw, int sw) { return u * sw + kw; }

// Note [gather tiles]
// updateGradInput gathers, into input i, w[k] * g[o] over the (o, k) with
// o*S - p + k = i (output_coord, one axis; dilation 1). At stride 2 only about
// one tap in S of each axis lands, and which ones depends on i's parity: a
// thread that owns one input and tests all K taps spends most of its work on
// taps that miss. So a tiled CUDA thread owns S*V input rows, from
// i0 = input_coord(o0, 0) = o0*S - p on, o0 = tile_first(row_tile, V). For its
// row r = i - i0 the equation reads (o - o0)*S + k = r: the grad_output rows
// that reach the tile are o0 - gather_lead(K, S) .. o0 + V - 1, the
// gather_span(V, S, K) rows, and row q of them serves input row r through tap
// k = gather_tap(r, q, S, K) when 0 <= k < K: the forward's tile_tap, with the
// grad_output rows counted from o0 - gather_lead. Which (r, q) pairs meet, and
// through which tap, depends on r, q, S and K alone, all compile-time in the
// kernel: no parity test at run time, and only the taps that land are
// multiplied (K*K/(S*S) per input, not K*K tests). Columns work the same way,
// so each grad_output value is loaded once per tile. Tiles start at
// i0 = -p: rows or columns outside the input are computed and not stored.
LABOPS_HOST_DEVICE constexpr int gather_lead(int k, int s) { return (k - 1) / s; }
LABOPS_HOST_DEVICE constexpr int gather_span(int size, int s, int k) { return size + gather_lead(k, s); }
LABOPS_HOST_DEVICE constexpr int gather_tap(int r, int q, int s, int k) {
  return tile_tap(r, q - gather_lead(k, s), s);
}
// Tiles of `size` grad_output rows (S*size inputs) that cover `in` input rows from -p on.
LABOPS_HOST_DEVICE int64_t gather_tiles(int64_t in, int64_t p, int s, int size) {
  return (in + p + int64_t(s) * size - 1) / (int64_t(s) * size);
}

// Note [vector row loads]
// An NCHW span is tile_span(U, SW, KW) adjacent inputs of one row from column
// iw0 = ow0*SW - pad_w. When the row's width is a multiple of VW, it can be read
// as whole, aligned vectors of VW columns: the vectors start at column
// iw0 - phase, and span element e is element (phase + e) % VW of vector
// (phase + e) / VW. With tiles U columns wide, U*SW a multiple of VW, every
// tile's iw0 leaves the same remainder: phase = row_phase(pad_w, VW). A vector
// lies wholly inside the row or wholly in its padding, so one bounds test per
// vector zero-fills the padding, and span_vectors(S, VW, phase) loads read the
// span instead of S.
LABOPS_HOST_DEVICE constexpr int row_phase(int pad, int vw) { return (vw - pad % vw) % vw; }
LABOPS_HOST_DEVICE constexpr int span_vectors(int span, int vw, int phase) { return (phase + span + vw - 1) / vw; }

// Note [split reductions]
// The CUDA weight and bias gradients split each channel's reduction over
// `splits` blocks; block (c, split) stores `width` partial sums (one per tap)
// at partial_offset(c, split, splits, width) for its items split_items(split,
// chunk, items) of the channel, and a second kernel adds a
// channel's partials in split order (fixed order: reproducible results).
template <typename index_t>
LABOPS_HOST_DEVICE conv::Range<index_t> split_items(index_t split, index_t chunk, index_t items) {
  const index_t lo = split * chunk;
  return {lo, lo + chunk < items ? lo + chunk : items};
}
LABOPS_HOST_DEVICE int64_t partial_offset(int64_t c, int64_t split, int64_t splits, int64_t width) {
  return (c * splits + split) * width;
}

// A reduction block `group` takes `lanes` packs of `pack` adjacent channels
// (one channel per block for NCHW, see Note [channels_last]); the first
// channel of lane `lane`'s pack.
template <typename index_t>
LABOPS_HOST_DEVICE index_t lane_first_channel(index_t group, int lane, int lanes, int pack) {
  return (group * lanes + lane) * pack;
}

}  // namespace labops::depthwise
