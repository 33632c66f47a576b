// CPU kernels for Tanh and GELU: the shared entry points with the CPU loop.
#include <torch/library.h>

#include "entry.h"
#include "../common/cpu/elementwise.h"

namespace labops::activation {
using namespace labops::cpu;  // the shared CPU helpers: parallel.h, elementwise.h
using ActivationLauncher = ElementwiseLauncher;
}  // namespace labops::activation

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::activation::Entry<labops::activation::ActivationLauncher>::register_kernels(m);
}
