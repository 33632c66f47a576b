// Hopper's Tensor Memory Accelerator (TMA, sm_90): one thread asks for a whole tile, the copy engine moves it
// from global to shared memory on its own and says so on an mbarrier. The wgmma rung of conv2d_mm uses it to
// load its tiles (Note [wgmma implicit GEMM] in conv2d_mm/cuda.cu).
//
// Note [TMA tiles]
// A tensor map (CUtensorMap, 128 bytes, made on the host by the driver's cuTensorMapEncode*) describes a
// tensor in global memory: its sizes and strides, the box a copy moves, and how the box is laid out in shared
// memory (here the 128-byte swizzle that wgmma reads, Note [wgmma shared-memory layout] in wgmma.cuh). A copy
// names the map and the coordinates of the box; elements outside the tensor arrive as zeros, so padding and
// partial tiles cost nothing. Two modes serve a convolution:
//   - tiled: the box is a rectangle of the tensor (the weight: BN filters x one tap x 128 bytes of channels);
//   - im2col: the box is `pixels` consecutive output pixels of an NHWC tensor (across rows and images) x
//     128 bytes of channels, each pixel read at its filter base (the input pixel of tap (0, 0), found from the
//     map's bounding box and traversal strides: the padding and the stride) plus the tap's offset (kh * dil_h,
//     kw * dil_w) given with the copy. That is one tile of the virtual columns matrix: im2col in hardware.
// The copy is asynchronous: the thread that asks arms the stage's mbarrier with the bytes to expect
// (arrive_expect_tx); every thread that needs the tile waits for the barrier's phase to complete. PTX ISA,
// "Tensor Access Modes" and "cp.async.bulk.tensor"; CUDA driver API, cuTensorMapEncodeIm2col.
#pragma once

#include <cstdint>

namespace labops::cuda {

// The barriers and copies below take shared-memory addresses (the .shared window), which a pipeline finds once
// and then steps by adds: converting a pointer costs several instructions each time, on its critical path.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// An mbarrier whose phase completes after `arrivals` arrivals (and, where a thread armed it, the copies' bytes).
__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}
// After the barriers are set up, before any copy may signal them (then a __syncthreads).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrive on the barrier, and tell it to expect `bytes` more from copies before its phase completes.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}
// One arrival on the barrier (a consumer handing a stage back).
__device__ __forceinline__ void mbarrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}
// Wait until the barrier's phase of parity `parity` (0, 1, 0, ... as it is reused) has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  }
}

// The box of an im2col map at channel c of the filter base (w, h) of image n, each pixel read at that base
// plus (off_w, off_h), into dst (shared memory, 1024-aligned for the 128-byte swizzle).
__device__ __forceinline__ void tma_load_im2col(uint32_t dst, const void* map, int c, int w, int h, int n,
                                                uint16_t off_w, uint16_t off_h, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n" ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c),
      "r"(w), "r"(h), "r"(n), "r"(barrier), "h"(off_w), "h"(off_h)
      : "memory");
}

// The box of a 3-d tiled map whose corner is at coordinates (x0, x1, x2), fastest first.
__device__ __forceinline__ void tma_load_tile(uint32_t dst, const void* map, int x0, int x1, int x2, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(x0), "r"(x1), "r"(x2),
      "r"(barrier)
      : "memory");
}

}  // namespace labops::cuda
