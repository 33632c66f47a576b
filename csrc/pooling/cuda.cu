// CUDA kernels for global average pooling: the bodies of pooling/pooling.h, the
// entry points of pooling/entry.h. The forward's rungs (forward_ladder in
// entry.h, Note [the ladder] in common/ladder.h):
//   1 textbook      gap_forward_textbook_kernel: one thread per plane;
//   2 plane_groups  gap_forward_kernel, one element per load (x not 16-byte aligned);
//   3 vector_loads  gap_forward_kernel, 16-byte packs, masked (x aligned);
//   4 whole_packs   gap_forward_kernel, 16-byte packs, no masks (x aligned, H*W % pack == 0).
// See Note [plane groups] for rungs 2-4 and Note [broadcast backward] for the backward.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../common/loop.h"
#include "entry.h"
#include "../common/cuda/device.cuh"
#include "../common/cuda/reduce.cuh"
#include "../common/cuda/vec.cuh"

namespace labops::cuda {
namespace {

constexpr int kLoadsInFlight = 4;

// Note [plane groups]
// The textbook kernel (Torch7's, and native torch's on 7x7 planes) gives one
// thread a whole plane, so a warp reads 32 planes with a stride of hw
// elements between lanes and keeps little in flight. Here a group of G
// consecutive threads (4 ... 512, a power of two) shares one plane: lane l
// sums 16-byte packs l, l + G, l + 2G, ... (kLoadsInFlight loads in flight
// per trip), then the group adds its partial sums (group_sum, reduce.cuh).
// forward_with_vec picks G so each lane loads about four packs: 7x7 float
// planes get G = 4 (8 planes per warp), 56x56 planes get a block each.
//
// Planes need not start on a 16-byte boundary (a 7x7 float plane is 196
// bytes): each group reads the aligned packs that cover its plane and masks
// the elements that belong to its neighbours. Reads stay inside the 16-byte
// chunk holding the tensor's last element. A tensor whose data pointer is
// not 16-byte aligned takes the same kernel with one-element packs. When hw
// is a multiple of the pack (float32 14x14 and 56x56 planes; in float16,
// 8-element packs, 56x56 but not 14x14) no pack is shared and
// lane_sum_whole_packs skips the masks: on an H100 that took
// 256x512x14x14 float32 from 82 % to 96 % of copy bandwidth (graph timing).

// Rung 1, the textbook: thread p sums plane p with pooling.h's loop, as the CPU's
// rung 1 does; a grid-stride loop covers any number of planes. Lanes of a warp
// read addresses H*W elements apart, so each load of a warp touches 32 cache
// lines: what Note [plane groups] fixes.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    gap_forward_textbook_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t planes, int64_t hw) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(p, planes) {
    y[p] = static_cast<scalar_t>(pooling::gap_mean(pooling::gap_sum_strided<acc_t>(x + p * hw, 0, hw, 1), hw));
  }
}

// Lane `lane`'s share of plane `plane`'s sum, in general: the packs that cover
// the plane, elements of neighbouring planes masked.
template <typename scalar_t, int kVec, int G>
__device__ __forceinline__ at::opmath_type<scalar_t> lane_sum_masked(const scalar_t* __restrict__ x,
                                                                     int64_t plane, int64_t hw, int lane) {
  using acc_t = at::opmath_type<scalar_t>;
  using P = Pack<scalar_t, kVec>;
  acc_t sum = acc_t(0);
  const int64_t start = plane * hw, end = start + hw;
  const int64_t last_pack = (end - 1) / kVec;
  for (int64_t q0 = start / kVec + lane; q0 <= last_pack; q0 += G * kLoadsInFlight) {
    P loaded[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      if (q0 + u * G <= last_pack) loaded[u] = load_pack<kVec>(x, q0 + u * G);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t first_elem = (q0 + u * G) * kVec;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const int64_t e = first_elem + j;
        if (q0 + u * G <= last_pack && e >= start && e < end) sum = pooling::gap_accumulate(sum, loaded[u].val[j]);
      }
    }
  }
  return sum;
}

// The same share when every plane starts on a pack boundary (hw a multiple of
// kVec: float32 14x14 and 56x56 planes, float16 56x56): each pack belongs
// to one plane, so nothing is masked, and pack indices are index_t (32-bit when the
// tensor allows). Fewer registers, so twice the warps per multiprocessor keep
// loads in flight.
template <typename scalar_t, int kVec, int G, typename index_t>
__device__ __forceinline__ at::opmath_type<scalar_t> lane_sum_whole_packs(const scalar_t* __restrict__ x,
                                                                          index_t plane, index_t packs_per_plane,
                                                                          int lane) {
  using acc_t = at::opmath_type<scalar_t>;
  using P = Pack<scalar_t, kVec>;
  acc_t sum = acc_t(0);
  const index_t first = plane * packs_per_plane;
  for (index_t q = lane; q < packs_per_plane; q += G * kLoadsInFlight) {
    P loaded[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      if (q + u * G < packs_per_plane) loaded[u] = load_pack<kVec>(x, first + q + u * G);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      if (q + u * G < packs_per_plane) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) sum = pooling::gap_accumulate(sum, loaded[u].val[j]);
      }
    }
  }
  return sum;
}

