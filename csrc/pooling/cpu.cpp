// CPU kernels for global average pooling: at::parallel_for over planes, the
// bodies of pooling/pooling.h inside, the entry points of pooling/entry.h.
//
// Forward, two rungs (forward_ladder in entry.h):
//   1 textbook: each plane summed one element at a time (gap_sum_strided), in
//     float for half and bfloat16; the default for half and bfloat16.
//   2 simd4: float and double planes summed with four SIMD accumulators
//     (at::vec::Vectorized, several independent adds in flight), then the lanes
//     and the leftover elements are added; the default for float and double.
// Backward: each plane is one value repeated, a fill the compiler vectorizes.
#include <algorithm>
#include <string>
#include <type_traits>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include "entry.h"
#include "../common/cpu/parallel.h"

namespace labops::pooling {
using namespace labops::cpu;  // the shared CPU helpers: parallel.h, elementwise.h
namespace {

// f(p) for every plane p, the planes shared among the CPU's threads.
template <typename F>
void for_each_plane(int64_t planes, int64_t hw, const F& f) {
  at::parallel_for(0, planes, grain_for(hw), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) f(p);
  });
}

// Whether rung 2 (simd4) sums this type: it adds in the data's own type, so not half or bfloat16.
template <typename scalar_t>
constexpr bool kSimdSum = std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>;

// Rung 2's plane sum: four SIMD accumulators, then the lanes and the tail.
template <typename scalar_t>
at::opmath_type<scalar_t> plane_sum_simd4(const scalar_t* plane, int64_t hw) {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t k = 0;
  acc_t sum = acc_t(0);
  if constexpr (kSimdSum<scalar_t>) {
    using Vec = at::vec::Vectorized<scalar_t>;
    constexpr int64_t kLanes = Vec::size();
    if (hw >= kLanes) {
      Vec a0(0), a1(0), a2(0), a3(0);
      for (; k + 4 * kLanes <= hw; k += 4 * kLanes) {
        a0 = pooling::gap_accumulate(a0, Vec::loadu(plane + k));
        a1 = pooling::gap_accumulate(a1, Vec::loadu(plane + k + kLanes));
        a2 = pooling::gap_accumulate(a2, Vec::loadu(plane + k + 2 * kLanes));
        a3 = pooling::gap_accumulate(a3, Vec::loadu(plane + k + 3 * kLanes));
      }
      for (; k + kLanes <= hw; k += kLanes) a0 = pooling::gap_accumulate(a0, Vec::loadu(plane + k));
      scalar_t lanes[kLanes];
      ((a0 + a1) + (a2 + a3)).store(lanes);
      for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
    }
  }
  return sum + pooling::gap_sum_strided<acc_t>(plane, k, hw, 1);
}

struct PoolingLauncher {
  template <typename scalar_t>
  static void forward(const scalar_t* x, scalar_t* y, int64_t planes, int64_t hw, int forced) {
    using acc_t = at::opmath_type<scalar_t>;
    const int rung = forward_ladder().run(c10::DeviceType::CPU, forced, kSimdSum<scalar_t> ? 2 : 1, [](int r) {
      return r == 2 && !kSimdSum<scalar_t> ? std::string("it sums float32 and float64 only, got ") +
                                                 c10::toString(c10::CppTypeToScalarType<scalar_t>::value)
                                           : std::string();
    });
    if (rung == 1) {  // the textbook: pooling.h's loop, as written
      for_each_plane(planes, hw, [&](int64_t p) {
        const acc_t sum = pooling::gap_sum_strided<acc_t>(x + p * hw, 0, hw, 1);
        y[p] = static_cast<scalar_t>(pooling::gap_mean<acc_t>(sum, hw));
      });
      return;
    }
    for_each_plane(planes, hw, [&](int64_t p) {
      y[p] = static_cast<scalar_t>(pooling::gap_mean<acc_t>(plane_sum_simd4(x + p * hw, hw), hw));
    });
  }

  template <typename scalar_t>
  static void backward(const scalar_t* grad_output, scalar_t* grad_input, int64_t planes, int64_t hw) {
    using acc_t = at::opmath_type<scalar_t>;
    for_each_plane(planes, hw, [&](int64_t p) {
      const scalar_t value = static_cast<scalar_t>(pooling::gap_grad_input<acc_t>(grad_output[p], hw));
      std::fill_n(grad_input + p * hw, hw, value);
    });
  }
};

}  // namespace
}  // namespace labops::pooling

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::pooling::register_kernels<labops::pooling::Entry<labops::pooling::PoolingLauncher>>(m);
}
