// CUDA kernels for global average pooling.
//
// Forward: the textbook kernel (Torch7's, and native torch's on 7x7 planes)
// gives one thread a whole plane, so a warp reads 32 planes with a stride of
// hw elements between lanes and keeps little in flight. Here a group of G
// consecutive threads (4 ... 512, a power of two) shares one plane: lane l
// sums 16-byte packs l, l + G, l + 2G, ... (four loads in flight per trip),
// then the group adds its partial sums with warp shuffles (and shared memory
// when G spans several warps). G is picked so each lane loads about four
// packs: 7x7 float planes get G = 4 (8 planes per warp), 56x56 planes get a
// block each.
//
// Planes need not start on a 16-byte boundary (a 7x7 float plane is 196
// bytes): each group reads the aligned packs that cover its plane and masks
// the elements that belong to its neighbours. Reads stay inside the 16-byte
// chunk holding the tensor's last element. A tensor whose data pointer is
// not 16-byte aligned takes the same kernel with one-element packs.
//
// Backward writes grad_output[p] / hw over each plane: a broadcast, written
// as 16-byte packs by a grid-stride loop; the plane of a pack's first element
// comes from one 32-bit division (64-bit only for tensors of 2^31 elements
// or more), the rest by counting.
#include <algorithm>
#include <cstdint>
#include <limits>

#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../common/loop.h"
#include "../ops/pooling.h"
#include "device.cuh"

namespace labops::cuda {
namespace {

constexpr int kPackBytes = 16;
constexpr int kLoadsInFlight = 4;
constexpr int kBlock = 256;

template <typename scalar_t, int kVec>
struct alignas(sizeof(scalar_t) * kVec) Pack {
  scalar_t val[kVec];
};

// Sum of `value` over the G threads of each group (groups are aligned runs
// of G threads in the block). Every thread of the block must call it.
template <int G, typename acc_t>
__device__ __forceinline__ acc_t group_sum(acc_t value, acc_t* warp_sums) {
  constexpr int kWarpWidth = G < 32 ? G : 32;
#pragma unroll
  for (int offset = kWarpWidth / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  if constexpr (G > 32) {
    constexpr int kWarpsPerGroup = G / 32;
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) warp_sums[warp] = value;
    __syncthreads();
    const int first = (warp / kWarpsPerGroup) * kWarpsPerGroup;
    value = acc_t(0);
#pragma unroll
    for (int k = 0; k < kWarpsPerGroup; ++k) value += warp_sums[first + k];
    __syncthreads();  // warp_sums is reused by the next plane
  }
  return value;
}

template <typename scalar_t, int kVec, int G>
__global__ void __launch_bounds__(G > kBlock ? G : kBlock)
    gap_forward_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t planes, int64_t hw) {
  using acc_t = at::opmath_type<scalar_t>;
  using P = Pack<scalar_t, kVec>;
  constexpr int kThreads = G > kBlock ? G : kBlock;
  constexpr int kPlanesPerBlock = kThreads / G;
  __shared__ acc_t warp_sums[kThreads / 32];
  const int lane = threadIdx.x % G;
  const int group = threadIdx.x / G;
  const P* packs = reinterpret_cast<const P*>(x);

  // The loop bound is the same for the whole block (group_sum may sync).
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kPlanesPerBlock; base < planes;
       base += static_cast<int64_t>(gridDim.x) * kPlanesPerBlock) {
    const int64_t plane = base + group;
    acc_t sum = acc_t(0);
    if (plane < planes) {
      const int64_t start = plane * hw, end = start + hw;
      const int64_t last_pack = (end - 1) / kVec;
      for (int64_t q0 = start / kVec + lane; q0 <= last_pack; q0 += G * kLoadsInFlight) {
        P loaded[kLoadsInFlight];
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) {
          if (q0 + u * G <= last_pack) loaded[u] = packs[q0 + u * G];
        }
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) {
          const int64_t first_elem = (q0 + u * G) * kVec;
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            const int64_t e = first_elem + j;
            if (q0 + u * G <= last_pack && e >= start && e < end) {
              sum = ops::gap_accumulate(sum, loaded[u].val[j]);
            }
          }
        }
      }
    }
    sum = group_sum<G>(sum, warp_sums);
    if (lane == 0 && plane < planes) y[plane] = static_cast<scalar_t>(ops::gap_mean(sum, hw));
  }
}

