// Hopper's warpgroup tensor-core instructions (wgmma, sm_90a only), the wgmma rung of conv2d_mm.
//
// A warpgroup (4 warps, 128 threads) multiplies a 64 x k16 tile of A by a k16 x N tile of B, both read
// straight from shared memory, and adds to a 64 x N float32 tile held in the warpgroup's registers, N/2
// floats a thread. Unlike mma.sync (mma.cuh) the instruction is asynchronous: a warpgroup issues several,
// commits them as a group, and waits for a group only when it needs its registers or its shared memory back.
//
// Note [wgmma shared-memory layout]
// Each operand is K-major (rows of contiguous k: A's rows are output pixels, B's are filters) in rows of
// exactly 128 bytes of k (64 float16 or bfloat16 values, or 32 float32 read as TF32), stored with the
// 128-byte swizzle: 16-byte chunk c of row r lies at r * 128 + ((c ^ (r % 8)) * 16). Eight rows (1024 bytes,
// 1024-aligned) form one swizzle atom, so the 8 rows that one step of the tensor core reads sit in 8
// different 16-byte bank groups; the loads write it the same way (cp.async, one chunk each). The descriptor
// tells the instruction where a tile starts (its address), that atoms follow each other every 1024 bytes
// (the stride byte offset), and which swizzle (bits 62-63: 1 = 128 bytes). One instruction reads a slice of
// 32 bytes of k (k16 of a 2-byte type, k8 of TF32), the next slice 32 bytes further: the descriptor's
// address moves by 32 bytes (2 in its 16-byte units), and the hardware applies the swizzle to the full
// address, which is why a tile must start 1024-aligned. PTX ISA, "Matrix Descriptor
// Format" and "Shared Memory Matrix Layout" (wgmma); CUTLASS names this layout K-major SW128.
//
// The accumulators: thread t of the warpgroup holds, for each group of 8 columns j, d[4j .. 4j + 3] =
// (row, 8j + 2q), (row, 8j + 2q + 1), (row + 8, 8j + 2q), (row + 8, 8j + 2q + 1), with row = 16 (t / 32) +
// (t % 32) / 4 and q = t % 4: mma.sync's m16n8 layout (mma.cuh), four warps stacked, N / 8 tiles wide.
#pragma once

#include <cstdint>
#include <type_traits>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "mma.cuh"

