// The index math of a 2-D convolution along one axis, shared by every
// convolution layer (conv2d_mm/conv2d_mm.h's im2col / col2im, depthwise/depthwise.h).
//
// Along one axis, output position o reads input coordinate
//
//     i = o * s - p + k * d        (s stride, p padding, d dilation, k the tap)
//
// and a tap whose i falls outside [0, in) reads the zero padding. Everything
// here is that one equation, solved in the direction a kernel needs:
//   input_coord        o, k -> i           (forward, im2col: a thread owns an output)
//   output_coord       i, k -> o or -1     (gather: a thread owns an input, col2im,
//                                           depthwise backward-input)
//   tap_output_range   k -> the outputs [lo, hi) whose tap k lands inside the input
//                                          (row loops that skip the padding)
//   kernel_extent      how many input positions a dilated kernel spans
//   output_size        how many window positions fit
// Index helpers are templates on the index type so a CUDA kernel can run
// them in 32-bit when the sizes allow it. The two size formulas are templates
// too: int64_t for the kernels and the eager entry points, c10::SymInt for the
// rules the Meta kernels run under torch.compile (conv2d_mm/entry.h), where a
// size may be a symbol; one formula either way.
#pragma once

#include <cstdint>

#include "loop.h"

namespace labops::conv {

// The size formulas' c10::SymInt instantiations run on the host only: nv_exec_check_disable keeps
// nvcc from warning that they call host functions from a __host__ __device__ function.

// The input positions a kernel of k taps at dilation d spans: d * (k - 1) + 1.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <typename T>
LABOPS_HOST_DEVICE T kernel_extent(T k, T d) {
  return d * (k - 1) + 1;
}

// Output length along one axis: how many window positions fit in the padded
// input. Zero (not a negative number) when the dilated kernel is longer than
// the padded input; the entry points reject that case with a message.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <typename T>
LABOPS_HOST_DEVICE T output_size(T in, T k, T s, T p, T d) {
  const T room = in + 2 * p - kernel_extent(k, d);  // last valid start position
  return room < 0 ? T(0) : room / s + 1;
}

// 0 <= i < n: the coordinate is inside the input (not in the zero padding).
template <typename index_t>
LABOPS_HOST_DEVICE bool in_bounds(index_t i, index_t n) {
  return i >= 0 && i < n;
}

// Forward direction: the input coordinate that tap k of output o reads.
template <typename index_t>
LABOPS_HOST_DEVICE index_t input_coord(index_t o, index_t k, index_t s, index_t p, index_t d) {
  return o * s - p + k * d;
}

// Gather direction: the output o whose tap k reads input i, or -1 when there
// is none (i + p - k*d is negative, not a multiple of the stride, or o >= out).
// The division is skipped at stride 1: a 64-bit division is a subroutine call
// on the GPU. (nvcc sm_90: this form keeps col2im_kernel free of spills; the
// remainder form `t % s != 0` would keep depthwise's generic backward-input
// kernel free of them instead; col2im runs for every conv2d_mm backward, that
// kernel only for shapes without a tiled path.)
template <typename index_t>
LABOPS_HOST_DEVICE index_t output_coord(index_t i, index_t k, index_t s, index_t p, index_t d,
                                        index_t out) {
  const index_t t = i + p - k * d;  // = o * s
  if (t < 0) return index_t(-1);
  const index_t o = s == 1 ? t : t / s;
  return (o * s == t && o < out) ? o : index_t(-1);
}

// A half-open range [lo, hi) of positions along one axis; empty when hi == lo.
template <typename index_t>
struct Range {
  index_t lo, hi;
  LABOPS_HOST_DEVICE bool empty() const { return hi <= lo; }
};

// The outputs [lo, hi) whose tap k reads inside the input [0, in): solve
// 0 <= o*s - p + k*d <= in - 1 for o, clipped to [0, out). Outside it the tap
// reads padding, so a row loop runs over this range instead of testing every
// element.
template <typename index_t>
LABOPS_HOST_DEVICE Range<index_t> tap_output_range(index_t k, index_t s, index_t p, index_t d,
                                                   index_t in, index_t out) {
  const index_t shift = k * d - p;                             // input_coord(o) = o*s + shift
  index_t lo = shift >= 0 ? index_t(0) : (s - 1 - shift) / s;  // ceil(-shift / s)
  const index_t last = in - 1 - shift;                         // largest o*s allowed
  index_t hi = last < 0 ? index_t(0) : last / s + 1;
  if (hi > out) hi = out;
  if (lo > hi) lo = hi;
  return {lo, hi};
}

}  // namespace labops::conv