template <typename scalar_t, typename index_t, int kVec>
__global__ void __launch_bounds__(kBlock)
    gap_backward_kernel(const scalar_t* __restrict__ grad_output, scalar_t* __restrict__ grad_input,
                        index_t n, index_t hw) {
  using acc_t = at::opmath_type<scalar_t>;
  using P = Pack<scalar_t, kVec>;
  const index_t n_packs = n / kVec;
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (index_t q = first; q < n_packs; q += stride) {
    const index_t i0 = q * kVec;
    index_t plane = ops::gap_plane_of(i0, hw);
    index_t offset = i0 - plane * hw;  // position inside the plane
    scalar_t value = static_cast<scalar_t>(ops::gap_grad_input<acc_t>(grad_output[plane], hw));
    P out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if (offset == hw) {  // crossed into the next plane
        ++plane;
        offset = 0;
        value = static_cast<scalar_t>(ops::gap_grad_input<acc_t>(grad_output[plane], hw));
      }
      out.val[j] = value;
      ++offset;
    }
    reinterpret_cast<P*>(grad_input)[q] = out;
  }
  for (index_t i = n_packs * kVec + first; i < n; i += stride) {  // fewer than kVec left
    grad_input[i] = static_cast<scalar_t>(ops::gap_grad_input<acc_t>(grad_output[ops::gap_plane_of(i, hw)], hw));
  }
}


template <typename scalar_t, int kVec, int G>
void launch_forward(const scalar_t* x, scalar_t* y, int64_t planes, int64_t hw, cudaStream_t stream) {
  constexpr int kThreads = G > kBlock ? G : kBlock;
  constexpr int kPlanesPerBlock = kThreads / G;
  const int64_t blocks = std::min<int64_t>((planes + kPlanesPerBlock - 1) / kPlanesPerBlock,
                                           std::numeric_limits<int32_t>::max());
  gap_forward_kernel<scalar_t, kVec, G><<<blocks, kThreads, 0, stream>>>(x, y, planes, hw);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, int kVec>
void forward_with_vec(const scalar_t* x, scalar_t* y, int64_t planes, int64_t hw, cudaStream_t stream) {
  // Packs touched per plane (one more when the plane straddles pack edges),
  // shared by the smallest group that gives each lane about four of them.
  const int64_t packs = (hw + kVec - 1) / kVec + (kVec > 1 ? 1 : 0);
  const int64_t want = (packs + kLoadsInFlight - 1) / kLoadsInFlight;
  if (want <= 4) return launch_forward<scalar_t, kVec, 4>(x, y, planes, hw, stream);
  if (want <= 8) return launch_forward<scalar_t, kVec, 8>(x, y, planes, hw, stream);
  if (want <= 16) return launch_forward<scalar_t, kVec, 16>(x, y, planes, hw, stream);
  if (want <= 32) return launch_forward<scalar_t, kVec, 32>(x, y, planes, hw, stream);
  if (want <= 64) return launch_forward<scalar_t, kVec, 64>(x, y, planes, hw, stream);
  if (want <= 128) return launch_forward<scalar_t, kVec, 128>(x, y, planes, hw, stream);
  if (want <= 256) return launch_forward<scalar_t, kVec, 256>(x, y, planes, hw, stream);
  return launch_forward<scalar_t, kVec, 512>(x, y, planes, hw, stream);
}

template <typename scalar_t, typename index_t>
void launch_backward(const scalar_t* go, scalar_t* gi, int64_t planes, int64_t hw, cudaStream_t stream) {
  constexpr int kVec = kPackBytes / sizeof(scalar_t);
  const int64_t n = planes * hw;
  const int64_t want = std::max<int64_t>(1, (n / kVec + kBlock - 1) / kBlock);
  const int64_t blocks = std::min<int64_t>(want, int64_t(multiprocessor_count()) * 16);
  gap_backward_kernel<scalar_t, index_t, kVec><<<blocks, kBlock, 0, stream>>>(
      go, gi, static_cast<index_t>(n), static_cast<index_t>(hw));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

struct PoolingLauncher {
  template <typename scalar_t>
  static void forward(const scalar_t* x, scalar_t* y, int64_t planes, int64_t hw) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    if (is_aligned(x, kPackBytes)) {
      forward_with_vec<scalar_t, kPackBytes / sizeof(scalar_t)>(x, y, planes, hw, stream);
    } else {
      forward_with_vec<scalar_t, 1>(x, y, planes, hw, stream);
    }
  }

  template <typename scalar_t>
  static void backward(const scalar_t* grad_output, scalar_t* grad_input, int64_t planes, int64_t hw) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    // grad_input is freshly allocated, so 16-byte aligned.
    if (planes * hw + kPackBytes < std::numeric_limits<int32_t>::max()) {
      launch_backward<scalar_t, uint32_t>(grad_output, grad_input, planes, hw, stream);
    } else {
      launch_backward<scalar_t, uint64_t>(grad_output, grad_input, planes, hw, stream);
    }
  }
};

}  // namespace
}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::ops::PoolingOps<labops::cuda::PoolingLauncher>::register_kernels(m);
}
