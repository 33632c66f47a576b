// CUDA kernels for batch normalization: the bodies of batch_norm/batch_norm.h, the entry points of
// batch_norm/entry.h.
//
// The two reductions (the statistics in training, the parameter gradients) are two kernels each:
// channel_partial_sums_kernel, then finish_statistics_kernel or finish_grad_sums_kernel; see
// Note [channel partial sums]. The two elementwise passes (y, grad_input) are per_value_kernel, a
// grid-stride loop over 16-byte packs. A training forward is three launches (sums, finish, y), a
// backward that wants every gradient three more (sums, finish, grad_input): x is read three times
// and grad_output twice, where a fused kernel keeping a channel in shared memory could read them once.
#include <algorithm>
#include <cstdint>

#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../common/cuda/device.cuh"
#include "../common/cuda/reduce.cuh"
#include "../common/cuda/vec.cuh"
#include "../common/fast_divider.h"
#include "../common/loop.h"
#include "entry.h"

namespace labops::batch_norm {
namespace {

using cuda::ceil_div;
using cuda::fits_int32;
using cuda::is_aligned;
using cuda::load_pack;
using cuda::Pack;
using cuda::store_pack;
using cuda::vec_width;

constexpr int kThreads = kThreadsPerBlock;
constexpr int kLoadsInFlight = 4;
// gridDim.y's limit: channels past it are taken by the same blocks in a loop.
constexpr int64_t kMaxGridY = 65535;

// Note [channel partial sums]
// A channel's M = N*S values are spread over N planes S values apart, and a layer may have few
// channels for many values (64 channels of 32 x 56 x 56 in a ResNet's first stage, on a GPU of 132
// multiprocessors): one block per channel would leave half the GPU idle. So `splits` blocks share
// each channel (blockIdx.x: the split, blockIdx.y: the channel); thread t of split b sums packs
// k = b*kThreads + t, then k + splits*kThreads, ... (kLoadsInFlight loads in flight), the block adds
// its threads' sums (block_sum_store, reduce.cuh) and writes them to partial[c][b]. A second kernel,
// one thread per channel, adds the splits in split order. No atomics: the sums are the same bits on
// every run. Splits are chosen to give the GPU about four blocks per multiprocessor, each thread at
// least 8 packs.

// The partial sums of every channel: of (x - shift, its square) for the statistics (Note [shifted
// sums]), or with kGrad of (g, g (x - mean)) for the parameter gradients. Counts in packs of kVec
// values (S a multiple of kVec); Divider divides by the packs per plane.
template <bool kGrad, typename scalar_t, int kVec, typename Divider>
__global__ void __launch_bounds__(kThreads)
    channel_partial_sums_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ grad,
                                const at::opmath_type<scalar_t>* __restrict__ mean,
                                at::opmath_type<scalar_t>* __restrict__ partial, int64_t channels, int64_t plane,
                                typename Divider::index_t packs_per_channel, Divider packs_per_plane) {
  using acc_t = at::opmath_type<scalar_t>;
  using index_t = typename Divider::index_t;
  using P = Pack<scalar_t, kVec>;
  const index_t step = static_cast<index_t>(gridDim.x) * kThreads;
  // The loop bound is the same for the whole block (block_sum_store syncs).
  for (int64_t c = blockIdx.y; c < channels; c += gridDim.y) {
    const acc_t center = kGrad ? mean[c] : static_cast<acc_t>(x[first_value_of_channel(c, channels, plane)]);
    acc_t a = acc_t(0), b = acc_t(0);
    for (index_t k0 = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x; k0 < packs_per_channel;
         k0 += step * kLoadsInFlight) {
      P xs[kLoadsInFlight], gs[kLoadsInFlight];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const index_t k = k0 + u * step;
        if (k < packs_per_channel) {
          const index_t offset = channel_value_offset(k, static_cast<index_t>(c), static_cast<index_t>(channels),
                                                      packs_per_plane);
          xs[u] = load_pack<kVec>(x, offset);
          if constexpr (kGrad) gs[u] = load_pack<kVec>(grad, offset);
        }
      }
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        if (k0 + u * step >= packs_per_channel) continue;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const acc_t xv = static_cast<acc_t>(xs[u].val[j]);
          if constexpr (kGrad) {
            add_to_grad_sums(a, b, static_cast<acc_t>(gs[u].val[j]), xv, center);
          } else {
            add_to_moments(a, b, xv, center);
          }
        }
      }
    }
    const acc_t sums[2] = {a, b};
    cuda::block_sum_store<2, kThreads>(sums, partial + (c * gridDim.x + blockIdx.x) * 2);
  }
}

