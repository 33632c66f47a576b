// conv2d_mm (THNN's SpatialConvolutionMM): the math of im2col and col2im, and
// of the direct convolution the forward's ladder starts from, in one place.
// Both launchers (conv2d_mm/cpu.cpp, conv2d_mm/cuda.cu) run the
// bodies below; they differ only in how they loop over the work items and
// store the results. The per-axis index math (input_coord, output_coord,
// tap_output_range) is common/conv_index.h's, shared with depthwise/depthwise.h.
#pragma once

#include <cstdint>

#include "../common/conv_index.h"
#include "../common/loop.h"

namespace labops::conv2d_mm {

// Note [im2col columns]
// im2col unfolds every receptive field of an image batch x (N, C, H, W) into
// one column of a matrix. Column element (n, c, kh, kw, oh, ow) holds the
// input pixel that kernel tap (kh, kw) sees when the window sits at output
// position (oh, ow):
//
//     ih = input_coord(oh, kh) = oh * stride_h - pad_h + kh * dilation_h
//     iw = input_coord(ow, kw) = ow * stride_w - pad_w + kw * dilation_w
//     column = x[n, c, ih, iw]   (0 where (ih, iw) falls in the padding)
//
// Rows are ordered (c, kh, kw) and the L = out_h * out_w positions (oh, ow)
// run along each row, as F.unfold does. col2im is the adjoint: every image
// pixel receives the SUM of the column entries that were copied from it
// (overlapping windows add up), so col2im(im2col(x)) != x in general.
//
// Note [int64 offsets]
// Every index and offset is int64_t: a batch of columns has N * C*kH*kW * L
// elements, which passes 2^31 for ordinary layers (128 images x 256*3*3 rows
// x 112*112 positions = 3.7e9), where an int32 offset would wrap around.

// The geometry of one im2col / col2im problem, and where the columns live
// (see Note [im2col columns]; every field int64_t, see Note [int64 offsets]).
// Column element (n, c, tap, p), tap = kh * kernel_w + kw, p = oh * out_w + ow,
// sits at  n * col_batch_stride + (c * kernel_area + tap) * col_row_stride + p.
//   * (N, C*kH*kW, L) layout (F.unfold's): col_row_stride = L, col_batch_stride = C*kH*kW*L.
//   * (C*kH*kW, N*L) layout (one GEMM over the whole batch for the weight
//     gradient): col_row_stride = N*L, col_batch_stride = L.
struct Im2colShape {
  int64_t batch, channels, height, width;
  int64_t kernel_h, kernel_w;
  int64_t stride_h, stride_w;
  int64_t pad_h, pad_w;
  int64_t dilation_h, dilation_w;
  int64_t out_h, out_w;
  int64_t col_batch_stride, col_row_stride;

  LABOPS_HOST_DEVICE int64_t kernel_area() const { return kernel_h * kernel_w; }
  LABOPS_HOST_DEVICE int64_t blocks() const { return out_h * out_w; }  // L
  LABOPS_HOST_DEVICE int64_t planes() const { return batch * channels; }
  LABOPS_HOST_DEVICE int64_t image_numel() const { return planes() * height * width; }
  LABOPS_HOST_DEVICE int64_t column_numel() const { return planes() * kernel_area() * blocks(); }