// Groups of G lanes per plane (Note [plane groups]); kWholePacks picks
// lane_sum_whole_packs (hw % kVec == 0) over lane_sum_masked.
template <typename scalar_t, int kVec, int G, typename index_t, bool kWholePacks>
__global__ void __launch_bounds__(G > kThreadsPerBlock ? G : kThreadsPerBlock)
    gap_forward_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, index_t planes, int64_t hw) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int kThreads = G > kThreadsPerBlock ? G : kThreadsPerBlock;
  constexpr int kPlanesPerBlock = kThreads / G;
  __shared__ acc_t warp_sums[kThreads / kWarpSize];
  const int lane = threadIdx.x % G;
  const int group = threadIdx.x / G;
  const index_t packs_per_plane = static_cast<index_t>(hw / kVec);  // used when kWholePacks
  // The loop bound is the same for the whole block (group_sum may sync).
  for (index_t base = static_cast<index_t>(blockIdx.x) * kPlanesPerBlock; base < planes;
       base += static_cast<index_t>(gridDim.x) * kPlanesPerBlock) {
    const index_t plane = base + group;
    acc_t sum = acc_t(0);
    if (plane < planes) {
      if constexpr (kWholePacks) {
        sum = lane_sum_whole_packs<scalar_t, kVec, G>(x, plane, packs_per_plane, lane);
      } else {
        sum = lane_sum_masked<scalar_t, kVec, G>(x, static_cast<int64_t>(plane), hw, lane);
      }
    }
    sum = group_sum<G>(sum, warp_sums);
    if (lane == 0 && plane < planes) y[plane] = static_cast<scalar_t>(pooling::gap_mean(sum, hw));
  }
}

// Note [broadcast backward]
// grad_input[i] = grad_output[i / hw] / hw: a broadcast, written as 16-byte
// packs by a grid-stride loop; the plane of a pack's first element comes from
// one division (32-bit unless the tensor has 2^31 elements or more), the rest
// by counting.
template <typename scalar_t, typename index_t, int kVec>
__global__ void __launch_bounds__(kThreadsPerBlock)
    gap_backward_kernel(const scalar_t* __restrict__ grad_output, scalar_t* __restrict__ grad_input,
                        index_t n, index_t hw) {
  using acc_t = at::opmath_type<scalar_t>;
  using P = Pack<scalar_t, kVec>;
  const index_t n_packs = n / kVec;
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (index_t q = first; q < n_packs; q += stride) {
    const index_t i0 = q * kVec;
    index_t plane = pooling::gap_plane_of(i0, hw);
    index_t offset = i0 - plane * hw;  // position inside the plane
    scalar_t value = static_cast<scalar_t>(pooling::gap_grad_input<acc_t>(grad_output[plane], hw));
    P out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if (offset == hw) {  // crossed into the next plane
        ++plane;
        offset = 0;
        value = static_cast<scalar_t>(pooling::gap_grad_input<acc_t>(grad_output[plane], hw));
      }
      out.val[j] = value;
      ++offset;
    }
    store_pack<kVec>(grad_input, q, out);
  }
  for (index_t i = n_packs * kVec + first; i < n; i += stride) {  // fewer than kVec left
    grad_input[i] = static_cast<scalar_t>(pooling::gap_grad_input<acc_t>(grad_output[pooling::gap_plane_of(i, hw)], hw));
  }
}

