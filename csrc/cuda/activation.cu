// CUDA kernels for Tanh and GELU: the shared entry points with the CUDA loop.
#include <torch/library.h>

#include "../ops/activation_ops.h"
#include "elementwise.cuh"

TORCH_LIBRARY_IMPL(labops, CUDA, m) {
  labops::ops::ActivationOps<labops::cuda::Launcher>::register_kernels(m);
}
