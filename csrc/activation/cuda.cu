// CUDA kernels for Tanh and GELU: the shared entry points with the CUDA loop.
#include <torch/library.h>

#include "entry.h"
#include "../common/cuda/elementwise.cuh"

namespace labops::cuda {
using ActivationLauncher = ElementwiseLauncher;
}  // namespace labops::cuda

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::activation::Entry<labops::cuda::ActivationLauncher>::register_kernels(m);
}
