// CUDA kernels for reorg: the index maps of reorg/reorg.h, the entry points of
// reorg/entry.h. reorg_kernel is the fast path (stride 2 or 4, see Note
// [reorg task kernel]); reorg_index_kernel the textbook one for any stride.
#include <algorithm>
#include <cstdint>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../common/fast_divider.h"
#include "../common/loop.h"
#include "entry.h"
#include "../common/cuda/device.cuh"
#include "../common/cuda/vec.cuh"

namespace labops::cuda {
namespace {

constexpr int kTasksInFlight = 4;

// kN elements moved as one access, like vec.cuh's Pack, with element access
// through get/set: 16-bit elements are kept in pairs in 32-bit words (held as
// separate 16-bit values, ptxas spilled them to local memory).
template <typename bits_t, int kN, bool kPairs = (sizeof(bits_t) == 2 && kN % 2 == 0)>
struct alignas(sizeof(bits_t) * kN) WordPack {
  bits_t val[kN];
  __device__ __forceinline__ bits_t get(int i) const { return val[i]; }
  __device__ __forceinline__ void set(int i, bits_t v) { val[i] = v; }
};
template <typename bits_t, int kN>
struct alignas(sizeof(bits_t) * kN) WordPack<bits_t, kN, true> {
  uint32_t word[kN / 2];
  __device__ __forceinline__ bits_t get(int i) const {
    return static_cast<bits_t>(i % 2 ? word[i / 2] >> 16 : word[i / 2] & 0xffffu);
  }
  __device__ __forceinline__ void set(int i, bits_t v) {
    word[i / 2] = i % 2 ? (word[i / 2] & 0xffffu) | (uint32_t(v) << 16) : (word[i / 2] & 0xffff0000u) | v;
  }
};

// Note [reorg task kernel]
// One thread moves kVw consecutive tasks (see Note [reorg tasks] in
// reorg/reorg.h): the kVw*s contiguous input elements
// x[n, c, h, dy, w..w+kVw-1, 0..s-1] and the kVw-long runs they feed in each
// of the s output planes. Tasks are numbered
// in the output's order, so
//  * forward: one 16-byte (or 8/4-byte) load of contiguous input per thread,
//    a warp reading one contiguous span; s stores per thread, each output
//    plane's run written by consecutive threads to consecutive addresses;
//  * backward: the same map read the other way: s coalesced loads from
//    grad_output, one contiguous store to grad_input. A gather: each thread
//    writes only its own grad_input elements.
// kTasksInFlight task groups are loaded before any is stored (loads in
// flight), and indices use 32-bit multiply-shift division (FastDivider)
// unless the tensor has 2^31 elements or more.
template <typename scalar_t, typename Div, int kS, int kVw, bool kBackward>
__global__ void __launch_bounds__(kThreadsPerBlock)
    reorg_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ dst, reorg::ReorgGeometry<Div> g,
                 typename Div::index_t n_groups) {
  using index_t = typename Div::index_t;
  using XPack = WordPack<scalar_t, kS * kVw>;  // x[.., w..w+kVw-1, 0..s-1], contiguous
  using YPack = WordPack<scalar_t, kVw>;       // y[.., dx, .., h, w..w+kVw-1], contiguous
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  for (index_t base = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; base < n_groups;
       base += stride * kTasksInFlight) {
    reorg::ReorgTask<index_t> task[kTasksInFlight];
    XPack xs[kTasksInFlight];
    YPack ys[kTasksInFlight][kS];
#pragma unroll
    for (int u = 0; u < kTasksInFlight; ++u) {
      const index_t group = base + u * stride;
      if (group < n_groups) {
        task[u] = reorg::reorg_task(g, group * kVw);
        if constexpr (kBackward) {
#pragma unroll
          for (int dx = 0; dx < kS; ++dx) {
            ys[u][dx] = *reinterpret_cast<const YPack*>(src + reorg::reorg_y_element(g, task[u], index_t(0), index_t(dx)));
          }
        } else {
          xs[u] = *reinterpret_cast<const XPack*>(src + task[u].x);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kTasksInFlight; ++u) {
      if (base + u * stride < n_groups) {
        // Element (v, dx) is at reorg_x_element / reorg_y_element: packs hold v*s + dx and v.
        if constexpr (kBackward) {
#pragma unroll
          for (int v = 0; v < kVw; ++v) {
#pragma unroll
            for (int dx = 0; dx < kS; ++dx) xs[u].set(v * kS + dx, ys[u][dx].get(v));
          }
          *reinterpret_cast<XPack*>(dst + task[u].x) = xs[u];
        } else {
#pragma unroll
          for (int dx = 0; dx < kS; ++dx) {
#pragma unroll
            for (int v = 0; v < kVw; ++v) ys[u][dx].set(v, xs[u].get(v * kS + dx));
            *reinterpret_cast<YPack*>(dst + reorg::reorg_y_element(g, task[u], index_t(0), index_t(dx))) = ys[u][dx];
          }
        }
      }
    }
  }
}

// Any stride, or pointers too misaligned for the task kernel: the textbook
// grid-stride loop, one output element per iteration, gathering through
// reorg_input_index (forward) or reorg_output_index (backward).
template <typename scalar_t, typename Div, bool kBackward>
__global__ void reorg_index_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ dst,
                                   reorg::ReorgGeometry<Div> g, int64_t n) {
  using index_t = typename Div::index_t;
  LABOPS_KERNEL_LOOP(i, n) {
    const index_t out = static_cast<index_t>(i);
    dst[out] = kBackward ? src[reorg::reorg_output_index(g, out)] : src[reorg::reorg_input_index(g, out)];
  }
}

template <typename scalar_t, typename Div, int kS, int kVw>
void launch_tasks(const scalar_t* src, scalar_t* dst, int64_t numel, const reorg::ReorgGeometry<Div>& g,
                  bool backward, cudaStream_t stream) {
  const int64_t n_groups = numel / (kS * kVw);
  const int64_t want = ceil_div<int64_t>(n_groups, int64_t(kThreadsPerBlock) * kTasksInFlight);
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(want, int64_t(multiprocessor_count()) * 8));
  using index_t = typename Div::index_t;
  if (backward) {
    reorg_kernel<scalar_t, Div, kS, kVw, true><<<blocks, kThreadsPerBlock, 0, stream>>>(src, dst, g, index_t(n_groups));
  } else {
    reorg_kernel<scalar_t, Div, kS, kVw, false><<<blocks, kThreadsPerBlock, 0, stream>>>(src, dst, g, index_t(n_groups));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The widest kVw (consecutive tasks per thread) whose input pack fits in 16
// bytes, divides Wo (a thread's tasks stay in one row) and suits the pointers.
template <typename scalar_t, typename Div, int kS>
bool try_task_kernel(const scalar_t* src, scalar_t* dst, int64_t numel, const reorg::ReorgGeometry<Div>& g,
                     bool backward, cudaStream_t stream) {
  constexpr size_t e = sizeof(scalar_t);
  auto fits = [&](int vw) {
    return g.Wo % vw == 0 && is_aligned(src, kS * vw * e) && is_aligned(dst, kS * vw * e);
  };
  if constexpr (kS * 4 * e <= kPackBytes) {
    if (fits(4)) return launch_tasks<scalar_t, Div, kS, 4>(src, dst, numel, g, backward, stream), true;
  }
  if constexpr (kS * 2 * e <= kPackBytes) {
    if (fits(2)) return launch_tasks<scalar_t, Div, kS, 2>(src, dst, numel, g, backward, stream), true;
  }
  if constexpr (kS * e <= kPackBytes) {
    if (fits(1)) return launch_tasks<scalar_t, Div, kS, 1>(src, dst, numel, g, backward, stream), true;
  }
  return false;
}

template <typename scalar_t, typename Div>
void run_with(const scalar_t* src, scalar_t* dst, int64_t numel, const reorg::ReorgShape& shape, bool backward,
              cudaStream_t stream) {
  const reorg::ReorgGeometry<Div> g(shape);
  if (shape.s == 2 && try_task_kernel<scalar_t, Div, 2>(src, dst, numel, g, backward, stream)) return;
  if (shape.s == 4 && try_task_kernel<scalar_t, Div, 4>(src, dst, numel, g, backward, stream)) return;
  if (backward) {
    reorg_index_kernel<scalar_t, Div, true><<<get_blocks(numel), kThreadsPerBlock, 0, stream>>>(src, dst, g, numel);
  } else {
    reorg_index_kernel<scalar_t, Div, false><<<get_blocks(numel), kThreadsPerBlock, 0, stream>>>(src, dst, g, numel);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// A permutation moves bits and does no arithmetic: every dtype of one size
// shares the kernels of that size's unsigned integer.
template <size_t kBytes>
struct BitsOf;
template <>
struct BitsOf<2> { using type = uint16_t; };
template <>
struct BitsOf<4> { using type = uint32_t; };
template <>
struct BitsOf<8> { using type = uint64_t; };

struct ReorgLauncher {
  template <typename scalar_t>
  static void run(const scalar_t* typed_src, scalar_t* typed_dst, int64_t numel, const reorg::ReorgShape& shape,
                  bool backward) {
    using bits_t = typename BitsOf<sizeof(scalar_t)>::type;
    const bits_t* src = reinterpret_cast<const bits_t*>(typed_src);
    bits_t* dst = reinterpret_cast<bits_t*>(typed_dst);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    // FastDivider needs every index below 2^31; leave room for the last
    // grid-stride step past the end.
    const int64_t headroom = int64_t(multiprocessor_count()) * 8 * kThreadsPerBlock * kTasksInFlight;
    if (fits_int32(numel + headroom)) {
      run_with<bits_t, FastDivider>(src, dst, numel, shape, backward, stream);
    } else {
      run_with<bits_t, PlainDivider>(src, dst, numel, shape, backward, stream);
    }
  }
};

}  // namespace
}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::reorg::Entry<labops::cuda::ReorgLauncher>::register_kernels(m);
}