// Channel c's two sums: its splits' partial sums, added in split order.
template <typename acc_t>
__device__ __forceinline__ void add_partials(const acc_t* __restrict__ partial, int64_t c, int64_t splits, acc_t& a,
                                             acc_t& b) {
  a = acc_t(0);
  b = acc_t(0);
  for (int64_t split = 0; split < splits; ++split) {
    a += partial[(c * splits + split) * 2];
    b += partial[(c * splits + split) * 2 + 1];
  }
}

template <typename scalar_t, typename param_t, typename acc_t>
__global__ void finish_statistics_kernel(const scalar_t* __restrict__ x, const acc_t* __restrict__ partial,
                                         int64_t splits, int64_t channels, int64_t plane, int64_t count, double eps,
                                         double momentum, param_t* running_mean, param_t* running_var,
                                         acc_t* __restrict__ save_mean, acc_t* __restrict__ save_invstd) {
  LABOPS_KERNEL_LOOP(c, channels) {
    acc_t sum, sum_sq;
    add_partials(partial, c, splits, sum, sum_sq);
    const acc_t shift = static_cast<acc_t>(x[first_value_of_channel(c, channels, plane)]);
    finish_statistics(sum, sum_sq, shift, count, eps, momentum, running_mean, running_var, c, save_mean, save_invstd);
  }
}

template <typename acc_t>
__global__ void finish_grad_sums_kernel(const acc_t* __restrict__ partial, int64_t splits, int64_t channels,
                                        const acc_t* __restrict__ save_invstd, acc_t* __restrict__ sum_grad_xhat,
                                        acc_t* __restrict__ sum_grad) {
  LABOPS_KERNEL_LOOP(c, channels) {
    acc_t sum_g, sum_g_centered;
    add_partials(partial, c, splits, sum_g, sum_g_centered);
    sum_grad[c] = sum_g;
    sum_grad_xhat[c] = grad_weight_of(sum_g_centered, save_invstd[c]);
  }
}

template <typename param_t, typename acc_t>
__global__ void running_statistics_kernel(const param_t* __restrict__ running_mean,
                                          const param_t* __restrict__ running_var, int64_t channels, double eps,
                                          acc_t* __restrict__ save_mean, acc_t* __restrict__ save_invstd) {
  LABOPS_KERNEL_LOOP(c, channels) { running_statistics(running_mean, running_var, eps, c, save_mean, save_invstd); }
}

// What the elementwise passes read and write; null where a pass does not use it.
template <typename scalar_t, typename param_t>
struct ValueArgs {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* x;
  const scalar_t* grad;  // backward
  const param_t* weight;
  const param_t* bias;  // forward
  const acc_t* mean;
  const acc_t* invstd;
  const acc_t* sum_grad_xhat;  // backward, training
  const acc_t* sum_grad;       // backward, training
  bool training;
  int64_t count;
  scalar_t* out;  // y, or grad_input
};

