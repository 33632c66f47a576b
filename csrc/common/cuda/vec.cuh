// Vector memory access for the CUDA kernels: several elements moved by one
// load or store instruction (ATen's memory::aligned_vector and load_vector),
// and the index-width test that decides whether a kernel may count in 32 bits
// (ATen's canUse32BitIndexMath).
//
// A warp that loads 16 bytes per thread moves 512 bytes per instruction
// instead of 128: fewer instructions for the same traffic, and more bytes in
// flight per thread, which is what it takes to approach copy bandwidth.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include <cuda_runtime.h>

namespace labops::cuda {

// The widest access one thread makes: ld.global.v4.b32 / st.global.v4.b32.
constexpr int kPackBytes = 16;

// Elements of T in one 16-byte pack: 4 floats, 8 halves, 2 doubles.
template <typename T>
constexpr int vec_width() {
  return kPackBytes / static_cast<int>(sizeof(T));
}

// V elements moved as one access. The alignment of the whole pack is what lets
// the compiler emit one vector instruction; it is also a promise: a Pack may
// only be read from or written to an address that is a multiple of
// sizeof(Pack) (check pointers with is_aligned, device.cuh). V = 1 is a plain
// scalar access, for the same kernel on unaligned data.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T val[V];
};

// The pack at p, p[0 .. V-1]; p must be aligned to sizeof(Pack<T, V>).
template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}

// p[0 .. V-1] = pack; p must be aligned to sizeof(Pack<T, V>).
template <int V, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, V>& pack) {
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

// The same, addressed by pack: pack number `pack` of p is p[pack * V .. pack *
// V + V - 1]. Kernels that count in packs index this way, which keeps a 32-bit
// pack count from being widened before the multiply.
template <int V, typename T, typename I>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p, I pack) {
  return reinterpret_cast<const Pack<T, V>*>(p)[pack];
}
template <int V, typename T, typename I>
__device__ __forceinline__ void store_pack(T* p, I pack, const Pack<T, V>& value) {
  reinterpret_cast<Pack<T, V>*>(p)[pack] = value;
}

// Note [evict-first accesses]
// A kernel that reads a row for the last time, or writes an output nobody
// reads soon, can mark the access "evict first" (ld.global.cs / st.global.cs,
// the __ldcs / __stcs intrinsics): the line is the first to leave L2, so it
// does not push out the data other blocks are about to reread. Softmax's
// long-row kernels read each row twice; their second pass uses these so the
// rows still waiting for their second read stay in L2. The intrinsics take
// whole 16-byte words: packs of other sizes fall back to a plain access.

// load_pack, marked evict-first; see Note [evict-first accesses].
template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_pack_evict_first(const T* p) {
  if constexpr (sizeof(Pack<T, V>) == 16) {
    const int4 bits = __ldcs(reinterpret_cast<const int4*>(p));
    Pack<T, V> out;
    memcpy(&out, &bits, sizeof(out));
    return out;
  } else {
    return load_pack<V>(p);
  }
}

// store_pack, marked evict-first; see Note [evict-first accesses].
template <int V, typename T>
__device__ __forceinline__ void store_pack_evict_first(T* p, const Pack<T, V>& pack) {
  if constexpr (sizeof(Pack<T, V>) == 16) {
    int4 bits;
    memcpy(&bits, &pack, sizeof(bits));
    __stcs(reinterpret_cast<int4*>(p), bits);
  } else {
    store_pack<V>(p, pack);
  }
}

// The same, addressed by pack (as load_pack(p, pack) / store_pack(p, pack, value)).
template <int V, typename T, typename I>
__device__ __forceinline__ Pack<T, V> load_pack_evict_first(const T* p, I pack) {
  return load_pack_evict_first<V>(reinterpret_cast<const T*>(reinterpret_cast<const Pack<T, V>*>(p) + pack));
}
template <int V, typename T, typename I>
__device__ __forceinline__ void store_pack_evict_first(T* p, I pack, const Pack<T, V>& value) {
  store_pack_evict_first<V>(reinterpret_cast<T*>(reinterpret_cast<Pack<T, V>*>(p) + pack), value);
}

// a / b rounded up, for non-negative a and positive b: blocks for a grid,
// packs for a row.
template <typename I>
__host__ __device__ constexpr I ceil_div(I a, I b) {
  return (a + b - 1) / b;
}

// Whether every index in [0, n] fits a signed 32-bit integer, so a kernel may
// count in 32 bits (its divisions and multiplies are several times cheaper
// than 64-bit ones). Callers pass the largest value the kernel computes, not
// only the element count: a grid-stride loop's last step runs past the end by
// up to one grid.
__host__ __device__ constexpr bool fits_int32(int64_t n) {
  return n <= std::numeric_limits<int32_t>::max();
}

}  // namespace labops::cuda
