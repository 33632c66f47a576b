// The tensor-core instructions the tensor_cores rung of conv2d_mm uses (sm_80 and later), one thin
// wrapper each around its PTX: cp.async (global -> shared without registers), ldmatrix (a warp loads
// 8 x 8 tiles of 16-bit elements from shared memory into the fragment layout mma expects) and mma.sync
// (a warp multiplies a 16 x k tile by a k x 8 tile and adds to a 16 x 8 float32 tile).
//
// Note [one fragment layout for three types]
// A row of a tile in shared memory is 32 bytes of k: 16 float16 or bfloat16 values (mma m16n8k16), or
// 8 float32 values read as TF32 (mma m16n8k8). ldmatrix sees 16-bit elements either way; a float32
// simply spans two of them, and the thread that receives a 32-bit register receives one whole float.
// So one ldmatrix.x4 fills the 4 registers of an A fragment (16 rows x 32 bytes) and the 2+2
// registers of two B fragments (8 columns x 32 bytes each) for all three types, and only the mma
// instruction differs. PTX ISA, "Matrix fragments for mma.m16n8k16" and "... for mma.m16n8k8 .tf32".
#pragma once

#include <cstdint>
#include <type_traits>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace labops::cuda {

// Copy 16 bytes from global `src` to shared `dst` without passing through registers; src_bytes = 0
// copies nothing and fills the 16 bytes with zeros (the padding of a convolution, a tile past the
// matrix). .cg: cache in L2 only, the data is reused from shared memory, not L1.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool fill) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const int src_bytes = fill ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
}
// Close the group of cp.async issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most `pending` committed groups are still in flight (this thread's copies only:
// a __syncthreads after it makes every thread's copies visible).
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// Four 8 x 8 tiles of 16-bit elements: lane l gives the address of row l % 8 of tile l / 8 (16 bytes),
// and receives in r[i] its two elements of tile i, row lane / 4, elements 2 * (lane % 4) and + 1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// d (16 x 8, float32) += a (16 x k) . b (k x 8), a row-major and b column-major fragments.
// float16 and bfloat16: the same instruction, but for the type of its inputs.
template <typename scalar_t>
struct Mma {
  static_assert(std::is_same_v<scalar_t, at::Half> || std::is_same_v<scalar_t, at::BFloat16>,
                "float16, bfloat16 or float32 (below) only");
  static constexpr int kK = 16;  // k per instruction
  __device__ __forceinline__ static void prepare(uint32_t&) {}
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    if constexpr (std::is_same_v<scalar_t, at::Half>) {
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
};

// v rounded to TF32 (10 bits of mantissa) to the nearest, ties away from zero: as cuDNN rounds its TF32
// operands (its errors against float64 match these to four digits; H100, session 24).
__device__ __forceinline__ float round_to_tf32(float v) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(v));
  return __uint_as_float(bits);
}

// float32 on TF32 tensor cores: each operand is first rounded to TF32 (round_to_tf32); the instruction alone
// would drop the low 13 bits (round toward zero).
template <>
struct Mma<float> {
  static constexpr int kK = 8;
  __device__ __forceinline__ static void prepare(uint32_t& r) {
    r = __float_as_uint(round_to_tf32(__uint_as_float(r)));
  }
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

}  // namespace labops::cuda