// y (or, kBackward, grad_input) for every pack of kVec values: a grid-stride loop. S is a multiple of
// kVec, so a pack lies in one plane and has one channel.
template <bool kBackward, int kVec, typename Divider, typename scalar_t, typename param_t>
__global__ void __launch_bounds__(kThreads)
    per_value_kernel(ValueArgs<scalar_t, param_t> a, typename Divider::index_t packs, Divider packs_per_plane,
                     Divider per_channels) {
  using acc_t = at::opmath_type<scalar_t>;
  using index_t = typename Divider::index_t;
  using P = Pack<scalar_t, kVec>;
  const index_t step = static_cast<index_t>(gridDim.x) * kThreads;
  for (index_t q = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x; q < packs; q += step) {
    const int64_t c = channel_of(q, packs_per_plane, per_channels);
    const P xs = load_pack<kVec>(a.x, q);
    const acc_t mean = a.mean[c];
    P out;
    if constexpr (kBackward) {
      const GradInputFactors<acc_t> f =
          grad_input_factors(a.weight, a.invstd, a.sum_grad_xhat, a.sum_grad, a.training, a.count, c);
      const P gs = load_pack<kVec>(a.grad, q);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        out.val[j] = static_cast<scalar_t>(grad_input(static_cast<acc_t>(gs.val[j]), static_cast<acc_t>(xs.val[j]),
                                                      mean, f.scale, f.grad_shift, f.centered_factor));
      }
    } else {
      const acc_t scale = channel_scale(a.weight, a.invstd, c), bias = channel_bias<acc_t>(a.bias, c);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        out.val[j] = static_cast<scalar_t>(normalize(static_cast<acc_t>(xs.val[j]), mean, scale, bias));
      }
    }
    store_pack<kVec>(a.out, q, out);
  }
}

// ---- launches ----

template <typename acc_t>
struct PartialSums {
  at::Tensor buffer;  // (channels, splits, 2) of acc_t
  int64_t splits;
  const acc_t* data() const { return buffer.const_data_ptr<acc_t>(); }
};

template <bool kGrad, int kVec, typename scalar_t, typename acc_t>
PartialSums<acc_t> partial_sums_with(const Shape& s, const scalar_t* x, const scalar_t* grad, const acc_t* mean,
                                     cudaStream_t stream) {
  const int64_t packs_per_channel = s.count() / kVec;
  const int64_t channel_blocks = std::min(s.channels, kMaxGridY);
  int64_t splits = ceil_div<int64_t>(4 * cuda::multiprocessor_count(), channel_blocks);
  splits = std::min<int64_t>(splits, ceil_div<int64_t>(packs_per_channel, int64_t(kThreads) * 8));
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, 1024));
  at::Tensor buffer = at::empty({s.channels, splits, 2}, at::TensorOptions()
                                                              .dtype(c10::CppTypeToScalarType<acc_t>::value)
                                                              .device(at::kCUDA, c10::cuda::current_device()));
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(channel_blocks));
  acc_t* out = buffer.mutable_data_ptr<acc_t>();
  // The loop's last step passes the end by up to kLoadsInFlight grids of packs.
  if (fits_int32(s.numel() / kVec + splits * kThreads * kLoadsInFlight)) {
    channel_partial_sums_kernel<kGrad, scalar_t, kVec, FastDivider><<<grid, kThreads, 0, stream>>>(
        x, grad, mean, out, s.channels, s.plane, static_cast<uint32_t>(packs_per_channel),
        FastDivider(static_cast<uint32_t>(s.plane / kVec)));
  } else {
    channel_partial_sums_kernel<kGrad, scalar_t, kVec, PlainDivider><<<grid, kThreads, 0, stream>>>(
        x, grad, mean, out, s.channels, s.plane, packs_per_channel, PlainDivider(s.plane / kVec));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {buffer, splits};
}

// 16-byte packs when every plane is a whole number of them and the pointers allow, else single values.
template <bool kGrad, typename scalar_t, typename acc_t>
PartialSums<acc_t> partial_sums(const Shape& s, const scalar_t* x, const scalar_t* grad, const acc_t* mean,
                                cudaStream_t stream) {
  constexpr int kVec = vec_width<scalar_t>();
  const bool packed = s.plane % kVec == 0 && is_aligned(x) && (!kGrad || is_aligned(grad));
  return packed ? partial_sums_with<kGrad, kVec>(s, x, grad, mean, stream)
                : partial_sums_with<kGrad, 1>(s, x, grad, mean, stream);
}

