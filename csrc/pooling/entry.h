// Global average pooling: the tensor-level entry points, written once for
// both devices (pooling/cpu.cpp, pooling/cuda.cu); the math is pooling.h's.
//
// Launcher provides
//   forward(const scalar_t* x, scalar_t* y, int64_t planes, int64_t hw, int forced)
//   backward(const scalar_t* grad_output, scalar_t* grad_input, int64_t planes, int64_t hw)
// for hw >= 1 and planes >= 1; `forced` is the forward's forced rung (0: the launcher picks),
// see forward_ladder below.
#pragma once

#include <cstdint>
#include <limits>

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/DimVector.h>
#include <c10/util/Exception.h>

#include "../common/check.h"
#include "../common/empty.h"
#include "../common/ladder.h"
#include "pooling.h"

namespace labops::pooling {

// The forward's rungs (Note [the ladder], common/ladder.h), rung 1 the textbook body. Which rung
// runs by default: labops/ladder.py DEFAULTS, docs/layers/pooling.md "The ladder".
inline ladder::Ladder& forward_ladder() {
  static ladder::Ladder rungs(
      "pooling", "global_avg_pool2d",
      {{"textbook", "gap_sum_strided over each plane, one element at a time; planes shared among the threads"},
       {"simd4", "four at::vec accumulators per plane, several adds in flight (float32 and float64 only)"}},
      {{"textbook", "one thread per plane, grid-stride loop over planes: a warp's loads lie H*W elements apart"},
       {"plane_groups", "G threads per plane (Note [plane groups]), one element per load, then group_sum"},
       {"vector_loads", "plane groups loading 16-byte packs, neighbouring planes' elements masked (x 16-byte aligned)"},
       {"whole_packs", "plane groups on planes of whole packs: no masks, 32-bit indices (x aligned, H*W a multiple "
                       "of the pack)"}});
  return rungs;
}

inline void check_gap_input_rank(int64_t dim, const char* op, const char* arg) {
  LABOPS_CHECK(dim == 3 || dim == 4, "labops.", op, ": ", arg,
                    " must be a 3-D (C, H, W) or 4-D (N, C, H, W) tensor, got ", dim, "-D");
}

// ---- the rules and the output's shape, stated once ----
// Every call checks its arguments here first; the Meta kernels (struct Meta below), which fake tensors run
// under torch.compile, are these functions alone. Sizes are SymInts: under dynamic shapes they are
// symbols, and a comparison becomes a guard on them.

// `sizes` with H and W (the last two) set to 1: the forward's output, the backward's grad_output.
inline c10::SymDimVector gap_pooled_size(c10::SymIntArrayRef sizes) {
  c10::SymDimVector out(sizes.begin(), sizes.end() - 2);
  out.append({c10::SymInt(1), c10::SymInt(1)});
  return out;
}

// global_avg_pool2d: ([N,] C, H, W) -> ([N,] C, 1, 1).
inline c10::SymDimVector global_avg_pool2d_output_size(const at::Tensor& x) {
  check_floating(x, "global_avg_pool2d", "x");
  check_gap_input_rank(x.dim(), "global_avg_pool2d", "x");
  return gap_pooled_size(x.sym_sizes());
}

// global_avg_pool2d_backward: grad_output ([N,] C, 1, 1) -> a gradient of input_size ([N,] C, H, W).
inline void check_global_avg_pool2d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef input_size) {
  const char* op = "global_avg_pool2d_backward";
  check_floating(grad_output, op, "grad_output");
  check_gap_input_rank(static_cast<int64_t>(input_size.size()), op, "input_size");
  for (const c10::SymInt& s : input_size) {
    LABOPS_CHECK(s >= 0, "labops.", op, ": input_size must not be negative, got ", input_size);
  }
  const c10::SymDimVector expected = gap_pooled_size(input_size);
  LABOPS_CHECK(grad_output.sym_sizes() == c10::SymIntArrayRef(expected), "labops.", op,
                    ": grad_output must have shape ", c10::SymIntArrayRef(expected),
                    " (input_size with H and W set to 1), got ", grad_output.sym_sizes());
}

// ---- the Meta kernels ----
struct Meta {
  static at::Tensor global_avg_pool2d(const at::Tensor& x) {
    return at::empty_symint(global_avg_pool2d_output_size(x), x.options());
  }

  static at::Tensor global_avg_pool2d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef input_size) {
    check_global_avg_pool2d_backward(grad_output, input_size);
    return at::empty_symint(input_size, grad_output.options());
  }
};

template <typename Launcher>
struct Entry {
  static at::Tensor global_avg_pool2d(const at::Tensor& x) {
    const c10::SymDimVector out_size = global_avg_pool2d_output_size(x);
    c10::OptionalDeviceGuard guard(x.device());
    at::Tensor out = labops::empty(C10_AS_INTARRAYREF_SLOW(out_size), x.options());
    const int64_t hw = x.size(-2) * x.size(-1);
    const int64_t planes = out.numel();
    if (planes == 0) return out;
    if (hw == 0) return out.fill_(std::numeric_limits<double>::quiet_NaN());  // mean of nothing, as torch.mean
    at::Tensor xc = x.contiguous();
    const int forced = forward_ladder().forced();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "labops_gap_forward", [&] {
      Launcher::forward(xc.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), planes, hw, forced);
    });
    return out;
  }

  static at::Tensor global_avg_pool2d_backward(const at::Tensor& grad_output, at::IntArrayRef input_size) {
    // input_size is SymInt[]: this kernel gets concrete ints from the dispatcher, SymInts as they are (no copy).
    check_global_avg_pool2d_backward(grad_output, c10::fromIntArrayRefSlow(input_size));
    c10::OptionalDeviceGuard guard(grad_output.device());
    at::Tensor grad_input = labops::empty(input_size, grad_output.options());
    const int64_t hw = input_size[input_size.size() - 2] * input_size[input_size.size() - 1];
    const int64_t planes = grad_output.numel();
    if (planes == 0 || hw == 0) return grad_input;
    at::Tensor go = grad_output.contiguous();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, go.scalar_type(), "labops_gap_backward", [&] {
      Launcher::backward(go.const_data_ptr<scalar_t>(), grad_input.mutable_data_ptr<scalar_t>(), planes, hw);
    });
    return grad_input;
  }
};

// Every op of the layer with its kernel in `Kernels`: Entry<Launcher> on a device (cpu.cpp, cuda.cu),
// Meta for fake tensors (register.cpp). One list, so no op lacks a kernel on one dispatch key.
template <typename Kernels, typename Module>
void register_kernels(Module& m) {
  m.impl("global_avg_pool2d", &Kernels::global_avg_pool2d)
      .impl("global_avg_pool2d_backward", &Kernels::global_avg_pool2d_backward);
}

}  // namespace labops::pooling
