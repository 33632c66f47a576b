// Sums (and other reductions) across the threads of a warp, a group or a
// block, for the CUDA kernels. See Note [fixed-order reductions].
#pragma once

#include <cstring>
#include <type_traits>

#include <cuda_runtime.h>

#include "../loop.h"

namespace labops::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarpMask = 0xffffffffu;

// Note [fixed-order reductions]
// Every helper here combines values in an order fixed by the threads'
// positions alone: shuffles in a butterfly, then warp partials read from
// shared memory in warp order. No atomics, so a sum is bitwise the same on
// every run. In the butterfly (__shfl_xor_sync) every lane of a group ends
// with the same bits: each step combines the same two values in both lanes,
// and a + b == b + a in IEEE arithmetic (so does max). Ops must therefore be
// commutative; they need not be associative.

template <typename T>
struct Plus {
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};

// The value of lane (this lane ^ offset). Numbers use the hardware shuffle;
// a struct of 32-bit words (softmax's running (max, sum)) moves word by word,
// which is what the compiler emits for a double too.
template <typename T>
__device__ __forceinline__ T shfl_xor(const T& v, int offset) {
  if constexpr (std::is_arithmetic_v<T>) {
    return __shfl_xor_sync(kFullWarpMask, v, offset);
  } else {
    static_assert(sizeof(T) % 4 == 0 && std::is_trivially_copyable_v<T>,
                  "shfl_xor moves whole 32-bit words");
    unsigned words[sizeof(T) / 4];
    memcpy(words, &v, sizeof(T));
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof(T) / 4); ++k) {
      words[k] = __shfl_xor_sync(kFullWarpMask, words[k], offset);
    }
    T out;
    memcpy(&out, words, sizeof(T));
    return out;
  }
}

// op over each aligned group of `width` consecutive lanes (a power of two, at
// most 32); every lane of the group gets the result. All 32 lanes of the warp
// must call it.
template <typename T, typename Op>
__device__ __forceinline__ T warp_allreduce(T v, Op op, int width = kWarpSize) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) v = op(v, shfl_xor(v, offset));
  return v;
}

// Sum over each aligned group of `width` consecutive lanes, in every lane.
template <typename T>
__device__ __forceinline__ T warp_sum(T v, int width = kWarpSize) {
  return warp_allreduce(v, Plus<T>{}, width);
}

// op over the whole block (blockDim.x a multiple of 32) of values already
// reduced over each warp (by warp_allreduce); every thread gets the result.
// `smem` holds blockDim.x / 32 values; `identity` fills the lanes past the
// last warp. Every thread of the block must call it; it may be called again at
// once with the same smem (it syncs before reusing it).
template <typename T, typename Op>
__device__ __forceinline__ T block_allreduce_warps(T v, Op op, T identity, T* smem) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  __syncthreads();  // readers of the previous reduction are done with smem
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarpSize) ? smem[lane] : identity;
  return warp_allreduce(v, op);
}

// op over the whole block: block_allreduce_warps after each warp's own reduction.
template <typename T, typename Op>
__device__ __forceinline__ T block_allreduce(T v, Op op, T identity, T* smem) {
  return block_allreduce_warps(warp_allreduce(v, op), op, identity, smem);
}

// Sum of `v` over each group of G consecutive threads (G a power of two, the
// groups aligned in the block), in every thread of the group. Groups of more
// than a warp add their warps' sums through `smem` (blockDim.x / 32 values).
// Every thread of the block must call it.
template <int G, typename T>
__device__ __forceinline__ T group_sum(T v, T* smem) {
  static_assert(G > 0 && (G & (G - 1)) == 0, "groups are a power of two threads");
  v = warp_sum(v, G < kWarpSize ? G : kWarpSize);
  if constexpr (G > kWarpSize) {
    constexpr int kWarpsPerGroup = G / kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    if (threadIdx.x % kWarpSize == 0) smem[warp] = v;
    __syncthreads();
    const int first = (warp / kWarpsPerGroup) * kWarpsPerGroup;
    v = T(0);
#pragma unroll
    for (int k = 0; k < kWarpsPerGroup; ++k) v += smem[first + k];
    __syncthreads();  // smem may be rewritten by the caller's next call
  }
  return v;
}

// Block sums per lane: thread t is in lane t % kLanes (kLanes a power of two,
// at most a warp), and for every lane L and k < N, store(L, k, sum) is called
// once, with the sum of get(k) over lane L's threads. Each warp combines its
// threads of a lane in a butterfly over the offsets >= kLanes, then one
// thread per (L, k) adds the warp partials in warp order. kLanes = 1 is
// block_sum_store. The block has kBlockThreads threads, all of which must call it.
template <int kLanes, int N, typename T, int kBlockThreads = kThreadsPerBlock, typename Get, typename Store>
__device__ __forceinline__ void block_lane_sums(Get&& get, Store&& store) {
  static_assert(kLanes >= 1 && kLanes <= kWarpSize && (kLanes & (kLanes - 1)) == 0,
                "lanes are a power of two, within a warp");
  static_assert(kBlockThreads % kWarpSize == 0, "whole warps");
  constexpr int kWarps = kBlockThreads / kWarpSize;
  __shared__ T partial[kWarps][kLanes][N];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    T s = get(k);
#pragma unroll
    for (int offset = kWarpSize / 2; offset >= kLanes; offset >>= 1) s += shfl_xor(s, offset);
    if (lane < kLanes) partial[warp][lane][k] = s;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kLanes * N; i += kBlockThreads) {
    const int L = i / N, k = i % N;
    T s = T(0);
    for (int w = 0; w < kWarps; ++w) s += partial[w][L][k];
    store(L, k, s);
  }
}

// Block sums of T values at once: thread t < T writes the block's total of
// v[t] to out[t]. The block has kBlockThreads threads, all of which must call
// it; the warp partials are added in warp order.
template <int T, int kBlockThreads = kThreadsPerBlock, typename acc_t>
__device__ __forceinline__ void block_sum_store(const acc_t (&v)[T], acc_t* out) {
  static_assert(kBlockThreads % kWarpSize == 0 && T <= kBlockThreads, "whole warps, a writer per total");
  constexpr int kWarps = kBlockThreads / kWarpSize;
  __shared__ acc_t partial[kWarps][T];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const acc_t s = warp_sum(v[t]);
    if (lane == 0) partial[warp][t] = s;
  }
  __syncthreads();
  if (threadIdx.x < T) {
    acc_t s = acc_t(0);
    for (int k = 0; k < kWarps; ++k) s += partial[k][threadIdx.x];
    out[threadIdx.x] = s;
  }
  __syncthreads();  // `partial` may be rewritten by the caller's next call
}

}  // namespace labops::cuda
