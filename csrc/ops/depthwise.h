// Depthwise 2-D convolution: the math of the layer, in one place.
//
//   out[n, oc, oh, ow] = bias[oc]
//       + sum_{kh, kw} w[oc, 0, kh, kw] * x[n, oc / m, oh*sH - pH + kh*dH, ow*sW - pW + kw*dW]
//
// (terms whose input coordinate falls in the zero padding are skipped). Output
// channel oc reads input channel oc / m, where m = C_out / C_in is the channel
// multiplier; F.conv2d(x, w, b, stride, padding, dilation, groups=C_in).
//
// Gradients (the layer's three functions):
//   updateGradInput:   grad_x[n, c, ih, iw] = sum over the m output channels oc of c and every
//                      tap (kh, kw) whose window covers (ih, iw) of w[oc, kh, kw] * grad_out[n, oc, oh, ow]
//                      -- a GATHER: input pixel (ih, iw) is reached from output row
//                      oh = (ih + pH - kh*dH) / sH, only when that division is exact.
//   accGradParameters: grad_w[oc, kh, kw] = sum_{n, oh, ow} grad_out[n, oc, oh, ow] * x[n, oc/m, ih, iw]
//                      grad_b[oc]         = sum_{n, oh, ow} grad_out[n, oc, oh, ow]
//
// Every function here is LABOPS_HOST_DEVICE. Today the generic CUDA kernels
// (cuda/depthwise.cu) call them; the CPU loops (cpu/depthwise.cpp) and the tiled
// 3x3/5x5 CUDA kernels still redo this arithmetic in their own form (buffer
// offsets, tap rows), checked equal by the tests -- moving them onto these
// helpers is open work. Index helpers are templates on the index type, so a
// CUDA kernel can run them in 32-bit when the sizes allow it.
#pragma once

#include <cstdint>

#include "../common/conv_index.h"
#include "../common/loop.h"

namespace labops::ops::depthwise {

using conv::in_bounds;
using conv::input_coord;
using conv::output_coord;

// Every size of one depthwise convolution. Built (and checked) once by the
// tensor-level code in depthwise_ops.h, then passed by value to kernels.
struct Geometry {
  int64_t batch, in_channels, multiplier, out_channels;
  int64_t in_h, in_w, out_h, out_w;
  int64_t k_h, k_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;

  LABOPS_HOST_DEVICE int64_t taps() const { return k_h * k_w; }
  LABOPS_HOST_DEVICE int64_t in_plane() const { return in_h * in_w; }
  LABOPS_HOST_DEVICE int64_t out_plane() const { return out_h * out_w; }
};

// Offsets of the (n, channel) planes.
LABOPS_HOST_DEVICE int64_t input_plane_offset(int64_t n, int64_t c, const Geometry& g) {
  return (n * g.in_channels + c) * g.in_plane();
}
LABOPS_HOST_DEVICE int64_t output_plane_offset(int64_t n, int64_t oc, const Geometry& g) {
  return (n * g.out_channels + oc) * g.out_plane();
}

// The one multiply-accumulate of the layer, in the accumulation type
// (float for half/bfloat16 data).
template <typename acc_t, typename a_t, typename b_t>
LABOPS_HOST_DEVICE void mac(acc_t& acc, a_t a, b_t b) {
  acc += static_cast<acc_t>(a) * static_cast<acc_t>(b);
}

// ---- updateOutput: one output element from its flat index (n, oc, oh, ow) ----
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t forward_at(int64_t index, const scalar_t* x, const scalar_t* w,
                                   const scalar_t* bias, const Geometry& g) {
  const int64_t ow = index % g.out_w;
  int64_t rest = index / g.out_w;
  const int64_t oh = rest % g.out_h;
  rest /= g.out_h;
  const int64_t oc = rest % g.out_channels;
  const int64_t n = rest / g.out_channels;
  const scalar_t* plane = x + input_plane_offset(n, oc / g.multiplier, g);
  const scalar_t* wk = w + oc * g.taps();
  acc_t acc = bias ? static_cast<acc_t>(bias[oc]) : acc_t(0);
  for (int64_t kh = 0; kh < g.k_h; ++kh) {
    const int64_t ih = input_coord(oh, kh, g.stride_h, g.pad_h, g.dil_h);
    if (ih < 0 || ih >= g.in_h) continue;  // zero padding
    for (int64_t kw = 0; kw < g.k_w; ++kw) {
      const int64_t iw = input_coord(ow, kw, g.stride_w, g.pad_w, g.dil_w);
      if (iw < 0 || iw >= g.in_w) continue;
      mac(acc, wk[kh * g.k_w + kw], plane[ih * g.in_w + iw]);
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
  const int64_t iw = index % g.in_w;
  int64_t rest = index / g.in_w;
  const int64_t ih = rest % g.in_h;
  rest /= g.in_h;
  const int64_t c = rest % g.in_channels;
  const int64_t n = rest / g.in_channels;
  acc_t acc = acc_t(0);
  for (int64_t j = 0; j < g.multiplier; ++j) {
    const int64_t oc = c * g.multiplier + j;
    const scalar_t* plane = grad_out + output_plane_offset(n, oc, g);
    const scalar_t* wk = w + oc * g.taps();
    for (int64_t kh = 0; kh < g.k_h; ++kh) {
      const int64_t oh = output_coord(ih, kh, g.stride_h, g.pad_h, g.dil_h, g.out_h);
      if (oh < 0) continue;
      for (int64_t kw = 0; kw < g.k_w; ++kw) {
        const int64_t ow = output_coord(iw, kw, g.stride_w, g.pad_w, g.dil_w, g.out_w);
        if (ow < 0) continue;
        mac(acc, wk[kh * g.k_w + kw], plane[oh * g.out_w + ow]);
      }
    }
  }
  return acc;
}

// ---- accGradParameters: one term of grad_w[oc, kh, kw] ----
// The contribution of output position (n, oh, ow) of channel oc to tap
// (kh, kw): grad_out * the input that tap read, or nothing in the padding.
// A reduction over every (n, oh, ow) of these is the weight gradient.
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE void backward_weight_term(acc_t& acc, const scalar_t* grad_out,
                                             const scalar_t* x, int64_t n, int64_t oc, int64_t oh,
                                             int64_t ow, int64_t kh, int64_t kw, const Geometry& g) {
  const int64_t ih = input_coord(oh, kh, g.stride_h, g.pad_h, g.dil_h);
  const int64_t iw = input_coord(ow, kw, g.stride_w, g.pad_w, g.dil_w);
  if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) return;
  mac(acc, grad_out[output_plane_offset(n, oc, g) + oh * g.out_w + ow],
      x[input_plane_offset(n, oc / g.multiplier, g) + ih * g.in_w + iw]);
}

}  // namespace labops::ops::depthwise
