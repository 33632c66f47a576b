// CUDA kernels for batch normalization: the bodies of batch_norm/batch_norm.h, the entry points of
// batch_norm/entry.h.
//
// Forward, three rungs (forward_ladder in entry.h, Note [the ladder] in common/ladder.h):
//   1 textbook           textbook_statistics_kernel, one thread per channel running channel_statistics
//                        (batch_norm.h), then textbook_normalize_kernel, one thread per value.
//   2 split_channels     the statistics in two kernels, channel_partial_sums_kernel then
//                        finish_statistics_kernel (Note [channel partial sums]), then per_value_kernel,
//                        a grid-stride loop over 16-byte packs: three launches in training. The default
//                        for fewer than 64 channels.
//   3 block_per_channel  block_per_channel_kernel (Note [one block per channel]): one launch, a block
//                        per channel for its statistics and y. The default from 64 channels.
// In evaluation rungs 1 and 2 take the statistics from running_statistics_kernel.
//
// The backward has no rungs: its reduction (the parameter gradients) is channel_partial_sums_kernel
// then finish_grad_sums_kernel, its elementwise pass (grad_input) per_value_kernel. A backward that
// wants every gradient is three launches (sums, finish, grad_input) reading x and grad_output twice.
#include <algorithm>
#include <cstdint>
#include <string>

#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../common/cuda/device.cuh"
#include "../common/empty.h"
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
using cuda::load_pack_evict_first;
using cuda::Pack;
using cuda::store_pack;
using cuda::store_pack_evict_first;
using cuda::vec_width;

constexpr int kThreads = kThreadsPerBlock;
constexpr int kLoadsInFlight = 4;
// gridDim.y's limit: channels past it are taken by the same blocks in a loop.
constexpr int64_t kMaxGridY = 65535;

// ---- rung 1: the textbook ----

// One thread per channel: batch_norm.h's channel_statistics, as the CPU's textbook runs it. A warp's
// 32 threads read 32 channels a plane apart, and a channel of 10^5 values is 10^5 dependent adds in
// one thread: the slowest rung by far, the one every other is tested against.
template <typename scalar_t, typename param_t, typename acc_t>
__global__ void textbook_statistics_kernel(const scalar_t* __restrict__ x, int64_t batch, int64_t channels,
                                           int64_t plane, double eps, double momentum, param_t* running_mean,
                                           param_t* running_var, acc_t* __restrict__ save_mean,
                                           acc_t* __restrict__ save_invstd) {
  LABOPS_KERNEL_LOOP(c, channels) {
    channel_statistics(x, batch, channels, plane, c, eps, momentum, running_mean, running_var, save_mean, save_invstd);
  }
}

// One thread per value of y: a grid-stride loop, one value per load.
template <typename scalar_t, typename param_t, typename acc_t>
__global__ void textbook_normalize_kernel(const scalar_t* __restrict__ x, const param_t* __restrict__ weight,
                                          const param_t* __restrict__ bias, const acc_t* __restrict__ mean,
                                          const acc_t* __restrict__ invstd, int64_t numel, PlainDivider per_plane,
                                          PlainDivider per_channels, scalar_t* __restrict__ y) {
  LABOPS_KERNEL_LOOP(i, numel) {
    const int64_t c = channel_of(i, per_plane, per_channels);
    y[i] = static_cast<scalar_t>(
        normalize(static_cast<acc_t>(x[i]), mean[c], channel_scale(weight, invstd, c), channel_bias<acc_t>(bias, c)));
  }
}

// ---- rung 2: the statistics split over blocks, then y ----

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

// ---- rung 3: one block per channel ----

// Note [one block per channel]
// Rung 2 spends three launches on a training forward and reads x twice, the second time after the
// whole of x has passed through L2. Here one block owns a channel and does its whole forward in one
// launch: the shifted sums over the channel's packs (Note [shifted sums]), a block sum in a fixed
// order (block_allreduce, reduce.cuh), finish_statistics by thread 0, then y. The y pass reads the
// channel again right after its block read it, so the values are likely still in L2 (the channels
// worked on at once are at most the blocks resident: 64 channels of 32 x 56 x 56 float32 are 26 MB,
// an H100's L2 50 MB), and walks the channel backwards, so the values read last come first; those
// second reads and y's stores are evict-first (Note [evict-first accesses]): nobody reads them again
// here, and the lines of channels still waiting for their second read stay. No partial sums buffer,
// no atomics: the sums are the same bits on every run.
// The price: a block per channel leaves multiprocessors idle when there are fewer channels than
// multiprocessors (64 channels on an H100's 132). So the blocks are large, 1024 threads each keeping
// kFusedLoadsInFlight 16-byte loads in flight (64 KB per block, at most 64 registers a thread: one
// block per multiprocessor), to stream from HBM with fewer multiprocessors; a layer of few channels
// with many values each is rung 2's, which splits a channel over many blocks.
// In evaluation the statistics are the running ones: thread 0 reads them and the block does the y pass
// alone, which gains nothing over rung 2's grid-stride loop (that is why rung 2 is eval's default).
constexpr int kFusedThreads = 1024;
constexpr int kFusedLoadsInFlight = 4;

