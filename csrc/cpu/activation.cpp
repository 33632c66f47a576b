// CPU kernels for Tanh and GELU: the shared entry points with the CPU loop.
#include <torch/library.h>

#include "../ops/activation_ops.h"
#include "elementwise.h"

namespace labops::cpu {
using ActivationLauncher = ElementwiseLauncher;
}  // namespace labops::cpu

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::ops::activation::ActivationOps<labops::cpu::ActivationLauncher>::register_kernels(m);
}
