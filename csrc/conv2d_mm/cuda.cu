// CUDA kernels of im2col, col2im and conv2d_mm: the shared entry points
// (conv2d_mm/entry.h) with a CUDA launcher that runs the bodies of
// conv2d_mm/conv2d_mm.h. The GEMMs of conv2d_mm call cuBLAS directly (see Note
// [GEMMs without ATen's wrapper]).
//
// The conv2d_mm forward's rungs (forward_ladder in entry.h, Note [the ladder]):
//   1 textbook     forward_textbook_kernel: one thread per output element,
//                  forward_at (the direct convolution), grid-stride loop;
//   2 im2col_gemm  im2col_kernel, then one strided-batched cuBLAS GEMM per
//                  chunk of images; the default for every input.
#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../common/loop.h"
#include "entry.h"
#include "conv2d_mm.h"
#include "../common/cuda/device.cuh"
#include "../common/cuda/reduce.cuh"
#include "../common/cuda/vec.cuh"

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
    im2col_kernel(const conv2d_mm::Im2colShape s, const scalar_t* __restrict__ x, scalar_t* __restrict__ col,
                  int64_t items) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(item, items) {
    conv2d_mm::im2col_item<V, acc_t>(s, x, item, [&](int64_t offset, const scalar_t* values, int count) {
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

// Rung 1 of the forward, the textbook: thread i computes output element i
// with conv2d_mm.h's forward_at, as the CPU's rung 1 does. Every thread reads
// all C*kH*kW weights of its filter and the pixels under its window from
// global memory (through L1): no columns, but no reuse in registers either.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_textbook_kernel(const conv2d_mm::Im2colShape s, const scalar_t* __restrict__ x,
                            const scalar_t* __restrict__ w, const scalar_t* __restrict__ bias, int64_t out_channels,
                            scalar_t* __restrict__ out, int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(i, n) {
    out[i] = static_cast<scalar_t>(conv2d_mm::forward_at<acc_t>(s, x, w, bias, out_channels, i));
  }
}

// col2im: a gather, one thread per image pixel summing the column entries
// copied from it (col2im_gather); no atomics, deterministic.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    col2im_kernel(const conv2d_mm::Im2colShape s, const scalar_t* __restrict__ col, scalar_t* __restrict__ image,
                  int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  LABOPS_KERNEL_LOOP(index, n) {
    image[index] = static_cast<scalar_t>(conv2d_mm::col2im_gather<acc_t>(s, col, index));
  }
}

// out[b, o, l] = bias[o] for every image b and column l: the C that the
// forward GEMM then adds W . columns to (beta = 1). A block is threadIdx.y
// rows (b, o) of blockDim.x threads each, so the channel costs one division
// per row, not per element, and a short row (196 columns of a 14 x 14 plane)
// does not leave most of a block idle; each thread stores V columns at once.
template <int V, typename scalar_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    broadcast_bias_kernel(const scalar_t* __restrict__ bias, scalar_t* __restrict__ out, int64_t channels,
                          int64_t cols, int64_t channel_stride, int64_t image_stride, int64_t rows) {
  const int64_t packs = cols / V, row_step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += row_step) {
    const int64_t o = row % channels, b = row / channels;
    scalar_t* dst = out + b * image_stride + o * channel_stride;
    Pack<scalar_t, V> value;
#pragma unroll
    for (int u = 0; u < V; ++u) value.val[u] = bias[o];
    for (int64_t q = threadIdx.x; q < packs; q += blockDim.x) store_pack<V>(dst, q, value);
  }
}

// grad_output (nb, O, L) laid out as the (O, nb*L) rows the weight-gradient
// GEMM reads: rows[o, n*L + l] = g[n, o, l] (skipped when rows is null: one
// image is its own rows), and bias[o] = (bias[o] +) the sum of those values,
// the bias gradient (skipped when bias is null). One block per channel o reads
// its nb runs of L values in order and adds them in opmath_t, so the sum is the
// same on every run. g's runs start image_stride apart and hold L values at unit
// stride, L of a row apart when the chunk is a band of output rows.
constexpr int kGatherThreads = 512;
template <typename scalar_t>
__global__ void __launch_bounds__(kGatherThreads)
    gather_rows_kernel(const scalar_t* __restrict__ g, int64_t nb, int64_t L, int64_t image_stride,
                       int64_t channel_stride, scalar_t* __restrict__ rows, scalar_t* __restrict__ bias,
                       bool add_to_bias) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t o = blockIdx.x;
  const scalar_t* src = g + o * channel_stride;
  scalar_t* dst = rows == nullptr ? nullptr : rows + o * nb * L;
  acc_t sum = 0;
  for (int64_t n = 0; n < nb; ++n) {
#pragma unroll 4
    for (int64_t l = threadIdx.x; l < L; l += kGatherThreads) {
      const scalar_t v = src[n * image_stride + l];
      if (dst != nullptr) dst[n * L + l] = v;
      sum += static_cast<acc_t>(v);
    }
  }
  if (bias == nullptr) return;  // the same for every thread of the block
  __shared__ acc_t warp_sums[kGatherThreads / kWarpSize];
  sum = block_allreduce(sum, Plus<acc_t>{}, acc_t(0), warp_sums);
  if (threadIdx.x == 0) bias[o] = static_cast<scalar_t>(add_to_bias ? static_cast<acc_t>(bias[o]) + sum : sum);
}

