// Tensor-level entry points of Tanh and GELU, written once and instantiated
// for each device: activation/cpu.cpp uses Entry<cpu::ActivationLauncher>,
// activation/cuda.cu uses Entry<cuda::ActivationLauncher> (each device's
// elementwise launcher).
#pragma once

#include <ATen/core/Tensor.h>

#include "../common/check.h"
#include "../common/elementwise_op.h"
#include "activation.h"

namespace labops::activation {

template <typename Launcher>
struct Entry {
  static at::Tensor tanh(const at::Tensor& x) {
    check_floating(x, "tanh", "x");
    return run_elementwise<Launcher>(TanhForward{}, x);
  }

  static at::Tensor tanh_backward(const at::Tensor& grad_output, const at::Tensor& output) {
    check_floating(output, "tanh_backward", "output");
    check_same_meta(grad_output, output, "tanh_backward", "grad_output", "output");
    return run_elementwise<Launcher>(TanhBackward{}, grad_output, output);
  }

  static at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
    check_floating(x, "gelu", "x");
    at::Tensor out;
    dispatch_gelu_approx(parse_gelu_approx(approximate), [&](auto approx) {
      out = run_elementwise<Launcher>(GeluForward<decltype(approx)::value>{}, x);
    });
    return out;
  }

  static at::Tensor gelu_backward(const at::Tensor& grad_output, const at::Tensor& x,
                                  c10::string_view approximate) {
    check_floating(x, "gelu_backward", "x");
    check_same_meta(grad_output, x, "gelu_backward", "grad_output", "x");
    at::Tensor out;
    dispatch_gelu_approx(parse_gelu_approx(approximate), [&](auto approx) {
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