namespace labops::cuda {

// Where byte `byte` (0-127) of row `row` of a 128-byte-swizzled tile lies, from the tile's start.
__device__ __forceinline__ int swizzled_offset(int row, int byte) {
  return row * 128 + (((byte / 16) ^ (row % 8)) * 16) + byte % 16;
}

// The descriptor of a 128-byte-swizzled tile starting at `tile` (shared memory, 1024-aligned): K-major, whose
// leading byte offset goes unused, or MN-major (Note [MN-major operands]), where it is the next 64 of M or N.
// `tile` is a shared-memory address (shared_address in tma.cuh), found once, not converted from a pointer every step.
__device__ __forceinline__ uint64_t wgmma_descriptor(uint32_t tile, int leading_bytes = 16) {
  const uint64_t address = tile;
  return ((address & 0x3FFFF) >> 4)                  // start address, in 16-byte units
         | (uint64_t(leading_bytes >> 4) << 16)       // leading byte offset
         | (uint64_t(1024 >> 4) << 32)                // stride byte offset: one 8-row atom to the next
         | (uint64_t(1) << 62);                       // 128-byte swizzle
}
// Note [MN-major operands]
// The weight gradient by taps (conv2d_mm, cuda.cu) reads channels_last tensors as they are (and the input
// gradient its B, the forward's channels_last weight, Note [the input gradient as a convolution]): a step is 64 pixels
// (k) of 64 filters or channels (M or N) a box, each pixel's 128 bytes one swizzled row, so M or N runs along
// the row and k down the rows (CUTLASS's MN-major SW128, the instruction's transpose flags: float16 and
// bfloat16 only). An 8-row atom (1024 bytes) holds 8 values of k, the next 8 the stride byte offset (1024)
// further, the next 64 of M or N the leading byte offset further (the next box). One instruction reads k16,
// two atoms, so the next one starts 2048 bytes on. wgmma_descriptor(tile, leading bytes) describes such a tile.

// The descriptor of the same tile, `bytes` further along k (a multiple of 32: one k16 slice of 2-byte types).
// One 32-bit add: the start address (bits 0-13) stays below 2^14 units within the 228 KB of shared memory, so
// nothing carries into the leading byte offset or the high word.
__device__ __forceinline__ uint64_t wgmma_advance(uint64_t descriptor, int bytes) {
  const uint32_t low = static_cast<uint32_t>(descriptor) + static_cast<uint32_t>(bytes >> 4);
  return (descriptor & 0xFFFFFFFF00000000ull) | low;
}

// Before the first wgmma of a batch: the accumulator registers and shared memory written so far are theirs.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Close the batch of wgmma issued since the last commit.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most `pending` committed batches of this warpgroup are still running.
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}
// Shared memory written by ordinary stores or cp.async (the generic proxy) becomes visible to wgmma (the
// async proxy) only after this fence, then a barrier.
__device__ __forceinline__ void fence_shared_for_wgmma() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keep the compiler from moving accesses of an accumulator across the asynchronous wgmma that owns it.
__device__ __forceinline__ void wgmma_hold(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// The register lists of the three widths (N / 2 accumulators a thread).
#define LABOPS_WGMMA_F8(d, i)                                                                                \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define LABOPS_WGMMA_D64  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
   "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define LABOPS_WGMMA_OUT64(d) \
  LABOPS_WGMMA_F8(d, 0), LABOPS_WGMMA_F8(d, 8), LABOPS_WGMMA_F8(d, 16), LABOPS_WGMMA_F8(d, 24)
#define LABOPS_WGMMA_DESC_A64 "%32"
#define LABOPS_WGMMA_DESC_B64 "%33"
#define LABOPS_WGMMA_SCALE_D64 "%34"
#define LABOPS_WGMMA_TRANSPOSE64 "%35, %36"
#define LABOPS_WGMMA_D128  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
   "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
   "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
   "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define LABOPS_WGMMA_OUT128(d) \
  LABOPS_WGMMA_F8(d, 0), LABOPS_WGMMA_F8(d, 8), LABOPS_WGMMA_F8(d, 16), LABOPS_WGMMA_F8(d, 24), \
  LABOPS_WGMMA_F8(d, 32), LABOPS_WGMMA_F8(d, 40), LABOPS_WGMMA_F8(d, 48), LABOPS_WGMMA_F8(d, 56)
#define LABOPS_WGMMA_DESC_A128 "%64"
#define LABOPS_WGMMA_DESC_B128 "%65"
#define LABOPS_WGMMA_SCALE_D128 "%66"
#define LABOPS_WGMMA_TRANSPOSE128 "%67, %68"
#define LABOPS_WGMMA_D192  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
   "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
   "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
   "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
   "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
   "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define LABOPS_WGMMA_OUT192(d) LABOPS_WGMMA_OUT128(d), LABOPS_WGMMA_F8(d, 64), LABOPS_WGMMA_F8(d, 72), \
  LABOPS_WGMMA_F8(d, 80), LABOPS_WGMMA_F8(d, 88)
#define LABOPS_WGMMA_DESC_A192 "%96"
#define LABOPS_WGMMA_DESC_B192 "%97"
#define LABOPS_WGMMA_SCALE_D192 "%98"
#define LABOPS_WGMMA_TRANSPOSE192 "%99, %100"


// float32 read as TF32: the instruction (m64nNk8) takes no transpose flags, and uses only the top 19 bits of each
// value (it truncates), so float32 operands are rounded to TF32 before they reach it: by conv2d_mm's layout
// copies, or in registers (wgmma_tf32_a_in_registers below).
#define LABOPS_WGMMA_CALL_TF32(N)                                                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " LABOPS_WGMMA_SCALE_D##N ", 0;\n"                         \
               "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " LABOPS_WGMMA_D##N                 \
               ", " LABOPS_WGMMA_DESC_A##N ", " LABOPS_WGMMA_DESC_B##N ", p, 1, 1;\n}\n"                    \
               : LABOPS_WGMMA_OUT##N(d)                                                                     \
               : "l"(a), "l"(b), "r"(accumulate))

