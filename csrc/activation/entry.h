// Tensor-level entry points of Tanh and GELU, written once and instantiated
// for each device: activation/cpu.cpp uses Entry<ActivationLauncher>,
// activation/cuda.cu uses Entry<cuda::ActivationLauncher> (each device's
// elementwise launcher).
//
// Launcher provides, as run_elementwise (common/elementwise_op.h) calls them,
//   run(in, out, n, body)           the backward ops: the device's default elementwise loop
//   Forward::run(in, out, n, body)  tanh and gelu: the rung of forward_ladder below (it reads
//                                   forward_ladder().forced() once per call, as run_elementwise
//                                   calls it once)
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "../common/check.h"
#include "../common/elementwise_op.h"
#include "../common/ladder.h"
#include "activation.h"

namespace labops::activation {

// The forward's rungs (Note [the ladder], common/ladder.h), shared by tanh and gelu (the same
// loops run either body); rung 1 the textbook body. A refusal names the op of the call (Body::kOp).
// Which rung runs by default: LADDER_DEFAULTS in labops/ops/activation.py, docs/layers/activation.md
// "The ladder".
inline ladder::Ladder& forward_ladder() {
  static ladder::Ladder rungs(
      "activation", "tanh",
      {{"textbook", "activation.h's body one element at a time (in float for float16 and bfloat16); chunks "
                    "shared among the threads"},
       {"simd", "the same body on at::vec::Vectorized, 8 or 16 lanes per instruction with AVX2 or AVX-512 "
                "(float32 and float64 only)"}},
      {{"textbook", "elementwise_kernel: a grid-stride loop, one element per thread per trip"},
       {"vector_loads", "elementwise_vec_kernel: 16-byte loads and stores, two packs per thread in flight "
                        "(x 16-byte aligned)"}});
  return rungs;
}

// ---- the rules, stated once ----
// Every call checks its arguments here first; the Meta kernels (struct Meta below), which fake tensors
// run under torch.compile, are these checks and an output of x's shape (an elementwise op's output is
// its input's shape).

inline void tanh_rules(const at::Tensor& x) { check_floating(x, "tanh", "x"); }

inline void tanh_backward_rules(const at::Tensor& grad_output, const at::Tensor& output) {
  check_floating(output, "tanh_backward", "output");
  check_same_meta(grad_output, output, "tanh_backward", "grad_output", "output");
}

inline GeluApprox gelu_rules(const at::Tensor& x, c10::string_view approximate) {
  check_floating(x, "gelu", "x");
  return parse_gelu_approx(approximate);
}

inline GeluApprox gelu_backward_rules(const at::Tensor& grad_output, const at::Tensor& x,
                                      c10::string_view approximate) {
  check_floating(x, "gelu_backward", "x");
  check_same_meta(grad_output, x, "gelu_backward", "grad_output", "x");
  return parse_gelu_approx(approximate);
}

inline at::Tensor like(const at::Tensor& t) { return at::empty_symint(t.sym_sizes(), t.options()); }

struct Meta {
  static at::Tensor tanh(const at::Tensor& x) {
    tanh_rules(x);
    return like(x);
  }

  static at::Tensor tanh_backward(const at::Tensor& grad_output, const at::Tensor& output) {
    tanh_backward_rules(grad_output, output);
    return like(output);
  }

  static at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
    gelu_rules(x, approximate);
    return like(x);
  }

  static at::Tensor gelu_backward(const at::Tensor& grad_output, const at::Tensor& x, c10::string_view approximate) {
    gelu_backward_rules(grad_output, x, approximate);
    return like(x);
  }
};

template <typename Launcher>
struct Entry {
  static at::Tensor tanh(const at::Tensor& x) {
    tanh_rules(x);
    return run_elementwise<typename Launcher::Forward>(TanhForward{}, x);
  }

  static at::Tensor tanh_backward(const at::Tensor& grad_output, const at::Tensor& output) {
    tanh_backward_rules(grad_output, output);
    return run_elementwise<Launcher>(TanhBackward{}, grad_output, output);
  }

  static at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
    at::Tensor out;
    dispatch_gelu_approx(gelu_rules(x, approximate), [&](auto approx) {
      out = run_elementwise<typename Launcher::Forward>(GeluForward<decltype(approx)::value>{}, x);
    });
    return out;
  }

  static at::Tensor gelu_backward(const at::Tensor& grad_output, const at::Tensor& x,
                                  c10::string_view approximate) {
    at::Tensor out;
    dispatch_gelu_approx(gelu_backward_rules(grad_output, x, approximate), [&](auto approx) {
      out = run_elementwise<Launcher>(GeluBackward<decltype(approx)::value>{},
                                      grad_output, x);
    });
    return out;
  }
};

// Every op of the layer with its kernel in `Kernels`: Entry<Launcher> on a device (cpu.cpp, cuda.cu),
// Meta for fake tensors (register.cpp). One list, so no op lacks a kernel on one dispatch key.
template <typename Kernels, typename Module>
void register_kernels(Module& m) {
  m.impl("tanh", &Kernels::tanh).impl("tanh_backward", &Kernels::tanh_backward)
      .impl("gelu", &Kernels::gelu).impl("gelu_backward", &Kernels::gelu_backward);
}

}  // namespace labops::activation