// Note [GEMMs without ATen's wrapper]
// at::bmm and at::baddbmm check, resize and view their arguments on every
// call; on an H100 host that cost about 20 us per call, more than the whole
// of cuDNN's convolution on a small input (tools/host_time.py). The GEMMs here
// call cuBLAS directly, on the handle and stream ATen's GEMMs use
// (at::cuda::getCurrentCUDABlasHandle), with the precision ATen would pick:
// float32 on TF32 tensor cores only when torch allows it for matmuls,
// half and bfloat16 accumulated in float. cuBLAS is column-major: a row-major
// matrix M in memory reads as M^T, so a row-major C = A . B is computed as
// C^T = B^T . A^T, operands swapped.

// The cuBLAS types of scalar_t: its data type, the compute type, and the type
// of alpha and beta.
template <typename scalar_t>
struct CublasTypes;
template <>
struct CublasTypes<double> {
  static constexpr cudaDataType_t data = CUDA_R_64F;
  using scale_t = double;
  static cublasComputeType_t compute() { return CUBLAS_COMPUTE_64F; }
};
template <>
struct CublasTypes<float> {
  static constexpr cudaDataType_t data = CUDA_R_32F;
  using scale_t = float;
  static cublasComputeType_t compute() {
    return at::globalContext().allowTF32CuBLAS() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  }
};
template <>
struct CublasTypes<at::Half> {
  static constexpr cudaDataType_t data = CUDA_R_16F;
  using scale_t = float;
  static cublasComputeType_t compute() { return CUBLAS_COMPUTE_32F; }
};
template <>
struct CublasTypes<at::BFloat16> {
  static constexpr cudaDataType_t data = CUDA_R_16BF;
  using scale_t = float;
  static cublasComputeType_t compute() { return CUBLAS_COMPUTE_32F; }
};

int cublas_int(int64_t v, const char* what) {
  TORCH_CHECK(v <= std::numeric_limits<int>::max(), "labops.conv2d_mm: ", what, " = ", v,
              " is too large for one cuBLAS call");
  return static_cast<int>(v);
}

// Column-major C[b] = alpha * op(A[b]) . op(B[b]) + beta * C[b] for b < batch,
// op(X) = X ('n') or X^T ('t'); op(A) is m x k, op(B) k x n, C m x n.
template <typename scalar_t>
void gemm_batched(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, double alpha, const scalar_t* a,
                  int64_t lda, int64_t stride_a, const scalar_t* b, int64_t ldb, int64_t stride_b, double beta,
                  scalar_t* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  using T = CublasTypes<scalar_t>;
  const typename T::scale_t alpha_v = static_cast<typename T::scale_t>(alpha);
  const typename T::scale_t beta_v = static_cast<typename T::scale_t>(beta);
  const auto op = [](char t) { return t == 't' ? CUBLAS_OP_T : CUBLAS_OP_N; };
  const cublasStatus_t status = cublasGemmStridedBatchedEx(
      at::cuda::getCurrentCUDABlasHandle(), op(trans_a), op(trans_b), cublas_int(m, "m"), cublas_int(n, "n"),
      cublas_int(k, "k"), &alpha_v, a, T::data, cublas_int(lda, "lda"), stride_a, b, T::data, cublas_int(ldb, "ldb"),
      stride_b, &beta_v, c, T::data, cublas_int(ldc, "ldc"), stride_c, cublas_int(batch, "batch"), T::compute(),
      CUBLAS_GEMM_DEFAULT);
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "labops.conv2d_mm: cuBLAS GEMM failed: ",
              cublasGetStatusString(status));
}

// A row-major matrix view cuBLAS can read: unit column stride and a row
// stride (leading dimension) of at least the row length; else a copy that is.
at::Tensor gemm_operand(const at::Tensor& m) {
  const bool ok = (m.stride(-1) == 1 || m.size(-1) == 1) && (m.stride(-2) >= m.size(-1) || m.size(-2) == 1);
  return ok ? m : m.contiguous();
}

