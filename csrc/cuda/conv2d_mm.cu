// CUDA kernels of im2col, col2im and conv2d_mm: the shared entry points
// (ops/conv2d_mm_ops.h) with a CUDA launcher that runs the bodies of
// ops/conv2d_mm.h. The GEMMs of conv2d_mm go to cuBLAS through at::bmm.
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../common/loop.h"
#include "../ops/conv2d_mm_ops.h"
#include "../ops/conv2d_mm.h"
#include "device.cuh"
#include "vec.cuh"

namespace labops::cuda {

// Note [im2col work items]
// One thread per work item = V consecutive column positions of one plane, for
// all kH*kW taps (Caffe's thread-per-window, widened). For each tap the V
// values are contiguous in the columns, so when L is a multiple of V a thread
// stores them as one vector (16 bytes; 8 for 2-byte types); across a warp the
// stores of one tap are contiguous. The loads are the V pixels a tap sees,
// read through L1 (neighbouring taps and threads reuse them). F.unfold, by
// contrast, launches one kernel per image and stores one element at a time.
template <int V, typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    im2col_kernel(const ops::conv2d_mm::Im2colShape s, const scalar_t* __restrict__ x, scalar_t* __restrict__ col,
                  int64_t items) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(item, items) {
    ops::conv2d_mm::im2col_item<V, acc_t>(s, x, item, [&](int64_t offset, const scalar_t* values, int count) {
      if constexpr (V == 1) {
        col[offset] = values[0];
      } else {  // the launcher picks V > 1 only when every item is full and aligned
        Pack<scalar_t, V> v;
#pragma unroll
        for (int u = 0; u < V; ++u) v.val[u] = values[u];
        store_pack<V>(col + offset, v);
      }
    });
  }
}

// col2im: a gather, one thread per image pixel summing the column entries
// copied from it (col2im_gather); no atomics, deterministic.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    col2im_kernel(const ops::conv2d_mm::Im2colShape s, const scalar_t* __restrict__ col, scalar_t* __restrict__ image,
                  int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(index, n) {
    image[index] = static_cast<scalar_t>(ops::conv2d_mm::col2im_gather<acc_t>(s, col, index));
  }
}

struct Conv2dMMLauncher {
  // Columns of at most this many bytes at a time (the benchmark layers need
  // up to 231 MB in float32, so they run as one batched GEMM: one
  // strided-batched cuBLAS call instead of THNN's N small GEMMs, whose
  // L = 196..3136 columns each are too few to fill an H100; not yet timed
  // against the per-image loop on a GPU).
  static constexpr int64_t kColumnBudgetBytes = int64_t(512) << 20;

  template <int V, typename scalar_t>
  static void launch_im2col(const ops::conv2d_mm::Im2colShape& s, const scalar_t* x, scalar_t* col) {
    const int64_t items = s.planes() * ceil_div<int64_t>(s.blocks(), V);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    im2col_kernel<V, scalar_t><<<get_blocks(items, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(s, x, col, items);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t>
  static void im2col(const ops::conv2d_mm::Im2colShape& s, const scalar_t* x, scalar_t* col) {
    if (s.column_numel() == 0) return;
    // 16-byte stores (4 floats), but 8-byte ones for 2-byte types: a thread
    // then gathers 4 pixels per tap instead of 8, which measured 1.5x faster
    // for float16 on an H100 (and 14x14 planes, 196 positions, divide by 4).
    constexpr int V = sizeof(scalar_t) == 2 ? 4 : vec_width<scalar_t>();
    constexpr int kStoreBytes = V * sizeof(scalar_t);
    // Vector stores need every (plane, tap) row segment to start on a
    // multiple of V elements of a suitably aligned buffer.
    const bool vec = s.blocks() % V == 0 && s.col_row_stride % V == 0 && s.col_batch_stride % V == 0 &&
                     is_aligned(col, kStoreBytes);
    if (vec) {
      launch_im2col<V>(s, x, col);
    } else {
      launch_im2col<1>(s, x, col);
    }
  }

  template <typename scalar_t>
  static void col2im(const ops::conv2d_mm::Im2colShape& s, const scalar_t* col, scalar_t* image) {
    const int64_t n = s.image_numel();
    if (n == 0) return;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    col2im_kernel<scalar_t><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(s, col, image, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::ops::conv2d_mm::Conv2dMMOps<labops::cuda::Conv2dMMLauncher>::register_kernels(m);
}
