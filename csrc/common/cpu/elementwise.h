// The CPU elementwise launcher: out[i] = body(in_0[i], ..., in_k[i]).
//
// at::parallel_for splits [0, n) into chunks for the CPU's threads. Inside a
// chunk, float and double run the body on at::vec::Vectorized (8 or 16 lanes
// per instruction with AVX2 / AVX-512); the last few elements, and half /
// bfloat16 inputs, run the same body one element at a time in float.
#pragma once

#include <array>
#include <type_traits>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include "parallel.h"

namespace labops::cpu {

template <typename scalar_t, size_t N, typename Body>
void map_elementwise(std::array<const scalar_t*, N> in, scalar_t* out, int64_t n, Body body) {
  static_assert(N == 1 || N == 2, "bodies take one or two inputs");
  using opmath_t = at::opmath_type<scalar_t>;
  at::parallel_for(0, n, kGrainElements, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
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
    for (; i < end; ++i) {
      opmath_t r;
      if constexpr (N == 1) {
        r = body(static_cast<opmath_t>(in[0][i]));
      } else {
        r = body(static_cast<opmath_t>(in[0][i]), static_cast<opmath_t>(in[1][i]));
      }
      out[i] = static_cast<scalar_t>(r);
    }
  });
}

// The launcher policy handed to run_elementwise (common/elementwise_op.h).
struct ElementwiseLauncher {
  template <typename scalar_t, size_t N, typename Body>
  static void run(std::array<const scalar_t*, N> in, scalar_t* out, int64_t n, Body body) {
    map_elementwise(in, out, n, body);
  }
};

}  // namespace labops::cpu