  // Where column element (plane = n * C + c, tap = 0, p = 0) is stored; tap
  // and p add tap * col_row_stride + p.
  LABOPS_HOST_DEVICE int64_t column_base(int64_t plane) const {
    int64_t n = plane / channels, c = plane - n * channels;
    return n * col_batch_stride + c * kernel_area() * col_row_stride;
  }
};

// ---- im2col: column element -> image element ----

// The offset in x of the input pixel (ih, iw) that tap (kh, kw) of output pixel (oh, ow) reads, as
// offset(ih, iw) counts it, or -1 when the tap lands in the zero padding. NCHW x finds its pixels here
// (im2col_source); a channels_last x in the tensor-core kernels, the same bounds split in two (below).
template <typename index_t, typename Offset>
LABOPS_HOST_DEVICE index_t tap_source(const Im2colShape& s, index_t kh, index_t kw, index_t oh, index_t ow,
                                      Offset offset) {
  const index_t ih = conv::input_coord<index_t>(oh, kh, static_cast<index_t>(s.stride_h),
                                                static_cast<index_t>(s.pad_h), static_cast<index_t>(s.dilation_h));
  const index_t iw = conv::input_coord<index_t>(ow, kw, static_cast<index_t>(s.stride_w),
                                                static_cast<index_t>(s.pad_w), static_cast<index_t>(s.dilation_w));
  if (!conv::in_bounds(ih, static_cast<index_t>(s.height)) || !conv::in_bounds(iw, static_cast<index_t>(s.width))) {
    return index_t(-1);
  }
  return offset(ih, iw);
}

// Offset in x of column element (plane, kh, kw, oh, ow), or -1 when the tap
// lands in the zero padding. index_t is int64_t for any x (Note [int64 offsets]);
// the implicit GEMM kernel (conv2d_mm/cuda.cu) runs it in int, with plane counted
// from its image's first channel, when one image has fewer than 2^31 elements and
// its padded height and width are below 2^31 (every intermediate then fits). In
// its K loop oh and ow are fixed, so the compiler keeps oh * stride - pad out of it.
template <typename index_t>
LABOPS_HOST_DEVICE index_t im2col_source(const Im2colShape& s, index_t plane, index_t kh, index_t kw, index_t oh,
                                         index_t ow) {
  const index_t h = static_cast<index_t>(s.height), w = static_cast<index_t>(s.width);
  return tap_source(s, kh, kw, oh, ow, [&](index_t ih, index_t iw) { return (plane * h + ih) * w + iw; });
}

// The same element when x is channels_last (an image is H x W pixels of C channels each): channel c of
// input pixel (ih, iw) lies at this offset inside the image. It is linear, so the tensor-core kernels (Tap
// and PixelRows, cuda.cu) split it as input_coord(o, k) = input_coord(o, 0) + k * dilation splits: a pixel's
// origin, channels_last_offset(ih0, iw0, 0) with (ih0, iw0) the pixel its tap (0, 0) reads (perhaps in the
// padding), found once, plus a tap's reach, channels_last_offset(kh * dilation_h, kw * dilation_w, c), found
// once a step; the sum is loaded only where tap_source's bounds hold for ih0 + dh and iw0 + dw.
template <typename index_t>
LABOPS_HOST_DEVICE index_t channels_last_offset(const Im2colShape& s, index_t ih, index_t iw, index_t c) {
  return (ih * static_cast<index_t>(s.width) + iw) * static_cast<index_t>(s.channels) + c;
}

// One row of the columns: the out_w values of tap (kh, kw) at output row oh
// of one plane, given the tap's range `inside` = tap_output_range(kw, ...) of
// outputs that read inside the input row (callers compute it once per tap).
// Zero where the tap sees padding; inside, a plain copy of the input row at
// unit stride, and a strided gather otherwise.
template <typename scalar_t>
LABOPS_HOST_DEVICE void im2col_row(const Im2colShape& s, const scalar_t* x, int64_t plane, int64_t kh, int64_t kw,
                                   int64_t oh, conv::Range<int64_t> inside, scalar_t* out) {
  const scalar_t zero = scalar_t(0.0f);
  const int64_t ih = conv::input_coord(oh, kh, s.stride_h, s.pad_h, s.dilation_h);
  if (!conv::in_bounds(ih, s.height)) {  // a padding row: all zeros
    for (int64_t ow = 0; ow < s.out_w; ++ow) out[ow] = zero;
    return;
  }
  const scalar_t* src = x + (plane * s.height + ih) * s.width;
  for (int64_t ow = 0; ow < inside.lo; ++ow) out[ow] = zero;
  if (s.stride_w == 1) {
    const int64_t shift = conv::input_coord<int64_t>(0, kw, 1, s.pad_w, s.dilation_w);  // iw = ow + shift
    for (int64_t ow = inside.lo; ow < inside.hi; ++ow) out[ow] = src[ow + shift];
  } else {
    for (int64_t ow = inside.lo; ow < inside.hi; ++ow) {
      out[ow] = src[conv::input_coord(ow, kw, s.stride_w, s.pad_w, s.dilation_w)];
    }
  }
  for (int64_t ow = inside.hi; ow < s.out_w; ++ow) out[ow] = zero;
}

// One column row of tap (kh, kw) of one plane: its L = out_h * out_w values,
// stored contiguously at `out` (what the CPU launcher runs per task). The
// range of outputs reading inside the input along w is the same for every
// output row, so it is computed once here instead of once per row.
template <typename scalar_t>
LABOPS_HOST_DEVICE void im2col_tap(const Im2colShape& s, const scalar_t* x, int64_t plane, int64_t kh, int64_t kw,
                                   scalar_t* out) {
  const conv::Range<int64_t> inside =
      conv::tap_output_range(kw, s.stride_w, s.pad_w, s.dilation_w, s.width, s.out_w);
  for (int64_t oh = 0; oh < s.out_h; ++oh, out += s.out_w) im2col_row(s, x, plane, kh, kw, oh, inside, out);
}

// One work item of the launchers: V consecutive positions p0 .. p0+V-1 of one
// plane, for every kernel tap (THNN/Caffe give a thread one position and loop
// over the taps; V > 1 lets the CUDA kernel store 16 bytes at a time).
// Items are numbered plane-major: item = plane * packs + p0 / V with
// packs = ceil(L / V). For each tap, `store(offset, values, count)` receives
// the column offset of p0 and the `count` (<= V) values of that tap.
template <int V, typename acc_t, typename scalar_t, typename Store>
LABOPS_HOST_DEVICE void im2col_item(const Im2colShape& s, const scalar_t* x, int64_t item, Store&& store) {
  const int64_t L = s.blocks();
  const int64_t packs = (L + V - 1) / V;
  const int64_t plane = item / packs;
  const int64_t p0 = (item - plane * packs) * V;
  const int count = static_cast<int>(L - p0 < V ? L - p0 : V);
  // (oh, ow) of each of the V positions: one division, then carry along the row.
  int64_t oh[V], ow[V];
  oh[0] = p0 / s.out_w;
  ow[0] = p0 - oh[0] * s.out_w;
#pragma unroll
  for (int u = 1; u < V; ++u) {
    bool wrap = ow[u - 1] + 1 == s.out_w;
    ow[u] = wrap ? 0 : ow[u - 1] + 1;
    oh[u] = wrap ? oh[u - 1] + 1 : oh[u - 1];
  }
  int64_t offset = s.column_base(plane) + p0;  // of tap 0
  for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
    for (int64_t kw = 0; kw < s.kernel_w; ++kw, offset += s.col_row_stride) {
      scalar_t values[V];
#pragma unroll
      for (int u = 0; u < V; ++u) {
        int64_t src = u < count ? im2col_source(s, plane, kh, kw, oh[u], ow[u]) : -1;
        values[u] = src >= 0 ? x[src] : scalar_t(acc_t(0));
      }
      store(offset, values, count);
    }
  }
}

