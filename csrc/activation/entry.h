// Tensor-level entry points of Tanh and GELU, written once and instantiated
// for each device: activation/cpu.cpp uses Entry<cpu::ActivationLauncher>,
// activation/cuda.cu uses Entry<cuda::ActivationLauncher> (each device's
// elementwise launcher).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "../common/check.h"
#include "../common/elementwise_op.h"
#include "activation.h"

namespace labops::activation {

// ---- the rules, stated once ----
// Every call checks its arguments here first; the Meta kernels (register.cpp), which fake tensors run
// under torch.compile, are these checks and an output of x's shape (an elementwise op's output is its
// input's shape).

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

inline at::Tensor tanh_meta(const at::Tensor& x) {
  tanh_rules(x);
  return like(x);
}

inline at::Tensor tanh_backward_meta(const at::Tensor& grad_output, const at::Tensor& output) {
  tanh_backward_rules(grad_output, output);
  return like(output);
}

inline at::Tensor gelu_meta(const at::Tensor& x, c10::string_view approximate) {
  gelu_rules(x, approximate);
  return like(x);
}

inline at::Tensor gelu_backward_meta(const at::Tensor& grad_output, const at::Tensor& x, c10::string_view approximate) {
  gelu_backward_rules(grad_output, x, approximate);
  return like(x);
}

template <typename Launcher>
struct Entry {
  static at::Tensor tanh(const at::Tensor& x) {
    tanh_rules(x);
    return run_elementwise<Launcher>(TanhForward{}, x);
  }

  static at::Tensor tanh_backward(const at::Tensor& grad_output, const at::Tensor& output) {
    tanh_backward_rules(grad_output, output);
    return run_elementwise<Launcher>(TanhBackward{}, grad_output, output);
  }

  static at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
    at::Tensor out;
    dispatch_gelu_approx(gelu_rules(x, approximate), [&](auto approx) {
      out = run_elementwise<Launcher>(GeluForward<decltype(approx)::value>{}, x);
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

  template <typename Module>
  static void register_kernels(Module& m) {
    m.impl("tanh", &tanh).impl("tanh_backward", &tanh_backward)
        .impl("gelu", &gelu).impl("gelu_backward", &gelu_backward);
  }
};

}  // namespace labops::activation
