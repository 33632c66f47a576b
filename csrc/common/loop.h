// The two macros every labops kernel is built from.
//
// LABOPS_HOST_DEVICE marks a function that is compiled for both the CPU and
// the GPU, so one body of layer math serves both launchers.
//
// LABOPS_KERNEL_LOOP is Caffe's CUDA_KERNEL_LOOP (the "grid-stride loop") with
// a 64-bit index, as ATen's CUDA_KERNEL_LOOP_TYPE does it: with a 32-bit `int`
// the index `i += blockDim.x * gridDim.x` overflows for tensors of more than
// 2^31 elements and the kernel silently skips or repeats work.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define LABOPS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LABOPS_HOST_DEVICE inline
#endif

#define LABOPS_KERNEL_LOOP(i, n)                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,   \
               labops_loop_stride_##i = static_cast<int64_t>(blockDim.x) * gridDim.x; \
       i < (n); i += labops_loop_stride_##i)

namespace labops {

// Threads per block: the one block size of every labops kernel, except where
// a kernel's shape asks for another (softmax's rows of a whole block,
// pooling's groups of up to 512 threads). 256 threads are 8 warps, and 8 such
// blocks fill the 2048 thread slots of an H100 multiprocessor when registers
// allow.
constexpr int kThreadsPerBlock = 256;
// At most 65535 blocks, gridDim.x's limit before compute capability 3.0.
// Caffe's CAFFE_GET_BLOCKS has no cap (one thread per element, always); we
// cap the grid to bound the launch, and the grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 65535;

// GET_BLOCKS: enough blocks of `threads` to give every element a thread,
// capped; past the cap each thread loops over several elements.
inline int64_t get_blocks(int64_t n, int64_t threads = kThreadsPerBlock) {
  return std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, kMaxBlocks));
}

}  // namespace labops
