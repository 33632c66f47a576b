// LABOPS_REGISTER_LAYER(layer): what a layer's entry.h gives the dispatcher and labops.ladder, registered
// in one line of the layer's register.cpp (as Caffe's REGISTER_LAYER_CLASS, one line per layer):
//
//  - its forward's rungs (`forward_ladder()`), known to labops::_ladder by the layer's name (Note [the
//    ladder] in ladder.h), through a ladder::Registration in the layer's namespace;
//  - its Meta kernels: every op bound, at the Meta dispatch key, to its function in the layer's `struct
//    Meta` by the layer's own list, `register_kernels<Meta>(m)`, as cpu.cpp and cuda.cu bind them to
//    `Entry<Launcher>`. Fake tensors (torch.compile) run those kernels: the rules and the shapes of
//    entry.h, nothing else, so a bad argument raises the same error compiled or not.
//
// Written out for one layer, the macro is:
//
//   namespace labops::activation {
//   namespace {
//   const ladder::Registration registered_ladder(forward_ladder());
//   }  // namespace
//   }  // namespace labops::activation
//
//   TORCH_LIBRARY_IMPL(labops, Meta, m) {
//     labops::activation::register_kernels<labops::activation::Meta>(m);
//   }
#pragma once

#include <torch/library.h>

#include "ladder.h"

#define LABOPS_REGISTER_LAYER(layer)                                       \
  namespace labops::layer {                                                \
  namespace {                                                              \
  const ladder::Registration registered_ladder(forward_ladder());          \
  }                                                                        \
  }                                                                        \
  TORCH_LIBRARY_IMPL(labops, Meta, m) {                                    \
    labops::layer::register_kernels<labops::layer::Meta>(m);               \
  }
