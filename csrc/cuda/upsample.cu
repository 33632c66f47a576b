// CUDA kernels for bilinear upsampling. The coordinate math (which pixels an
// output reads, with which weights, which outputs read an input) is
// ops/upsample.h's; this file only decides how threads share the work.
//
//  * forward_vec_kernel: each thread writes V consecutive outputs of one row
//    (16 bytes: 4 floats, 8 halves) with one vector store, and reuses the
//    input columns its neighbouring outputs already loaded (a x2 upsample
//    loads 8 values for 4 outputs instead of 16). forward_kernel is the plain
//    grid-stride loop over forward_at(), for rows not a multiple of V.
//  * gather_rows_kernel (deterministic backward): one block per input row h.
//    The block first contracts the few output rows that read h into one row
//    t = sum_y A_h[y, h] * G[y, :] in shared memory (coalesced 16-byte loads),
//    then each thread gathers its input columns from t. No atomics; every
//    grad_in value is a fixed sum, the same on every run.
//    gather_direct_kernel (gather_at per element) serves rows too wide for
//    shared memory.
//  * scatter_kernel (the lesson's non-deterministic backward): one thread per
//    output, four atomicAdds into a zeroed opmath buffer.
#include <algorithm>
#include <cstdint>
#include <limits>

#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../common/loop.h"
#include "../ops/upsample_ops.h"
#include "device.cuh"

namespace labops::cuda::upsample {

using ops::Axis;
using ops::Range;
using ops::Taps;

constexpr int kVecBytes = 16;
constexpr int kThreads = 256;
// Shared memory for one contracted output row in the gather kernel (the
// default per-block limit, no opt-in needed).
constexpr int64_t kSmemBytes = 48 * 1024;

template <typename scalar_t, int V>
struct alignas(sizeof(scalar_t) * V) Pack {
  scalar_t val[V];
};


inline int multiprocessor_count() {
  int device = 0, sms = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// ---- forward ----

template <typename scalar_t, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t n, Axis<T> ah, Axis<T> aw) {
  LABOPS_KERNEL_LOOP(i, n) { y[i] = static_cast<scalar_t>(ops::forward_at(i, x, ah, aw)); }
}

// index_t: 32-bit when the chunk count allows it (divisions are several times
// cheaper), 64-bit otherwise. The loop index itself is always 64-bit.
template <typename scalar_t, typename T, int V, typename index_t>
__global__ void __launch_bounds__(kThreads)
    forward_vec_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t chunks,
                       Axis<T> ah, Axis<T> aw) {
  const index_t chunks_per_row = static_cast<index_t>(aw.out / V);
  const index_t out_h = static_cast<index_t>(ah.out);
  LABOPS_KERNEL_LOOP(i, chunks) {
    const index_t chunk = static_cast<index_t>(i) % chunks_per_row;
    const index_t row = static_cast<index_t>(i) / chunks_per_row;  // plane * out_h + oy
    const index_t oy = row % out_h;
    const int64_t plane = row / out_h;
    const Taps<T> th = ops::source_taps(static_cast<int64_t>(oy), ah);
    const scalar_t* top = x + (plane * ah.in + th.i0) * aw.in;
    const scalar_t* bottom = x + (plane * ah.in + th.i1) * aw.in;
    const int64_t ox0 = static_cast<int64_t>(chunk) * V;

    // The two columns the previous output read, and their top/bottom values.
    int64_t col0 = -1, col1 = -1;
    T top0 = T(0), bottom0 = T(0), top1 = T(0), bottom1 = T(0);
    Pack<scalar_t, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const Taps<T> tw = ops::source_taps(ox0 + k, aw);
      T ta, ba, tb, bb;
      if (tw.i0 == col1) {
        ta = top1, ba = bottom1;
      } else if (tw.i0 == col0) {
        ta = top0, ba = bottom0;
      } else {
        ta = static_cast<T>(top[tw.i0]), ba = static_cast<T>(bottom[tw.i0]);
      }
      if (tw.i1 == tw.i0) {
        tb = ta, bb = ba;
      } else if (tw.i1 == col1) {
        tb = top1, bb = bottom1;
      } else {
        tb = static_cast<T>(top[tw.i1]), bb = static_cast<T>(bottom[tw.i1]);
      }
      out.val[k] = static_cast<scalar_t>(ops::bilinear_blend(ta, tb, ba, bb, th.lambda, tw.lambda));
      col0 = tw.i0, top0 = ta, bottom0 = ba;
      col1 = tw.i1, top1 = tb, bottom1 = bb;
    }
    *reinterpret_cast<Pack<scalar_t, V>*>(y + static_cast<int64_t>(row) * aw.out + ox0) = out;
  }
}

// ---- deterministic backward: gather ----

