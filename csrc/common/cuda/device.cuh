// Small facts about the current GPU and pointers, shared by every CUDA launcher.
#pragma once

#include <cstdint>

#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

namespace labops::cuda {

// The current device's index.
inline int current_device() {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Streaming multiprocessors on the current device (132 on an H100 SXM / H200). ATen reads each device's
// properties once and keeps them: a launcher may ask on every call.
inline int multiprocessor_count() {
  return at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
}

// The most shared memory one block may ask for on the current device (227 KB on an H100), kept by ATen too.
inline int64_t max_shared_bytes_per_block() {
  return static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin);
}

// Whether `ptr` may be read or written with `bytes`-wide vector accesses.
inline bool is_aligned(const void* ptr, size_t bytes = 16) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

}  // namespace labops::cuda