// d (64 x N, float32) = (accumulate ? d : 0) + A (64 x k) . B (k x N), A and B in shared memory, K-major, or
// with kMnMajorA / kMnMajorB MN-major (Note [MN-major operands]); k the 32 bytes of one slice: 16 float16 or
// bfloat16 values, or 8 float32 read as TF32.
#define LABOPS_WGMMA_CALL(N, TYPE)                                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " LABOPS_WGMMA_SCALE_D##N ", 0;\n"                         \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " " LABOPS_WGMMA_D##N        \
               ", " LABOPS_WGMMA_DESC_A##N ", " LABOPS_WGMMA_DESC_B##N ", p, 1, 1, "                        \
               LABOPS_WGMMA_TRANSPOSE##N ";\n}\n"                                                          \
               : LABOPS_WGMMA_OUT##N(d)                                                                     \
               : "l"(a), "l"(b), "r"(accumulate), "n"(kTransposeA), "n"(kTransposeB))

// d (64 x N, float32) += A (64 x k8, TF32, in registers) . B (k8 x N, shared memory, K-major). Thread t of the
// warpgroup holds a[0..3] = A's (row, q), (row + 8, q), (row, q + 4), (row + 8, q + 4), with row = 16 (t / 32) +
// (t % 32) / 4 and q = t % 4: the A of mma.sync's m16n8k8 (mma.cuh), four warps stacked (CUTLASS's ALayout_64x8).
// The instruction reads the registers while it runs: they may change only after a wgmma_wait that covers it.
template <int N>
__device__ __forceinline__ void wgmma_tf32_a_in_registers(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  static_assert(N == 64 || N == 128, "N = 64 or 128");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " LABOPS_WGMMA_D64
                 ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                 : LABOPS_WGMMA_OUT64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  } else {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " LABOPS_WGMMA_D128
                 ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                 : LABOPS_WGMMA_OUT128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
#endif
}
// Keep a register live (unchanged) up to this point: A fragments a running wgmma still reads.
__device__ __forceinline__ void wgmma_keep(uint32_t r) { asm volatile("" ::"r"(r) : "memory"); }

template <typename scalar_t, int N, bool kMnMajorA = false, bool kMnMajorB = kMnMajorA>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {
  static_assert(std::is_same_v<scalar_t, at::Half> || std::is_same_v<scalar_t, at::BFloat16> ||
                    std::is_same_v<scalar_t, float>,
                "float16, bfloat16 or float32 (as TF32)");
  static_assert(!(kMnMajorA || kMnMajorB) || !std::is_same_v<scalar_t, float>,
                "the transpose flags take float16 and bfloat16 only");
  constexpr int kTransposeA = kMnMajorA ? 1 : 0, kTransposeB = kMnMajorB ? 1 : 0;
  static_assert(N == 64 || N == 128 || (N == 192 && kMnMajorB),
                "N = 64 or 128, and 192 MN-major (the weight gradient by taps); the instruction takes up to 256");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<scalar_t, float>) {
    if constexpr (N == 64) LABOPS_WGMMA_CALL_TF32(64);
    if constexpr (N == 128) LABOPS_WGMMA_CALL_TF32(128);
  } else if constexpr (std::is_same_v<scalar_t, at::Half>) {
    if constexpr (N == 64) LABOPS_WGMMA_CALL(64, "f16");
    if constexpr (N == 128) LABOPS_WGMMA_CALL(128, "f16");
    if constexpr (N == 192) LABOPS_WGMMA_CALL(192, "f16");
  } else {
    if constexpr (N == 64) LABOPS_WGMMA_CALL(64, "bf16");
    if constexpr (N == 128) LABOPS_WGMMA_CALL(128, "bf16");
    if constexpr (N == 192) LABOPS_WGMMA_CALL(192, "bf16");
  }
#endif
}

}  // namespace labops::cuda