// whole_packs: lane_sum_whole_packs (needs kVec > 1 and hw % kVec == 0), else lane_sum_masked.
template <typename scalar_t, int kVec, int G>
void launch_forward(const scalar_t* x, scalar_t* y, int64_t planes, int64_t hw, bool whole_packs,
                    cudaStream_t stream) {
  constexpr int kThreads = G > kThreadsPerBlock ? G : kThreadsPerBlock;
  constexpr int kPlanesPerBlock = kThreads / G;
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(planes, kPlanesPerBlock),
                                           std::numeric_limits<int32_t>::max());
  if (kVec > 1 && whole_packs) {
    const int64_t packs_per_plane = hw / kVec;
    // The grid loop's last step may pass the plane count by one grid of planes.
    if (fits_int32((planes + blocks * kPlanesPerBlock) * packs_per_plane)) {
      gap_forward_kernel<scalar_t, kVec, G, uint32_t, true>
          <<<blocks, kThreads, 0, stream>>>(x, y, static_cast<uint32_t>(planes), hw);
    } else {
      gap_forward_kernel<scalar_t, kVec, G, uint64_t, true>
          <<<blocks, kThreads, 0, stream>>>(x, y, static_cast<uint64_t>(planes), hw);
    }
  } else {
    gap_forward_kernel<scalar_t, kVec, G, int64_t, false><<<blocks, kThreads, 0, stream>>>(x, y, planes, hw);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, int kVec>
void forward_with_vec(const scalar_t* x, scalar_t* y, int64_t planes, int64_t hw, bool whole_packs,
                      cudaStream_t stream) {
  // Packs touched per plane (one more when the plane straddles pack edges),
  // shared by the smallest group that gives each lane about four of them.
  const int64_t packs = ceil_div<int64_t>(hw, kVec) + (kVec > 1 ? 1 : 0);
  const int64_t want = ceil_div<int64_t>(packs, kLoadsInFlight);
  if (want <= 4) return launch_forward<scalar_t, kVec, 4>(x, y, planes, hw, whole_packs, stream);
  if (want <= 8) return launch_forward<scalar_t, kVec, 8>(x, y, planes, hw, whole_packs, stream);
  if (want <= 16) return launch_forward<scalar_t, kVec, 16>(x, y, planes, hw, whole_packs, stream);
  if (want <= 32) return launch_forward<scalar_t, kVec, 32>(x, y, planes, hw, whole_packs, stream);
  if (want <= 64) return launch_forward<scalar_t, kVec, 64>(x, y, planes, hw, whole_packs, stream);
  if (want <= 128) return launch_forward<scalar_t, kVec, 128>(x, y, planes, hw, whole_packs, stream);
  if (want <= 256) return launch_forward<scalar_t, kVec, 256>(x, y, planes, hw, whole_packs, stream);
  return launch_forward<scalar_t, kVec, 512>(x, y, planes, hw, whole_packs, stream);
}

template <typename scalar_t, typename index_t>
void launch_backward(const scalar_t* go, scalar_t* gi, int64_t planes, int64_t hw, cudaStream_t stream) {
  constexpr int kVec = vec_width<scalar_t>();
  const int64_t n = planes * hw;
  const int64_t want = std::max<int64_t>(1, ceil_div<int64_t>(n / kVec, kThreadsPerBlock));
  const int64_t blocks = std::min<int64_t>(want, int64_t(multiprocessor_count()) * 16);
  gap_backward_kernel<scalar_t, index_t, kVec><<<blocks, kThreadsPerBlock, 0, stream>>>(
      go, gi, static_cast<index_t>(n), static_cast<index_t>(hw));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

struct PoolingLauncher {
  template <typename scalar_t>
  static void forward(const scalar_t* x, scalar_t* y, int64_t planes, int64_t hw, int forced) {
    constexpr int kVec = vec_width<scalar_t>();
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    // The fastest rung that can take x (forward_ladder, entry.h), unless one is forced.
    const bool aligned = is_aligned(x, kPackBytes), whole = aligned && hw % kVec == 0;
    const int rung = pooling::forward_ladder().run(
        c10::DeviceType::CUDA, forced, whole ? 4 : aligned ? 3 : 2, [&](int r) {
          if (r >= 3 && !aligned) return std::string("x is not 16-byte aligned (a view into its storage)");
          if (r == 4 && !whole) {
            return "H*W = " + std::to_string(hw) + " is not a multiple of the " + std::to_string(kVec) +
                   "-element pack";
          }
          return std::string();
        });
    switch (rung) {
      case 1:
        gap_forward_textbook_kernel<scalar_t>
            <<<get_blocks(planes, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(x, y, planes, hw);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        return;
      case 2:
        return forward_with_vec<scalar_t, 1>(x, y, planes, hw, false, stream);
      default:  // 3 and 4
        return forward_with_vec<scalar_t, kVec>(x, y, planes, hw, rung == 4, stream);
    }
  }

  template <typename scalar_t>
  static void backward(const scalar_t* grad_output, scalar_t* grad_input, int64_t planes, int64_t hw) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    // grad_input is freshly allocated, so 16-byte aligned. The tail loop's
    // last index may pass n by a pack.
    if (fits_int32(planes * hw + kPackBytes)) {
      launch_backward<scalar_t, uint32_t>(grad_output, grad_input, planes, hw, stream);
    } else {
      launch_backward<scalar_t, uint64_t>(grad_output, grad_input, planes, hw, stream);
    }
  }
};

}  // namespace
}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::pooling::register_kernels<labops::pooling::Entry<labops::cuda::PoolingLauncher>>(m);
}