template <bool kBackward, int kVec, typename scalar_t, typename param_t>
void per_value_with(const Shape& s, const ValueArgs<scalar_t, param_t>& a, cudaStream_t stream) {
  const int64_t packs = s.numel() / kVec;
  const int64_t blocks =
      std::max<int64_t>(1, std::min<int64_t>(ceil_div<int64_t>(packs, kThreads), cuda::multiprocessor_count() * 16));
  if (fits_int32(packs + blocks * kThreads)) {  // the loop's last step passes the end by up to a grid
    per_value_kernel<kBackward, kVec, FastDivider><<<blocks, kThreads, 0, stream>>>(
        a, static_cast<uint32_t>(packs), FastDivider(static_cast<uint32_t>(s.plane / kVec)),
        FastDivider(static_cast<uint32_t>(s.channels)));
  } else {
    per_value_kernel<kBackward, kVec, PlainDivider><<<blocks, kThreads, 0, stream>>>(
        a, packs, PlainDivider(s.plane / kVec), PlainDivider(s.channels));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <bool kBackward, typename scalar_t, typename param_t>
void per_value(const Shape& s, const ValueArgs<scalar_t, param_t>& a) {
  constexpr int kVec = vec_width<scalar_t>();
  const bool packed = s.plane % kVec == 0 && is_aligned(a.x) && is_aligned(a.out) && (!kBackward || is_aligned(a.grad));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (packed) {
    per_value_with<kBackward, kVec>(s, a, stream);
  } else {
    per_value_with<kBackward, 1>(s, a, stream);
  }
}

struct CudaLauncher {
  template <typename scalar_t, typename param_t, typename acc_t = at::opmath_type<scalar_t>>
  static void statistics(const Shape& s, const scalar_t* x, param_t* running_mean, param_t* running_var,
                         double momentum, double eps, acc_t* save_mean, acc_t* save_invstd) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const PartialSums<acc_t> sums = partial_sums<false>(s, x, static_cast<const scalar_t*>(nullptr),
                                                        static_cast<const acc_t*>(nullptr), stream);
    finish_statistics_kernel<<<get_blocks(s.channels), kThreads, 0, stream>>>(
        x, sums.data(), sums.splits, s.channels, s.plane, s.count(), eps, momentum, running_mean, running_var,
        save_mean, save_invstd);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename param_t, typename acc_t>
  static void running_statistics(const Shape& s, const param_t* running_mean, const param_t* running_var,
                                 double eps, acc_t* save_mean, acc_t* save_invstd) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    running_statistics_kernel<<<get_blocks(s.channels), kThreads, 0, stream>>>(running_mean, running_var,
                                                                               s.channels, eps, save_mean,
                                                                               save_invstd);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t, typename param_t, typename acc_t = at::opmath_type<scalar_t>>
  static void normalize(const Shape& s, const scalar_t* x, const param_t* weight, const param_t* bias,
                        const acc_t* save_mean, const acc_t* save_invstd, scalar_t* y) {
    per_value<false>(s, ValueArgs<scalar_t, param_t>{x, nullptr, weight, bias, save_mean, save_invstd, nullptr,
                                                      nullptr, false, s.count(), y});
  }

  template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
  static void grad_sums(const Shape& s, const scalar_t* grad, const scalar_t* x, const acc_t* save_mean,
                        const acc_t* save_invstd, acc_t* sum_grad_xhat, acc_t* sum_grad) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const PartialSums<acc_t> sums = partial_sums<true>(s, x, grad, save_mean, stream);
    finish_grad_sums_kernel<<<get_blocks(s.channels), kThreads, 0, stream>>>(sums.data(), sums.splits, s.channels,
                                                                             save_invstd, sum_grad_xhat, sum_grad);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t, typename param_t, typename acc_t = at::opmath_type<scalar_t>>
  static void grad_input(const Shape& s, const scalar_t* grad, const scalar_t* x, const param_t* weight,
                         const acc_t* save_mean, const acc_t* save_invstd, const acc_t* sum_grad_xhat,
                         const acc_t* sum_grad, bool training, scalar_t* grad_in) {
    per_value<true>(s, ValueArgs<scalar_t, param_t>{x, grad, weight, nullptr, save_mean, save_invstd, sum_grad_xhat,
                                                     sum_grad, training, s.count(), grad_in});
  }
};

}  // namespace
}  // namespace labops::batch_norm

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::batch_norm::Entry<labops::batch_norm::CudaLauncher>::register_kernels(m);
}
