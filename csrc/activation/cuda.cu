// CUDA kernels for Tanh and GELU: the shared entry points with the CUDA loops of
// common/cuda/elementwise.cuh.
//
// Forward, two rungs (forward_ladder in entry.h):
//   1 textbook      elementwise_kernel, a grid-stride loop; the default when x
//                   is not 16-byte aligned (a view starting inside its storage);
//   2 vector_loads  elementwise_vec_kernel, 16-byte packs; the default otherwise.
// Backward: launch_elementwise, the same choice by alignment (no rungs).
#include <string>

#include <torch/library.h>

#include "entry.h"
#include "../common/cuda/elementwise.cuh"

namespace labops::cuda {

struct ActivationLauncher : ElementwiseLauncher {  // run(): the backward ops
  struct Forward {
    template <typename scalar_t, size_t N, typename Body>
    static void run(std::array<const scalar_t*, N> in, scalar_t* out, int64_t n, Body body) {
      if (n == 0) return;  // no kernel runs: nothing checked, nothing recorded
      const bool aligned = all_aligned(in, out);  // out is fresh memory: x decides
      ladder::Ladder& rungs = activation::forward_ladder();
      const int rung = rungs.run(c10::DeviceType::CUDA, rungs.forced(), aligned ? 2 : 1, [&](int r) {
        return r == 2 && !aligned ? std::string("x is not 16-byte aligned") : std::string();
      }, Body::kOp);
      launch_elementwise(in, out, n, body, /*vector_loads=*/rung == 2);
    }
  };
};

}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::activation::register_kernels<labops::activation::Entry<labops::cuda::ActivationLauncher>>(m);
}
