// activation: what the dispatcher knows of this layer — its schemas, and its Autograd kernels.
#include <torch/library.h>

#include "../common/autograd.h"
#include "../common/register_layer.h"
#include "entry.h"

TORCH_LIBRARY_FRAGMENT(labops, m) {
  // ---- tanh: backward takes the saved output y, since dtanh/dx = 1 - y^2 ----
  m.def("tanh(Tensor x) -> Tensor");
  m.def("tanh_backward(Tensor grad_output, Tensor output) -> Tensor");

  // ---- gelu: approximate is 'none' (erf), 'tanh' or 'sigmoid' (x * sigmoid(1.702 x)) ----
  m.def("gelu(Tensor x, str approximate='none') -> Tensor");
  m.def("gelu_backward(Tensor grad_output, Tensor x, str approximate='none') -> Tensor");
}

// The forward's ladder and the Meta kernels (csrc/common/register_layer.h): fake tensors (torch.compile)
// run the rules of entry.h and make an output of the input's shape.
LABOPS_REGISTER_LAYER(activation)

namespace labops::activation {
namespace {
using namespace labops::autograd;

using TanhSig = at::Tensor(const at::Tensor&);
using TanhBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&);
const auto& tanh_op() { static auto op = find_op<TanhSig>("labops::tanh"); return op; }
const auto& tanh_backward_op() { static auto op = find_op<TanhBackwardSig>("labops::tanh_backward"); return op; }

struct TanhBackward : OneGradientNode {
  SavedVariable output;  // tanh's gradient needs y, not x
  std::string name() const override { return "labops::TanhBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    output.reset_data();
  }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    return call_backward_op(tanh_backward_op(), grad_output, output.unpack(getptr()));
  }
};

at::Tensor tanh_autograd(const at::Tensor& x) {
  if (!graph_needed(x)) return below_autograd(tanh_op(), x);
  auto node = new_node<TanhBackward>(x);
  auto y = output_of(node, tanh_op(), x);
  node->output = SavedVariable(y, /*is_output=*/true);
  return y;
}

using GeluSig = at::Tensor(const at::Tensor&, string_view);
using GeluBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, string_view);
const auto& gelu_op() { static auto op = find_op<GeluSig>("labops::gelu"); return op; }
const auto& gelu_backward_op() { static auto op = find_op<GeluBackwardSig>("labops::gelu_backward"); return op; }

struct GeluBackward : OneGradientNode {
  SavedVariable input;
  std::string approximate;
  std::string name() const override { return "labops::GeluBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    input.reset_data();
  }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    return call_backward_op(gelu_backward_op(), grad_output, input.unpack(), approximate);
  }
};

at::Tensor gelu_autograd(const at::Tensor& x, string_view approximate) {
  if (!graph_needed(x)) return below_autograd(gelu_op(), x, approximate);
  auto node = new_node<GeluBackward>(x);
  node->input = SavedVariable(x, /*is_output=*/false);
  node->approximate = std::string(approximate);
  return output_of(node, gelu_op(), x, approximate);
}

}  // namespace
}  // namespace labops::activation

TORCH_LIBRARY_IMPL(labops, Autograd, m) {
  m.impl("tanh", &labops::activation::tanh_autograd);
  m.impl("gelu", &labops::activation::gelu_autograd);
}