// ---- the direct convolution: rung 1 (textbook) of the forward's ladder ----

// Output element `index` = (n, o, oh, ow) of the convolution with `out_channels`
// filters w (O, C, kH, kW): bias[o] (0 when bias is null) plus, over every
// channel c and tap (kh, kw), w[o, c, kh, kw] times the pixel im2col_source
// finds for it (nothing in the padding). The same sum the GEMM of the default
// rung forms, out[n] = W . columns[n], one output at a time, without the
// columns: the weights of filter o run in the columns' row order (c, kh, kw).
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t forward_at(const Im2colShape& s, const scalar_t* x, const scalar_t* w, const scalar_t* bias,
                                    int64_t out_channels, int64_t index) {
  const int64_t ow = index % s.out_w;
  index /= s.out_w;
  const int64_t oh = index % s.out_h;
  index /= s.out_h;
  const int64_t o = index % out_channels, n = index / out_channels;
  const scalar_t* filter = w + o * s.channels * s.kernel_area();
  acc_t sum = bias != nullptr ? static_cast<acc_t>(bias[o]) : acc_t(0);
  for (int64_t c = 0; c < s.channels; ++c) {
    for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
      for (int64_t kw = 0; kw < s.kernel_w; ++kw, ++filter) {
        const int64_t src = im2col_source(s, n * s.channels + c, kh, kw, oh, ow);
        if (src >= 0) sum += static_cast<acc_t>(*filter) * static_cast<acc_t>(x[src]);
      }
    }
  }
  return sum;
}