template <typename scalar_t, typename T, int V>
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(const scalar_t* __restrict__ g, scalar_t* __restrict__ grad_in, int64_t rows,
                       Axis<T> ah, Axis<T> aw) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* t = reinterpret_cast<T*>(smem_raw);  // one output row, contracted along h
  const int64_t chunks = aw.out / V;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {  // row = plane * in_h + h
    const int64_t h = row % ah.in;
    const scalar_t* gp = g + (row / ah.in) * ah.out * aw.out;
    const Range r = ops::outputs_reading(h, ah);
    // 1. t[x] = sum over the output rows y reading h of A_h[y, h] * G[y, x].
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      T acc[V];
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = T(0);
#pragma unroll 4
      for (int64_t oy = r.begin; oy < r.end; ++oy) {
        const T wy = ops::tap_weight(ops::source_taps(oy, ah), h);
        const Pack<scalar_t, V> v = *reinterpret_cast<const Pack<scalar_t, V>*>(gp + oy * aw.out + c * V);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += wy * static_cast<T>(v.val[k]);
      }
#pragma unroll
      for (int k = 0; k < V; ++k) t[c * V + k] = acc[k];
    }
    __syncthreads();
    // 2. grad_in[h, w] = sum over the output columns x reading w of A_w[x, w] * t[x].
    scalar_t* out = grad_in + row * aw.in;
    for (int64_t w = threadIdx.x; w < aw.in; w += blockDim.x) {
      out[w] = static_cast<scalar_t>(ops::column_gather(w, t, aw));
    }
    __syncthreads();  // t is rewritten for the next row
  }
}

template <typename scalar_t, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    gather_direct_kernel(const scalar_t* __restrict__ g, scalar_t* __restrict__ grad_in, int64_t n,
                         Axis<T> ah, Axis<T> aw) {
  LABOPS_KERNEL_LOOP(i, n) { grad_in[i] = static_cast<scalar_t>(ops::gather_at(i, g, ah, aw)); }
}

// ---- non-deterministic backward: scatter with atomics ----

template <typename T>
struct AtomicAdd {
  T* acc;
  __device__ __forceinline__ void operator()(int64_t offset, T value) const { atomicAdd(acc + offset, value); }
};

template <typename scalar_t, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    scatter_kernel(const scalar_t* __restrict__ g, T* __restrict__ acc, int64_t n, Axis<T> ah, Axis<T> aw) {
  AtomicAdd<T> add{acc};
  LABOPS_KERNEL_LOOP(i, n) { ops::scatter_at(i, static_cast<T>(g[i]), ah, aw, add); }
}

template <typename scalar_t, typename T, int V>
void launch_gather_rows(const scalar_t* g, scalar_t* grad_in, int64_t rows, const Axis<T>& ah,
                        const Axis<T>& aw, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(aw.out) * sizeof(T);
  // Enough threads for the wider of the two phases, in whole warps.
  const int64_t work = std::max<int64_t>(aw.out / V, aw.in);
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, std::max<int64_t>(32, (work + 31) / 32 * 32)));
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, gather_rows_kernel<scalar_t, T, V>, threads, smem));
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(rows, int64_t(multiprocessor_count()) * std::max(per_sm, 1)));
  gather_rows_kernel<scalar_t, T, V><<<blocks, threads, smem, stream>>>(g, grad_in, rows, ah, aw);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace labops::cuda::upsample

namespace labops::cuda {

struct UpsampleLauncher {
  template <typename scalar_t, typename T>
  static void forward(const scalar_t* x, scalar_t* y, int64_t planes, const ops::Axis<T>& ah,
                      const ops::Axis<T>& aw) {
    using namespace upsample;
    constexpr int V = kVecBytes / sizeof(scalar_t);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t n = planes * ah.out * aw.out;
    if (aw.out % V == 0 && is_aligned(y)) {
      const int64_t chunks = n / V;
      const int64_t blocks = get_blocks(chunks, kThreads);
      if (chunks + blocks * kThreads <= std::numeric_limits<int32_t>::max()) {
        forward_vec_kernel<scalar_t, T, V, uint32_t><<<blocks, kThreads, 0, stream>>>(x, y, chunks, ah, aw);
      } else {
        forward_vec_kernel<scalar_t, T, V, int64_t><<<blocks, kThreads, 0, stream>>>(x, y, chunks, ah, aw);
      }
    } else {
      forward_kernel<scalar_t, T><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(x, y, n, ah, aw);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t, typename T>
  static void backward_gather(const scalar_t* g, scalar_t* grad_in, int64_t planes, const ops::Axis<T>& ah,
                              const ops::Axis<T>& aw) {
    using namespace upsample;
    constexpr int V = kVecBytes / sizeof(scalar_t);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t rows = planes * ah.in;
    if (aw.out * static_cast<int64_t>(sizeof(T)) <= kSmemBytes) {
      if (aw.out % V == 0 && is_aligned(g)) {
        launch_gather_rows<scalar_t, T, V>(g, grad_in, rows, ah, aw, stream);
      } else {
        launch_gather_rows<scalar_t, T, 1>(g, grad_in, rows, ah, aw, stream);
      }
    } else {
      const int64_t n = rows * aw.in;
      gather_direct_kernel<scalar_t, T><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(g, grad_in, n, ah, aw);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }

  template <typename scalar_t, typename T>
  static void backward_scatter(const scalar_t* g, T* acc, int64_t planes, const ops::Axis<T>& ah,
                               const ops::Axis<T>& aw) {
    using namespace upsample;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t n = planes * ah.out * aw.out;
    scatter_kernel<scalar_t, T><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(g, acc, n, ah, aw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::ops::UpsampleOps<labops::cuda::UpsampleLauncher>::register_kernels(m);
}
