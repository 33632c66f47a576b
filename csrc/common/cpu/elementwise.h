// The CPU elementwise launcher: out[i] = body(in_0[i], ..., in_k[i]).
//
// at::parallel_for splits [0, n) into chunks for the CPU's threads. Two loops run the body on a chunk:
//  * map_elementwise_scalar: the textbook loop, one element at a time in at::opmath_type (float for
//    half and bfloat16);
//  * map_elementwise: float and double run the body on at::vec::Vectorized (8 or 16 lanes per
//    instruction with AVX2 / AVX-512), the last few elements as the scalar loop does; half and
//    bfloat16 take the scalar loop.
// ElementwiseLauncher (the default, every backward) runs map_elementwise; a layer with a ladder
// (activation's forward) picks one of the two itself.
#pragma once

#include <array>
#include <type_traits>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include "parallel.h"

namespace labops::cpu {

// Whether map_elementwise runs the body on SIMD vectors for this type.
template <typename scalar_t>
constexpr bool kSimdElementwise = std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>;

// out[i] = body(in[i]...) for i in [begin, end), one element at a time in opmath_t.
template <typename scalar_t, size_t N, typename Body>
inline void scalar_range(const std::array<const scalar_t*, N>& in, scalar_t* out, int64_t begin, int64_t end,
                         const Body& body) {
  static_assert(N == 1 || N == 2, "bodies take one or two inputs");
  using opmath_t = at::opmath_type<scalar_t>;
  for (int64_t i = begin; i < end; ++i) {
    opmath_t r;
    if constexpr (N == 1) {
      r = body(static_cast<opmath_t>(in[0][i]));
    } else {
      r = body(static_cast<opmath_t>(in[0][i]), static_cast<opmath_t>(in[1][i]));
    }
    out[i] = static_cast<scalar_t>(r);
  }
}

// SIMD vectors for float and double (kSimdElementwise), then the scalar loop for what is left.
template <typename scalar_t, size_t N, typename Body>
void map_elementwise(std::array<const scalar_t*, N> in, scalar_t* out, int64_t n, Body body) {
  static_assert(N == 1 || N == 2, "bodies take one or two inputs");
  at::parallel_for(0, n, kGrainElements, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    if constexpr (kSimdElementwise<scalar_t>) {
      using Vec = at::vec::Vectorized<scalar_t>;
      for (; i + Vec::size() <= end; i += Vec::size()) {
        Vec r;
        if constexpr (N == 1) {
          r = body(Vec::loadu(in[0] + i));
        } else {
          r = body(Vec::loadu(in[0] + i), Vec::loadu(in[1] + i));
        }
        r.store(out + i);
      }
    }
    scalar_range(in, out, i, end, body);
  });
}

// The textbook: the body one element at a time, chunks shared among the threads.
template <typename scalar_t, size_t N, typename Body>
void map_elementwise_scalar(std::array<const scalar_t*, N> in, scalar_t* out, int64_t n, Body body) {
  at::parallel_for(0, n, kGrainElements, [&](int64_t begin, int64_t end) { scalar_range(in, out, begin, end, body); });
}

// The launcher policy handed to run_elementwise (common/elementwise_op.h).
struct ElementwiseLauncher {
  template <typename scalar_t, size_t N, typename Body>
  static void run(std::array<const scalar_t*, N> in, scalar_t* out, int64_t n, Body body) {
    map_elementwise(in, out, n, body);
  }
};

}  // namespace labops::cpu