// ---- col2im: image element <- sum of the column elements copied from it ----

// Gather form: image pixel (plane, ih, iw) adds up every column element
// (kh, kw, oh, ow) with input_coord(oh, kh) == ih and input_coord(ow, kw) == iw.
// No two threads write the same pixel, so no atomics, and the sum runs in a
// fixed order, (kh, kw) ascending, so it is deterministic.
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t col2im_gather(const Im2colShape& s, const scalar_t* col, int64_t plane, int64_t ih,
                                       int64_t iw) {
  const scalar_t* plane_col = col + s.column_base(plane);
  acc_t sum = acc_t(0);
  for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
    int64_t oh = conv::output_coord(ih, kh, s.stride_h, s.pad_h, s.dilation_h, s.out_h);
    if (oh < 0) continue;
    for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
      int64_t ow = conv::output_coord(iw, kw, s.stride_w, s.pad_w, s.dilation_w, s.out_w);
      if (ow < 0) continue;
      sum += static_cast<acc_t>(plane_col[(kh * s.kernel_w + kw) * s.col_row_stride + oh * s.out_w + ow]);
    }
  }
  return sum;
}

// The same for a whole image row (plane, ih): sums[iw] for iw in [0, W)
// (what the CPU runs). The (kh, kw) loops are outside, and for each tap the
// loop runs over the outputs ow that read inside the row,
// tap_output_range(kw), adding column element ow to the pixel it was copied
// from, input_coord(ow, kw): no test or division per element, and at unit
// stride a straight vectorizable add of two rows. Every pixel still receives
// its terms in (kh, kw) ascending order, so the sums equal col2im_gather's
// bit for bit.
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE void col2im_gather_row(const Im2colShape& s, const scalar_t* col, int64_t plane, int64_t ih,
                                          acc_t* sums) {
  const scalar_t* plane_col = col + s.column_base(plane);
  for (int64_t iw = 0; iw < s.width; ++iw) sums[iw] = acc_t(0);
  for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
    int64_t oh = conv::output_coord(ih, kh, s.stride_h, s.pad_h, s.dilation_h, s.out_h);
    if (oh < 0) continue;
    for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
      const scalar_t* src = plane_col + (kh * s.kernel_w + kw) * s.col_row_stride + oh * s.out_w;
      const conv::Range<int64_t> inside =
          conv::tap_output_range(kw, s.stride_w, s.pad_w, s.dilation_w, s.width, s.out_w);
      if (s.stride_w == 1) {
        const int64_t shift = conv::input_coord<int64_t>(0, kw, 1, s.pad_w, s.dilation_w);  // iw = ow + shift
        for (int64_t ow = inside.lo; ow < inside.hi; ++ow) sums[ow + shift] += static_cast<acc_t>(src[ow]);
      } else {
        for (int64_t ow = inside.lo; ow < inside.hi; ++ow) {
          sums[conv::input_coord(ow, kw, s.stride_w, s.pad_w, s.dilation_w)] += static_cast<acc_t>(src[ow]);
        }
      }
    }
  }
}

// The same for a flat index over the image batch (N*C, H, W).
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t col2im_gather(const Im2colShape& s, const scalar_t* col, int64_t index) {
  int64_t iw = index % s.width;
  index /= s.width;
  int64_t ih = index % s.height;
  int64_t plane = index / s.height;
  return col2im_gather<acc_t>(s, col, plane, ih, iw);
}

}  // namespace labops::conv2d_mm
