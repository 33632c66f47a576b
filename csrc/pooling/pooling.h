// Global average pooling (Torch7's SpatialGlobalAveragePooling): the math of
// one plane, shared by pooling/cpu.cpp and pooling/cuda.cu. The tensor-level
// entry points are in pooling_ops.h.
//
// The input is viewed as `planes` contiguous planes of hw = H*W elements
// (planes = N*C, or C for a 3-D input); plane p is x[p*hw, (p+1)*hw).
//   updateOutput:    y[p] = (1/hw) * sum_k x[p*hw + k]
//   updateGradInput: grad_input[i] = grad_output[i / hw] / hw
// Sums run in at::opmath_type (float for half/bfloat16): a half sum of a
// 56x56 plane would round away most of its bits, and dividing in half
// loses more.
#pragma once

#include <cstdint>

#include "../common/loop.h"

namespace labops::pooling {

// ---- the math: one plane, one element ----

// Which plane element i belongs to.
template <typename index_t>
LABOPS_HOST_DEVICE index_t gap_plane_of(index_t i, index_t hw) {
  return i / hw;
}

// The running sum's update with one input value (or one SIMD vector of them).
template <typename acc_t, typename T>
LABOPS_HOST_DEVICE acc_t gap_accumulate(acc_t sum, T x) {
  return sum + static_cast<acc_t>(x);
}

// Sum of plane[begin], plane[begin + step], ... below end: the whole plane
// for one CPU loop (begin 0, step 1), one lane's share for a GPU thread
// group (begin = lane, step = group size).
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t gap_sum_strided(const scalar_t* plane, int64_t begin, int64_t end,
                                         int64_t step) {
  acc_t sum = acc_t(0);
  for (int64_t k = begin; k < end; k += step) sum = gap_accumulate(sum, plane[k]);
  return sum;
}

// updateOutput for one plane, from its sum: divide in acc_t, never in half.
template <typename acc_t>
LABOPS_HOST_DEVICE acc_t gap_mean(acc_t sum, int64_t hw) {
  return sum / static_cast<acc_t>(hw);
}

// updateGradInput for every element of one plane: each of the hw inputs
// contributed 1/hw of the mean, so each gets grad_output / hw.
template <typename acc_t, typename scalar_t>
LABOPS_HOST_DEVICE acc_t gap_grad_input(scalar_t grad_output_of_plane, int64_t hw) {
  return static_cast<acc_t>(grad_output_of_plane) / static_cast<acc_t>(hw);
}

}  // namespace labops::pooling
