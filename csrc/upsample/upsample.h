// Bilinear upsampling (NCHW): the math of the layer, in one place.
//
// Everything here is per coordinate or per element, marked LABOPS_HOST_DEVICE,
// and called by both upsample/cpu.cpp and upsample/cuda.cu, forward and both
// backwards. The one function that decides "which input pixels does output
// coordinate x_out read, and with which weights" is source_taps(); everything
// else is built on it, so the three coordinate modes cannot drift apart between
// devices or between forward and backward (the model is ATen's UpSample.h).
//
// T is the "opmath" type the arithmetic runs in: float for float/half/bfloat16
// tensors, double for double tensors (what PyTorch itself uses, so float32
// results match F.interpolate to the last bit or two).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <c10/util/Exception.h>

#include "../common/check.h"
#include "../common/loop.h"

namespace labops::upsample {

// How an output index maps back to a source coordinate (ONNX Resize's names).
enum class CoordMode : int {
  HalfPixel,     // src = (x + 0.5) * scale - 0.5, clamped at 0: PyTorch align_corners=False,
                 // TF half_pixel_centers=True
  AlignCorners,  // src = x * (in - 1) / (out - 1): corner pixels' centres line up
  Asymmetric,    // src = x * scale: TF1 / TFLite resize_bilinear's default
};

inline CoordMode parse_coordinate_mode(std::string_view name, const char* op) {
  if (name == "half_pixel") return CoordMode::HalfPixel;
  if (name == "align_corners") return CoordMode::AlignCorners;
  if (name == "asymmetric") return CoordMode::Asymmetric;
  LABOPS_CHECK(false, "labops.", op,
                    ": coordinate_mode must be 'half_pixel', 'align_corners' or 'asymmetric', got '",
                    name, "'");
}

// One spatial dimension of the resampling.
template <typename T>
struct Axis {
  int64_t in;   // input size along this dimension
  int64_t out;  // output size
  T scale;      // source step per output step (see make_axis)
  CoordMode mode;
};

// The scale as PyTorch's area_pixel_compute_scale computes it:
//   align_corners: (in - 1) / (out - 1), or 0 when out == 1 (every output reads pixel 0);
//   otherwise:     1 / scale_factor when the caller gave a scale factor, else in / out.
// The two differ when in * scale_factor is not an integer: F.interpolate(x,
// scale_factor=1.7) makes floor(1.7 * in) outputs but steps by 1/1.7, not by
// in / floor(1.7 * in). Computed in T, as PyTorch does, to match it exactly.
template <typename T>
inline Axis<T> make_axis(int64_t in, int64_t out, CoordMode mode, std::optional<double> scale_factor) {
  T scale;
  if (mode == CoordMode::AlignCorners) {
    scale = out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  } else if (scale_factor.has_value() && *scale_factor > 0) {
    scale = static_cast<T>(1.0 / *scale_factor);
  } else {
    scale = static_cast<T>(in) / static_cast<T>(out);
  }
  return Axis<T>{in, out, scale, mode};
}

// The two input indices output coordinate x_out reads, and the weight of the
// second: value = (1 - lambda) * in[i0] + lambda * in[i1].
template <typename T>
struct Taps {
  int64_t i0;
  int64_t i1;
  T lambda;
};

template <typename T>
LABOPS_HOST_DEVICE T source_coordinate(int64_t x_out, const Axis<T>& a) {
  if (a.mode == CoordMode::HalfPixel) {
    T src = a.scale * (static_cast<T>(x_out) + T(0.5)) - T(0.5);
    return src < T(0) ? T(0) : src;  // the first half output pixel reads pixel 0 only
  }
  // align_corners and asymmetric differ only in their scale.
  return a.scale * static_cast<T>(x_out);
}

// i0 = floor(src) (src >= 0, so truncation is floor), i1 = min(i0 + 1, in - 1).
// The clamp of i0 only guards rounding at the far edge; every mode keeps
// src < in in exact arithmetic. Past in - 1 both taps are the last pixel, so
// lambda does not matter there.
template <typename T>
LABOPS_HOST_DEVICE Taps<T> source_taps(int64_t x_out, const Axis<T>& a) {
  T src = source_coordinate(x_out, a);
  int64_t i0 = static_cast<int64_t>(src);
  if (i0 > a.in - 1) i0 = a.in - 1;
  int64_t i1 = i0 + 1 < a.in ? i0 + 1 : a.in - 1;
  return Taps<T>{i0, i1, src - static_cast<T>(i0)};
}

// The weight with which an output coordinate (its taps) reads input index i:
// this is one entry of the interpolation matrix A (out x in), y = A_h x A_w^T.
template <typename T>
LABOPS_HOST_DEVICE T tap_weight(const Taps<T>& t, int64_t i) {
  return (t.i0 == i ? T(1) - t.lambda : T(0)) + (t.i1 == i ? t.lambda : T(0));
}

// One output value from its four neighbours: interpolate along w, then along h.
template <typename T>
LABOPS_HOST_DEVICE T bilinear_blend(T top0, T top1, T bottom0, T bottom1, T lambda_h, T lambda_w) {
  T top = (T(1) - lambda_w) * top0 + lambda_w * top1;
  T bottom = (T(1) - lambda_w) * bottom0 + lambda_w * bottom1;
  return (T(1) - lambda_h) * top + lambda_h * bottom;
}

// ---- forward (updateOutput) ----

// One output pixel from its taps; `plane` is one (n, c) input plane.
template <typename T, typename scalar_t>
LABOPS_HOST_DEVICE T bilinear_at(const scalar_t* plane, int64_t in_w, const Taps<T>& th, const Taps<T>& tw) {
  const scalar_t* top = plane + th.i0 * in_w;
  const scalar_t* bottom = plane + th.i1 * in_w;
  return bilinear_blend(static_cast<T>(top[tw.i0]), static_cast<T>(top[tw.i1]),
                        static_cast<T>(bottom[tw.i0]), static_cast<T>(bottom[tw.i1]), th.lambda,
                        tw.lambda);
}

// Output element `index` of the contiguous (N*C, out_h, out_w) output.
template <typename T, typename scalar_t>
LABOPS_HOST_DEVICE T forward_at(int64_t index, const scalar_t* x, const Axis<T>& ah, const Axis<T>& aw) {
  int64_t ox = index % aw.out;
  int64_t rest = index / aw.out;
  int64_t oy = rest % ah.out;
  int64_t plane = rest / ah.out;
  return bilinear_at(x + plane * ah.in * aw.in, aw.in, source_taps(oy, ah), source_taps(ox, aw));
}

// ---- backward (updateGradInput), form (a): scatter ----
// Each output pixel adds its gradient, times the four weights, into the four
// input pixels it read. Two outputs share input pixels, so on a GPU the adds
// race and need atomics; the order of the float adds then varies from run to
// run (non-deterministic). `add(offset, value)` does the add.
// The four adds of one output pixel whose taps are th, tw; plane_offset is
// its (n, c) plane's first element in grad_in.
template <typename T, typename Add>
LABOPS_HOST_DEVICE void scatter_to_taps(T grad, const Taps<T>& th, const Taps<T>& tw, int64_t plane_offset,
                                        int64_t in_w, Add& add) {
  const int64_t top = plane_offset + th.i0 * in_w;
  const int64_t bottom = plane_offset + th.i1 * in_w;
  const T g_top = (T(1) - th.lambda) * grad;
  const T g_bottom = th.lambda * grad;
  add(top + tw.i0, (T(1) - tw.lambda) * g_top);
  add(top + tw.i1, tw.lambda * g_top);
  add(bottom + tw.i0, (T(1) - tw.lambda) * g_bottom);
  add(bottom + tw.i1, tw.lambda * g_bottom);
}

// Output element `index` of the contiguous (N*C, out_h, out_w) grad_output.
template <typename T, typename Add>
LABOPS_HOST_DEVICE void scatter_at(int64_t index, T grad, const Axis<T>& ah, const Axis<T>& aw, Add& add) {
  int64_t ox = index % aw.out;
  int64_t rest = index / aw.out;
  int64_t oy = rest % ah.out;
  int64_t plane = rest / ah.out;
  scatter_to_taps(grad, source_taps(oy, ah), source_taps(ox, aw), plane * ah.in * aw.in, aw.in, add);
}

// ---- backward, form (b): gather ----
// grad_in = A_h^T G A_w. Input index i is read by the outputs whose i0 is
// i - 1 or i (i1 = i0 + 1, or i0 itself at the last pixel), and i0 never
// decreases as the output index grows, so those outputs form one contiguous
// range. Each input pixel sums its range: no two threads write the same
// place, no atomics, the same result on every run.
struct Range {
  int64_t begin;
  int64_t end;
};

// The first output index whose i0 is >= k (a.out if there is none).
// Inverts the affine map src(x) = scale * x + offset for a guess, then steps
// to the exact answer with source_taps itself, so the ranges agree bit for bit
// with what the forward reads.
template <typename T>
LABOPS_HOST_DEVICE int64_t first_output_from(int64_t k, const Axis<T>& a) {
  if (k <= 0) return 0;
  if (k >= a.in || !(a.scale > T(0))) return a.out;  // i0 <= in - 1; scale 0 reads pixel 0 only
  T guess = a.mode == CoordMode::HalfPixel ? (static_cast<T>(k) + T(0.5)) / a.scale - T(0.5)
                                           : static_cast<T>(k) / a.scale;
  guess = guess < T(0) ? T(0) : (guess > static_cast<T>(a.out) ? static_cast<T>(a.out) : guess);
  int64_t x = static_cast<int64_t>(guess);
  while (x > 0 && source_taps(x - 1, a).i0 >= k) --x;
  while (x < a.out && source_taps(x, a).i0 < k) ++x;
  return x;
}

// The contiguous range of output indices that read input index i.
template <typename T>
LABOPS_HOST_DEVICE Range outputs_reading(int64_t i, const Axis<T>& a) {
  return Range{first_output_from(i - 1, a), first_output_from(i + 1, a)};
}

// sum over the outputs x that read input column w of weight(x, w) * row[x]:
// the second half of the separable gather (row = one output row, or a row of
// A_h^T G already contracted along h).
template <typename T, typename Row>
LABOPS_HOST_DEVICE T column_gather(int64_t w, const Row* row, const Axis<T>& aw) {
  Range r = outputs_reading(w, aw);
  T acc = T(0);
  for (int64_t x = r.begin; x < r.end; ++x) {
    acc += tap_weight(source_taps(x, aw), w) * static_cast<T>(row[x]);
  }
  return acc;
}

// Input-gradient element `index` of the contiguous (N*C, in_h, in_w) result,
// straight from grad_output (rows, then columns). The GPU uses it when an
// output row is too wide for shared memory; the staged kernels compute the same
// sum, contracted along h first.
template <typename T, typename scalar_t>
LABOPS_HOST_DEVICE T gather_at(int64_t index, const scalar_t* grad_out, const Axis<T>& ah,
                               const Axis<T>& aw) {
  int64_t w = index % aw.in;
  int64_t rest = index / aw.in;
  int64_t h = rest % ah.in;
  int64_t plane = rest / ah.in;
  const scalar_t* g = grad_out + plane * ah.out * aw.out;
  Range rows = outputs_reading(h, ah);
  T acc = T(0);
  for (int64_t y = rows.begin; y < rows.end; ++y) {
    T wy = tap_weight(source_taps(y, ah), h);
    if (wy != T(0)) acc += wy * column_gather(w, g + y * aw.out, aw);
  }
  return acc;
}

}  // namespace labops::upsample