// Counts in packs of kVec values (S a multiple of kVec); Divider divides by the packs per plane.
template <int kVec, typename Divider, typename scalar_t, typename param_t>
__global__ void __launch_bounds__(kFusedThreads)
    block_per_channel_kernel(ForwardArgs<scalar_t, param_t> a, int64_t channels, int64_t plane, int64_t count,
                             typename Divider::index_t packs_per_channel, Divider packs_per_plane) {
  using acc_t = at::opmath_type<scalar_t>;
  using index_t = typename Divider::index_t;
  using P = Pack<scalar_t, kVec>;
  constexpr int kStep = kFusedThreads * kFusedLoadsInFlight;
  __shared__ acc_t warp_sums[kFusedThreads / cuda::kWarpSize];
  // The loop bound is the same for the whole block (block_allreduce and __syncthreads).
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    const index_t ci = static_cast<index_t>(c), channels_i = static_cast<index_t>(channels);
    if (a.training) {
      const acc_t shift = static_cast<acc_t>(a.x[first_value_of_channel(c, channels, plane)]);
      acc_t sum = acc_t(0), sum_sq = acc_t(0);
      for (index_t k0 = threadIdx.x; k0 < packs_per_channel; k0 += kStep) {
        P xs[kFusedLoadsInFlight];
#pragma unroll
        for (int u = 0; u < kFusedLoadsInFlight; ++u) {
          const index_t k = k0 + u * kFusedThreads;
          if (k < packs_per_channel) xs[u] = load_pack<kVec>(a.x, channel_value_offset(k, ci, channels_i, packs_per_plane));
        }
#pragma unroll
        for (int u = 0; u < kFusedLoadsInFlight; ++u) {
          if (k0 + u * kFusedThreads >= packs_per_channel) continue;
#pragma unroll
          for (int j = 0; j < kVec; ++j) add_to_moments(sum, sum_sq, static_cast<acc_t>(xs[u].val[j]), shift);
        }
      }
      // Every thread gets the same bits (Note [fixed-order reductions]); thread 0 writes them.
      sum = cuda::block_allreduce(sum, cuda::Plus<acc_t>{}, acc_t(0), warp_sums);
      sum_sq = cuda::block_allreduce(sum_sq, cuda::Plus<acc_t>{}, acc_t(0), warp_sums);
      if (threadIdx.x == 0) {
        finish_statistics(sum, sum_sq, shift, count, a.eps, a.momentum, a.running_mean, a.running_var, c,
                          a.save_mean, a.save_invstd);
      }
    } else if (threadIdx.x == 0) {
      running_statistics(a.running_mean, a.running_var, a.eps, c, a.save_mean, a.save_invstd);
    }
    __syncthreads();  // thread 0's save_mean[c] and save_invstd[c] are visible to the block
    const acc_t mean = a.save_mean[c], scale = channel_scale(a.weight, a.save_invstd, c);
    const acc_t bias = channel_bias<acc_t>(a.bias, c);
    // y, the channel's packs from the last: r counts from the end.
    for (index_t r0 = threadIdx.x; r0 < packs_per_channel; r0 += kStep) {
      P xs[kFusedLoadsInFlight];
#pragma unroll
      for (int u = 0; u < kFusedLoadsInFlight; ++u) {
        const index_t r = r0 + u * kFusedThreads;
        if (r < packs_per_channel) {
          xs[u] = load_pack_evict_first<kVec>(
              a.x, channel_value_offset(packs_per_channel - 1 - r, ci, channels_i, packs_per_plane));
        }
      }
#pragma unroll
      for (int u = 0; u < kFusedLoadsInFlight; ++u) {
        const index_t r = r0 + u * kFusedThreads;
        if (r >= packs_per_channel) continue;
        // y takes x's place in the pack, and the offset is computed again: fewer registers live across
        // the loads (without this the bfloat16 kernel spilled).
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          xs[u].val[j] = static_cast<scalar_t>(normalize(static_cast<acc_t>(xs[u].val[j]), mean, scale, bias));
        }
        store_pack_evict_first<kVec>(
            a.y, channel_value_offset(packs_per_channel - 1 - r, ci, channels_i, packs_per_plane), xs[u]);
      }
    }
    // The next channel's thread 0 writes other addresses, and block_allreduce syncs before it
    // reuses warp_sums: no sync needed here.
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
  at::Tensor buffer = labops::empty({s.channels, splits, 2}, at::TensorOptions()
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

// Rung 1's launches: the textbook kernels (the running statistics' kernel in evaluation).
template <typename scalar_t, typename param_t, typename acc_t = at::opmath_type<scalar_t>>
void forward_textbook(const Shape& s, const ForwardArgs<scalar_t, param_t>& a, cudaStream_t stream) {
  if (a.training) {
    textbook_statistics_kernel<<<get_blocks(s.channels), kThreads, 0, stream>>>(
        a.x, s.batch, s.channels, s.plane, a.eps, a.momentum, a.running_mean, a.running_var, a.save_mean,
        a.save_invstd);
  } else {
    running_statistics_kernel<<<get_blocks(s.channels), kThreads, 0, stream>>>(
        a.running_mean, a.running_var, s.channels, a.eps, a.save_mean, a.save_invstd);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  textbook_normalize_kernel<<<get_blocks(s.numel()), kThreads, 0, stream>>>(
      a.x, a.weight, a.bias, a.save_mean, a.save_invstd, s.numel(), PlainDivider(s.plane), PlainDivider(s.channels),
      a.y);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Rung 3's launch: one block per channel (a grid-stride loop over channels past kMaxBlocks).
template <int kVec, typename scalar_t, typename param_t>
void block_per_channel_with(const Shape& s, const ForwardArgs<scalar_t, param_t>& a, cudaStream_t stream) {
  const int64_t packs_per_channel = s.count() / kVec;
  const int64_t blocks = std::min<int64_t>(s.channels, kMaxBlocks);
  // The loops' last step passes the end of a channel by up to kFusedLoadsInFlight rows of packs.
  if (fits_int32(s.numel() / kVec + int64_t(kFusedThreads) * kFusedLoadsInFlight)) {
    block_per_channel_kernel<kVec, FastDivider><<<blocks, kFusedThreads, 0, stream>>>(
        a, s.channels, s.plane, s.count(), static_cast<uint32_t>(packs_per_channel),
        FastDivider(static_cast<uint32_t>(s.plane / kVec)));
  } else {
    block_per_channel_kernel<kVec, PlainDivider><<<blocks, kFusedThreads, 0, stream>>>(
        a, s.channels, s.plane, s.count(), packs_per_channel, PlainDivider(s.plane / kVec));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// 16-byte packs when every plane is a whole number of them and x is aligned (y is fresh memory).
template <typename scalar_t, typename param_t>
void block_per_channel(const Shape& s, const ForwardArgs<scalar_t, param_t>& a, cudaStream_t stream) {
  constexpr int kVec = vec_width<scalar_t>();
  if (s.plane % kVec == 0 && is_aligned(a.x) && is_aligned(a.y)) {
    block_per_channel_with<kVec>(s, a, stream);
  } else {
    block_per_channel_with<1>(s, a, stream);
  }
}

// From this many channels the forward runs rung 3 by default: 64 blocks of kFusedThreads threads,
// each with 64 KB of loads in flight, keep about 4 MB in flight, more than an H100 needs to stream
// from HBM (3.35 TB/s x ~1 us of latency), and in training rung 3 saves rung 2's two extra launches
// and its second read of x from HBM. Measured (docs/benchmarks/ladder/cuda_batch_norm.json, H100):
// rung 3 beat rung 2 on all 12 eager rows of ResNet's 64, 128 and 256 channels, training and
// evaluation, and on 10 of 12 as GPU time (two evaluation rows within 10 %). With fewer channels too many multiprocessors would idle: rung 2 splits each channel
// over many blocks. LADDER_DEFAULTS in labops/ops/batch_norm.py states the same rule.
constexpr int64_t kChannelsForBlockPerChannel = 64;

struct CudaLauncher {
  template <typename scalar_t, typename param_t>
  static void forward(const Shape& s, const ForwardArgs<scalar_t, param_t>& a, int forced) {
    const int automatic = s.channels >= kChannelsForBlockPerChannel ? 3 : 2;
    // Every rung takes every input: nothing to refuse.
    const int rung = forward_ladder().run(c10::DeviceType::CUDA, forced, automatic, [](int) { return std::string(); });
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    switch (rung) {
      case 1:
        return forward_textbook(s, a, stream);
      case 3:
        return block_per_channel(s, a, stream);
      default:  // 2
        if (a.training) {
          statistics(s, a.x, a.running_mean, a.running_var, a.momentum, a.eps, a.save_mean, a.save_invstd);
        } else {
          running_statistics(s, a.running_mean, a.running_var, a.eps, a.save_mean, a.save_invstd);
        }
        return normalize(s, a.x, a.weight, a.bias, a.save_mean, a.save_invstd, a.y);
    }
  }

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
  labops::batch_norm::register_kernels<labops::batch_norm::Entry<labops::batch_norm::CudaLauncher>>(m);
}
