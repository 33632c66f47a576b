// CUDA kernels for reorg: the index maps of reorg/reorg.h, the entry points of
// reorg/entry.h. The forward's rungs (forward_ladder in entry.h, Note [the
// ladder] in common/ladder.h):
//   1 textbook      reorg_index_kernel: one output element per thread per
//                   trip, any stride; the default when rung 2 cannot run;
//   2 packed_tasks  reorg_kernel (Note [reorg task kernel]): stride 2 or 4,
//                   x aligned to one task (s elements); the default otherwise.
// The backward takes the same choice (no rungs).
#include <algorithm>
#include <cstdint>
#include <string>

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

// Rung 1, and any stride or pointers too misaligned for the task kernel: the textbook
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

// The widest kVw (consecutive tasks per thread) for reorg_kernel: 4, 2 or 1, the
// widest whose input pack fits in 16 bytes, divides Wo (a thread's tasks stay
// in one row) and suits the pointers; 0 when none does, or the stride is not
// 2 or 4 (then reorg_kernel cannot run: why_not_packed_tasks says why).
template <typename scalar_t>
int tasks_per_thread(const scalar_t* src, const scalar_t* dst, const reorg::ReorgShape& shape) {
  if (shape.s != 2 && shape.s != 4) return 0;
  for (int vw : {4, 2, 1}) {
    const int64_t bytes = shape.s * vw * int64_t(sizeof(scalar_t));
    if (bytes <= kPackBytes && shape.Wo % vw == 0 && is_aligned(src, bytes) && is_aligned(dst, bytes)) return vw;
  }
  return 0;
}

template <typename scalar_t>
std::string why_not_packed_tasks(const scalar_t* src, const reorg::ReorgShape& shape) {
  const int64_t task_bytes = shape.s * int64_t(sizeof(scalar_t));
  if (shape.s != 2 && shape.s != 4) return "it moves strides 2 and 4 only, got stride " + std::to_string(shape.s);
  if (task_bytes > kPackBytes) {
    return "a task of stride " + std::to_string(shape.s) + " is " + std::to_string(task_bytes) +
           " bytes of this dtype, over one 16-byte load";
  }
  if (!is_aligned(src, task_bytes)) return "x is not " + std::to_string(task_bytes) + "-byte aligned (one task)";
  return "the output is not " + std::to_string(task_bytes) + "-byte aligned (one task)";
}

// reorg_kernel with kVw = vw (a width tasks_per_thread chose for this kS).
template <typename scalar_t, typename Div, int kS>
void launch_packed_tasks(int vw, const scalar_t* src, scalar_t* dst, int64_t numel,
                         const reorg::ReorgGeometry<Div>& g, bool backward, cudaStream_t stream) {
  constexpr size_t e = sizeof(scalar_t);
  if constexpr (kS * 4 * e <= kPackBytes) {
    if (vw == 4) return launch_tasks<scalar_t, Div, kS, 4>(src, dst, numel, g, backward, stream);
  }
  if constexpr (kS * 2 * e <= kPackBytes) {
    if (vw == 2) return launch_tasks<scalar_t, Div, kS, 2>(src, dst, numel, g, backward, stream);
  }
  if constexpr (kS * e <= kPackBytes) {
    if (vw == 1) return launch_tasks<scalar_t, Div, kS, 1>(src, dst, numel, g, backward, stream);
  }
}

// vw > 0: reorg_kernel, vw tasks per thread; vw == 0: the textbook reorg_index_kernel.
template <typename scalar_t, typename Div>
void run_with(int vw, const scalar_t* src, scalar_t* dst, int64_t numel, const reorg::ReorgShape& shape,
              bool backward, cudaStream_t stream) {
  const reorg::ReorgGeometry<Div> g(shape);
  if (vw > 0) {
    if (shape.s == 2) {
      launch_packed_tasks<scalar_t, Div, 2>(vw, src, dst, numel, g, backward, stream);
    } else {
      launch_packed_tasks<scalar_t, Div, 4>(vw, src, dst, numel, g, backward, stream);
    }
    return;
  }
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
                  bool backward, int forced) {
    using bits_t = typename BitsOf<sizeof(scalar_t)>::type;
    const bits_t* src = reinterpret_cast<const bits_t*>(typed_src);
    bits_t* dst = reinterpret_cast<bits_t*>(typed_dst);
    int vw = tasks_per_thread(src, dst, shape);  // 0: reorg_kernel cannot run
    if (!backward) {
      ladder::Ladder& rungs = reorg::forward_ladder();
      const int rung = rungs.run(c10::DeviceType::CUDA, forced, vw > 0 ? 2 : 1, [&](int r) {
        return r == 2 && vw == 0 ? why_not_packed_tasks(src, shape) : std::string();
      });
      if (rung == 1) vw = 0;
    }
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    // FastDivider needs every index below 2^31; leave room for the last
    // grid-stride step past the end.
    const int64_t headroom = int64_t(multiprocessor_count()) * 8 * kThreadsPerBlock * kTasksInFlight;
    if (fits_int32(numel + headroom)) {
      run_with<bits_t, FastDivider>(vw, src, dst, numel, shape, backward, stream);
    } else {
      run_with<bits_t, PlainDivider>(vw, src, dst, numel, shape, backward, stream);
    }
  }
};

}  // namespace
}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::reorg::register_kernels<labops::reorg::Entry<labops::cuda::ReorgLauncher>>(m);
}
