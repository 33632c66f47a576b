// pooling: what the dispatcher knows of this layer — its schemas, and its Autograd kernels.
#include <torch/library.h>

#include "../common/autograd.h"
#include "../common/register_layer.h"
#include "entry.h"

TORCH_LIBRARY_FRAGMENT(labops, m) {
  // ---- global_avg_pool2d ----
  // (N,C,H,W) -> (N,C,1,1) or (C,H,W) -> (C,1,1); backward spreads grad_output / (H*W)
  m.def("global_avg_pool2d(Tensor x) -> Tensor");
  m.def("global_avg_pool2d_backward(Tensor grad_output, SymInt[] input_size) -> Tensor");
}

// The forward's ladder and the Meta kernels (csrc/common/register_layer.h): fake tensors (torch.compile)
// run the rules and the shapes of entry.h, nothing else.
LABOPS_REGISTER_LAYER(pooling)

namespace labops::pooling {
namespace {
using namespace labops::autograd;

using PoolSig = at::Tensor(const at::Tensor&);
using PoolBackwardSig = at::Tensor(const at::Tensor&, SymIntArrayRef);
const auto& pool_op() { static auto op = find_op<PoolSig>("labops::global_avg_pool2d"); return op; }
const auto& pool_backward_op() {
  static auto op = find_op<PoolBackwardSig>("labops::global_avg_pool2d_backward");
  return op;
}

struct GlobalAvgPool2dBackward : OneGradientNode {
  std::vector<c10::SymInt> input_size;  // the gradient needs only the shape, not x
  std::string name() const override { return "labops::GlobalAvgPool2dBackward"; }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    return call_backward_op(pool_backward_op(), grad_output, input_size);
  }
};

// The backward is linear in grad_output; its adjoint is the forward (mean of each plane).
struct GlobalAvgPool2dBackwardBackward : OneGradientNode {
  std::string name() const override { return "labops::GlobalAvgPool2dBackwardBackward"; }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    return call_backward_op(pool_op(), grad_output);
  }
};

at::Tensor pool_autograd(const at::Tensor& x) {
  if (!graph_needed(x)) return below_autograd(pool_op(), x);
  auto node = new_node<GlobalAvgPool2dBackward>(x);
  node->input_size = x.sym_sizes().vec();
  return output_of(node, pool_op(), x);
}
at::Tensor pool_backward_autograd(const at::Tensor& grad_output, SymIntArrayRef input_size) {
  if (!graph_needed(grad_output)) return below_autograd(pool_backward_op(), grad_output, input_size);
  auto node = new_node<GlobalAvgPool2dBackwardBackward>(grad_output);
  return output_of(node, pool_backward_op(), grad_output, input_size);
}

}  // namespace
}  // namespace labops::pooling

TORCH_LIBRARY_IMPL(labops, Autograd, m) {
  m.impl("global_avg_pool2d", &labops::pooling::pool_autograd);
  m.impl("global_avg_pool2d_backward", &labops::pooling::pool_backward_autograd);
}
