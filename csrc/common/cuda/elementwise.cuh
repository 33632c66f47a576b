// The CUDA elementwise launcher: out[i] = body(in_0[i], ..., in_k[i]).
//
// Two kernels run the same body:
//  * elementwise_kernel: the textbook grid-stride loop, one element per
//    iteration. Used when a pointer is not 16-byte aligned.
//  * elementwise_vec_kernel: each thread moves 16 bytes per load (4 floats,
//    8 halves) and issues kUnroll such loads before computing, so several
//    are in flight at once: what it takes to approach HBM's copy bandwidth.
// Arithmetic happens in at::opmath_type (float for half/bfloat16).
// ElementwiseLauncher runs the vector kernel whenever every pointer is
// aligned; a layer with a ladder (activation's forward) picks one itself.
#pragma once

#include <array>
#include <cstdint>

#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../loop.h"
#include "device.cuh"
#include "vec.cuh"

namespace labops::cuda {

template <typename scalar_t, size_t N>
struct Pointers {
  const scalar_t* in[N];
};

template <typename opmath_t, size_t N, typename Body, typename Arr>
__device__ __forceinline__ opmath_t apply_body(const Body& body, const Arr& v) {
  if constexpr (N == 1) {
    return body(static_cast<opmath_t>(v[0]));
  } else {
    return body(static_cast<opmath_t>(v[0]), static_cast<opmath_t>(v[1]));
  }
}

template <typename scalar_t, size_t N, typename Body>
__global__ void elementwise_kernel(Pointers<scalar_t, N> p, scalar_t* __restrict__ out, int64_t n,
                                   Body body) {
  using opmath_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(i, n) {
    scalar_t v[N];
#pragma unroll
    for (size_t k = 0; k < N; ++k) v[k] = p.in[k][i];
    out[i] = static_cast<scalar_t>(apply_body<opmath_t, N>(body, v));
  }
}

template <int kThreads, int kUnroll, typename scalar_t, size_t N, typename Body>
__global__ void __launch_bounds__(kThreads)
    elementwise_vec_kernel(Pointers<scalar_t, N> p, scalar_t* __restrict__ out, int64_t n, Body body) {
  using opmath_t = at::opmath_type<scalar_t>;
  constexpr int kVec = vec_width<scalar_t>();
  using P = Pack<scalar_t, kVec>;
  const int64_t n_packs = n / kVec;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;

  // Grid-stride loop over packs, kUnroll packs per trip: issue every load
  // first, then compute and store, so several 16-byte loads are in flight.
  for (int64_t base = first; base < n_packs; base += stride * kUnroll) {
    P loaded[kUnroll][N];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int64_t pack = base + u * stride;
      if (pack < n_packs) {
#pragma unroll
        for (size_t k = 0; k < N; ++k) loaded[u][k] = load_pack<kVec>(p.in[k], pack);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int64_t pack = base + u * stride;
      if (pack < n_packs) {
        P result;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          scalar_t v[N];
#pragma unroll
          for (size_t k = 0; k < N; ++k) v[k] = loaded[u][k].val[j];
          result.val[j] = static_cast<scalar_t>(apply_body<opmath_t, N>(body, v));
        }
        store_pack<kVec>(out, pack, result);
      }
    }
  }
  // The tail that does not fill a whole pack (fewer than kVec elements).
  for (int64_t i = n_packs * kVec + first; i < n; i += stride) {
    scalar_t v[N];
#pragma unroll
    for (size_t k = 0; k < N; ++k) v[k] = p.in[k][i];
    out[i] = static_cast<scalar_t>(apply_body<opmath_t, N>(body, v));
  }
}


// gridDim.x's hardware limit; past it the grid-stride loop covers the rest.
constexpr int64_t kMaxGridX = 2147483647;

template <int kThreads, int kUnroll, typename scalar_t, size_t N, typename Body>
void launch_vec(const Pointers<scalar_t, N>& p, scalar_t* out, int64_t n, Body body, int64_t max_blocks,
                cudaStream_t stream) {
  constexpr int kVec = vec_width<scalar_t>();
  const int64_t want = ceil_div<int64_t>(n / kVec, int64_t(kThreads) * kUnroll);
  const int64_t blocks = std::max<int64_t>(1, std::min(want, max_blocks));
  elementwise_vec_kernel<kThreads, kUnroll, scalar_t, N><<<blocks, kThreads, 0, stream>>>(p, out, n, body);
}

// Whether elementwise_vec_kernel can take these pointers: each one 16-byte aligned.
template <typename scalar_t, size_t N>
bool all_aligned(const std::array<const scalar_t*, N>& in, const scalar_t* out) {
  bool aligned = is_aligned(out);
  for (size_t k = 0; k < N; ++k) aligned = aligned && is_aligned(in[k]);
  return aligned;
}

// Launch elementwise_vec_kernel (vector_loads: every pointer must pass
// all_aligned) or the grid-stride elementwise_kernel, on the current stream
// (never the legacy default stream: that breaks CUDA graphs and
// torch.compile's stream handling).
//
// The vectorized kernel's shape was chosen by a sweep on an H200 (64M
// elements, fp32 and fp16; threads 128-1024, unroll 1-4, grid capped at 4-32
// blocks per SM or not at all): capping the grid at a few waves of resident
// blocks, each looping over the data, reached 77-88 % of copy bandwidth;
// launching every block up front, 256 threads with 2 packs each, 90-98 %
// (fp16 GELU-erf stays near 75 %: there the erf arithmetic is the limit).
template <int kThreads = kThreadsPerBlock, int kUnroll = 2, typename scalar_t, size_t N, typename Body>
void launch_elementwise(std::array<const scalar_t*, N> in, scalar_t* out, int64_t n, Body body, bool vector_loads,
                        int64_t max_blocks = kMaxGridX) {
  if (n == 0) return;
  Pointers<scalar_t, N> p;
  for (size_t k = 0; k < N; ++k) p.in[k] = in[k];
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (vector_loads) {
    launch_vec<kThreads, kUnroll>(p, out, n, body, max_blocks, stream);
  } else {
    elementwise_kernel<scalar_t, N><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(p, out, n, body);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The launcher policy handed to run_elementwise (common/elementwise_op.h).
struct ElementwiseLauncher {
  template <typename scalar_t, size_t N, typename Body>
  static void run(std::array<const scalar_t*, N> in, scalar_t* out, int64_t n, Body body) {
    launch_elementwise(in, out, n, body, /*vector_loads=*/all_aligned(in, out));
  }
};

}  // namespace labops::cuda
