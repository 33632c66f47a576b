// Fresh tensors straight from their device's allocator, for the tensors an op allocates on every call.
//
// at::empty goes through the dispatcher twice (BackendSelect picks the device from the options,
// then that device's kernel runs). Native ops skip both: a structured kernel allocates its output
// with at::detail::empty_cuda / empty_cpu. On the H100's host the detour is about a microsecond per
// tensor, a share of a tiny call that tools/host_time.py sees (--profile fwd lists it as aten::empty).
#pragma once

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#if defined(LABOPS_WITH_CUDA)  // set by labops/_build.py for every file of a build with CUDA kernels
#include <ATen/cuda/EmptyTensor.h>
#endif

namespace labops {

// at::empty(sizes, options): the same tensor (dtype, device, memory format), the dispatcher skipped.
inline at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
#if defined(LABOPS_WITH_CUDA)
  if (options.device().is_cuda()) return at::detail::empty_cuda(sizes, options);
#endif
  if (options.device().is_cpu()) return at::detail::empty_cpu(sizes, options);
  return at::empty(sizes, options);  // another device (meta, ...): through the dispatcher
}

inline at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options, at::MemoryFormat format) {
  return empty(sizes, options.memory_format(format));
}

}  // namespace labops
