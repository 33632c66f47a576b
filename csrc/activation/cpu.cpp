// CPU kernels for Tanh and GELU: the shared entry points with the CPU loops of
// common/cpu/elementwise.h.
//
// Forward, two rungs (forward_ladder in entry.h):
//   1 textbook: map_elementwise_scalar, activation.h's body one element at a
//     time; the default for half and bfloat16 (computed in float).
//   2 simd: map_elementwise, the body on at::vec::Vectorized, the leftover
//     elements one at a time; float and double only, and their default.
// Backward: map_elementwise (no rungs).
#include <string>

#include <torch/library.h>

#include "entry.h"
#include "../common/cpu/elementwise.h"

namespace labops::activation {
using namespace labops::cpu;  // the shared CPU helpers: parallel.h, elementwise.h

struct ActivationLauncher : ElementwiseLauncher {  // run(): the backward ops
  struct Forward {
    template <typename scalar_t, size_t N, typename Body>
    static void run(std::array<const scalar_t*, N> in, scalar_t* out, int64_t n, Body body) {
      if (n == 0) return;  // no kernel runs: nothing checked, nothing recorded
      ladder::Ladder& rungs = forward_ladder();
      const int automatic = kSimdElementwise<scalar_t> ? 2 : 1;
      const int rung = rungs.run(c10::DeviceType::CPU, rungs.forced(), automatic, [](int r) {
        if (r != 2 || kSimdElementwise<scalar_t>) return std::string();
        return std::string("it vectorizes float32 and float64 only, got ") +
               c10::toString(c10::CppTypeToScalarType<scalar_t>::value);
      }, Body::kOp);
      if (rung == 1) {
        map_elementwise_scalar(in, out, n, body);
      } else {
        map_elementwise(in, out, n, body);
      }
    }
  };
};

}  // namespace labops::activation

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::activation::register_kernels<labops::activation::Entry<labops::activation::ActivationLauncher>>(m);
}
