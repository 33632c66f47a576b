// CPU kernels for Tanh and GELU: the shared entry points with the CPU loop.
#include <torch/library.h>

#include "../ops/activation_ops.h"
#include "elementwise.h"

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::ops::ActivationOps<labops::cpu::Launcher>::register_kernels(m);
}