// The leading dimension cuBLAS gets for a row-major matrix view: its row
// stride. A single row never steps by it (its stride may be anything), but
// cuBLAS still checks it against the row length.
int64_t leading_dim(const at::Tensor& m) {
  return m.size(-2) == 1 ? std::max<int64_t>(1, m.size(-1)) : m.stride(-2);
}

struct Conv2dMMLauncher {
  // Columns of at most this many bytes at a time (the benchmark layers need
  // up to 231 MB in float32, so they run as one batched GEMM: one
  // strided-batched cuBLAS call instead of THNN's N small GEMMs, whose
  // L = 196..3136 columns each are too few to fill an H100; not yet timed
  // against the per-image loop on a GPU).
  static constexpr int64_t kColumnBudgetBytes = int64_t(512) << 20;

  // The forward's rung (forward_ladder, entry.h): im2col_gemm unless the textbook is forced; both take any input.
  static int forward_rung(int forced) {
    return conv2d_mm::forward_ladder().run(c10::DeviceType::CUDA, forced, 2, [](int) { return std::string(); });
  }

  template <typename scalar_t>
  static void forward_textbook(const conv2d_mm::Im2colShape& s, const scalar_t* x, const scalar_t* w,
                               const scalar_t* bias, int64_t out_channels, scalar_t* out) {
    const int64_t n = s.batch * out_channels * s.blocks();
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    forward_textbook_kernel<scalar_t><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(s, x, w, bias, out_channels,
                                                                                        out, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <int V, typename scalar_t>
  static void launch_im2col(const conv2d_mm::Im2colShape& s, const scalar_t* x, scalar_t* col) {
    const int64_t items = s.planes() * ceil_div<int64_t>(s.blocks(), V);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    im2col_kernel<V, scalar_t><<<get_blocks(items, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(s, x, col, items);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t>
  static void im2col(const conv2d_mm::Im2colShape& s, const scalar_t* x, scalar_t* col) {
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
  static void launch_broadcast_bias(const scalar_t* bias, const at::Tensor& out, int64_t nb, int64_t O, int64_t L) {
    const int64_t rows = nb * O;
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    // The widest store (16 bytes down to one element) that every row's start and length allow.
    const auto fits = [&](int v) {
      return L % v == 0 && out.stride(1) % v == 0 && out.stride(0) % v == 0 && is_aligned(dst, v * sizeof(scalar_t));
    };
    const auto launch = [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      const int64_t x = std::min<int64_t>(kThreadsPerBlock, ceil_div<int64_t>(L / V, 32) * 32);
      const dim3 block(static_cast<unsigned>(x), static_cast<unsigned>(kThreadsPerBlock / x));
      const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(rows, block.y), int64_t(multiprocessor_count()) * 32);
      cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
      broadcast_bias_kernel<V, scalar_t><<<static_cast<unsigned>(blocks), block, 0, stream>>>(
          bias, dst, O, L, out.stride(1), out.stride(0), rows);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    constexpr int kVec = vec_width<scalar_t>();
    if (fits(kVec)) launch(std::integral_constant<int, kVec>{});
    else if (kVec >= 4 && fits(kVec / 2)) launch(std::integral_constant<int, std::max(1, kVec / 2)>{});
    else if (kVec >= 8 && fits(kVec / 4)) launch(std::integral_constant<int, std::max(1, kVec / 4)>{});
    else launch(std::integral_constant<int, 1>{});
  }

  // out[b] = w . cols[b] (+ bias), out (nb, O, Lc) with any row stride (a band of the output).
  static void gemm_forward(const at::Tensor& out, const at::Tensor& weight, const at::Tensor& columns,
                           const std::optional<at::Tensor>& bias) {
    const at::Tensor w = gemm_operand(weight), cols = gemm_operand(columns);
    const int64_t nb = cols.size(0), O = w.size(0), K = w.size(1), L = cols.size(2);
    TORCH_INTERNAL_ASSERT(out.stride(2) == 1, "conv2d_mm: the output's columns must be contiguous");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "labops_conv2d_mm_gemm", [&] {
      if (bias.has_value()) launch_broadcast_bias(bias->contiguous().const_data_ptr<scalar_t>(), out, nb, O, L);
      // out^T (L x O) = cols^T (L x K) . w^T (K x O); w is shared by the batch (stride 0).
      gemm_batched<scalar_t>('n', 'n', L, O, K, 1.0, cols.const_data_ptr<scalar_t>(), leading_dim(cols),
                             cols.stride(0), w.const_data_ptr<scalar_t>(), leading_dim(w), 0,
                             bias.has_value() ? 1.0 : 0.0, out.mutable_data_ptr<scalar_t>(), leading_dim(out),
                             out.stride(0), nb);
    });
  }

  // cols[b] = w^T . g[b], cols (nb, K, L) contiguous.
  static void gemm_backward_input(const at::Tensor& cols, const at::Tensor& weight, const at::Tensor& grad) {
    const at::Tensor w = gemm_operand(weight), g = gemm_operand(grad);
    const int64_t nb = g.size(0), O = w.size(0), K = w.size(1), L = g.size(2);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, cols.scalar_type(), "labops_conv2d_mm_gemm", [&] {
      // cols^T (L x K) = g^T (L x O) . w (O x K); w's memory reads as w^T, hence 't'.
      gemm_batched<scalar_t>('n', 't', L, K, O, 1.0, g.const_data_ptr<scalar_t>(), leading_dim(g), g.stride(0),
                             w.const_data_ptr<scalar_t>(), leading_dim(w), 0, 0.0, cols.mutable_data_ptr<scalar_t>(),
                             leading_dim(cols), cols.stride(0), nb);
    });
  }

  // gw = beta * gw + scale * g . cols^T, gw (O, K), g (O, M), cols (K, M); beta 0: gw's old values are not used.
  static void gemm_acc_grad_weight(const at::Tensor& gw, const at::Tensor& grad, const at::Tensor& columns,
                                   double scale, double beta) {
    const at::Tensor g = gemm_operand(grad), cols = gemm_operand(columns);
    const int64_t O = g.size(0), M = g.size(1), K = cols.size(0);
    TORCH_INTERNAL_ASSERT(gw.stride(1) == 1 && leading_dim(gw) >= K, "conv2d_mm: grad_weight must be row-major");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gw.scalar_type(), "labops_conv2d_mm_gemm", [&] {
      // beta = 0 runs as beta = 1 onto zeros (a memset, no kernel of ATen's): the same cuBLAS call as
      // accGradParameters into a zeroed buffer, so autograd's weight gradient has its bits exactly.
      if (beta == 0.0) {
        C10_CUDA_CHECK(cudaMemset2DAsync(gw.mutable_data_ptr<scalar_t>(), leading_dim(gw) * sizeof(scalar_t), 0,
                                         K * sizeof(scalar_t), O, c10::cuda::getCurrentCUDAStream()));
      }
      // gw^T (K x O) += scale * cols (K x M) . g^T (M x O); cols' memory reads as cols^T, hence 't'.
      gemm_batched<scalar_t>('t', 'n', K, O, M, scale, cols.const_data_ptr<scalar_t>(), leading_dim(cols), 0,
                             g.const_data_ptr<scalar_t>(), leading_dim(g), 0, 1.0, gw.mutable_data_ptr<scalar_t>(),
                             leading_dim(gw), 0, 1);
    });
  }

  // The chunks run in order on the stream, so the kernel that lays grad_output out can also sum the
  // bias gradient: one launch where a copy and a sum would be two ATen ops (tools/host_pieces.py).
  static constexpr bool kSumsBiasWhileGathering = true;
  static void gather_rows(const at::Tensor& g, const at::Tensor& rows, const at::Tensor& bias, bool add_to_bias) {
    const int64_t nb = g.size(0), O = g.size(1), L = g.size(2);
    if ((!rows.defined() && !bias.defined()) || O == 0) return;
    TORCH_INTERNAL_ASSERT(g.stride(2) == 1 && (!rows.defined() || rows.is_contiguous()),
                          "conv2d_mm: gather_rows reads and writes rows at unit stride");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "labops_conv2d_mm_gather_rows", [&] {
      cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
      gather_rows_kernel<scalar_t><<<static_cast<unsigned>(O), kGatherThreads, 0, stream>>>(
          g.const_data_ptr<scalar_t>(), nb, L, g.stride(0), g.stride(1),
          rows.defined() ? rows.mutable_data_ptr<scalar_t>() : nullptr,
          bias.defined() ? bias.mutable_data_ptr<scalar_t>() : nullptr, add_to_bias);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }

  template <typename scalar_t>
  static void col2im(const conv2d_mm::Im2colShape& s, const scalar_t* col, scalar_t* image) {
    const int64_t n = s.image_numel();
    if (n == 0) return;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    col2im_kernel<scalar_t><<<get_blocks(n), kThreadsPerBlock, 0, stream>>>(s, col, image, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::conv2d_mm::Entry<labops::cuda::Conv2dMMLauncher>::register_kernels(m);
}
