// The tensor side of an elementwise op, shared by CPU and CUDA: make inputs
// contiguous, allocate the output, pick the dtype, and hand raw pointers to
// Launcher::run (common/cpu/elementwise.h or common/cuda/elementwise.cuh), which loops the
// body over every element.
#pragma once

#include <array>

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

#include "empty.h"

namespace labops {

// out = body(a) or body(a, b); every input has a's shape, dtype and device.
template <typename Launcher, typename Body, typename... Inputs>
at::Tensor run_elementwise(Body body, const at::Tensor& a, const Inputs&... rest) {
  c10::OptionalDeviceGuard guard(a.device());
  std::array<at::Tensor, 1 + sizeof...(Inputs)> ins{a.contiguous(), rest.contiguous()...};
  at::Tensor out = labops::empty(a.sizes(), a.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "labops_elementwise", [&] {
    std::array<const scalar_t*, 1 + sizeof...(Inputs)> ptrs;
    for (size_t k = 0; k < ins.size(); ++k) ptrs[k] = ins[k].template const_data_ptr<scalar_t>();
    Launcher::run(ptrs, out.template mutable_data_ptr<scalar_t>(), a.numel(), body);
  });
  return out;
}

}  // namespace labops
