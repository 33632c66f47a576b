// softmax: what the dispatcher knows of this layer — its schemas, and its Autograd kernels.
#include <torch/library.h>

#include "../common/autograd.h"
#include "../common/register_layer.h"
#include "entry.h"

TORCH_LIBRARY_FRAGMENT(labops, m) {
  // ---- softmax / cross_entropy ----
  // softmax backward takes the saved output y: grad_x = y * (g - sum(g * y)) along dim.
  m.def("softmax(Tensor x, int dim) -> Tensor");
  m.def("softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
  // Fused log-softmax + NLL on (N, C) logits and int64 class indices; reduction is
  // 'mean', 'sum' or 'none'. The backward recomputes softmax from the logits.
  m.def("cross_entropy(Tensor logits, Tensor target, str reduction='mean') -> Tensor");
  m.def("cross_entropy_backward(Tensor grad_loss, Tensor logits, Tensor target, str reduction) -> Tensor");
}

// The forward's ladder and the Meta kernels (csrc/common/register_layer.h): fake tensors (torch.compile)
// run the rules and the shapes of entry.h, nothing else.
LABOPS_REGISTER_LAYER(softmax)

namespace labops::softmax {
namespace {
using namespace labops::autograd;

using SoftmaxSig = at::Tensor(const at::Tensor&, int64_t);
using SoftmaxBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t);
const auto& softmax_op() { static auto op = find_op<SoftmaxSig>("labops::softmax"); return op; }

struct SoftmaxBackward : OneGradientNode {
  SavedVariable output;  // the gradient needs y, not x
  int64_t dim = 0;
  std::string name() const override { return "labops::SoftmaxBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    output.reset_data();
  }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    static auto backward_op = find_op<SoftmaxBackwardSig>("labops::softmax_backward");
    return call_backward_op(backward_op, grad_output, output.unpack(getptr()), dim);
  }
};

at::Tensor softmax_autograd(const at::Tensor& x, int64_t dim) {
  if (!graph_needed(x)) return below_autograd(softmax_op(), x, dim);
  auto node = new_node<SoftmaxBackward>(x);
  auto y = output_of(node, softmax_op(), x, dim);
  node->output = SavedVariable(y, /*is_output=*/true);
  node->dim = dim;
  return y;
}

using CrossEntropySig = at::Tensor(const at::Tensor&, const at::Tensor&, string_view);
using CrossEntropyBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, string_view);
const auto& cross_entropy_op() { static auto op = find_op<CrossEntropySig>("labops::cross_entropy"); return op; }

// One edge, to the logits: the target holds integers, which never require grad.
struct CrossEntropyBackward : OneGradientNode {
  SavedVariable logits, target;  // the backward recomputes softmax from the logits
  std::string reduction;
  std::string name() const override { return "labops::CrossEntropyBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    logits.reset_data();
    target.reset_data();
  }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    static auto backward_op = find_op<CrossEntropyBackwardSig>("labops::cross_entropy_backward");
    return call_backward_op(backward_op, grad_output, logits.unpack(), target.unpack(), reduction);
  }
};

at::Tensor cross_entropy_autograd(const at::Tensor& logits, const at::Tensor& target, string_view reduction) {
  if (!graph_needed(logits)) return below_autograd(cross_entropy_op(), logits, target, reduction);
  auto node = new_node<CrossEntropyBackward>(logits);
  node->logits = SavedVariable(logits, /*is_output=*/false);
  node->target = SavedVariable(target, /*is_output=*/false);
  node->reduction = std::string(reduction);
  return output_of(node, cross_entropy_op(), logits, target, reduction);
}

}  // namespace
}  // namespace labops::softmax

TORCH_LIBRARY_IMPL(labops, Autograd, m) {
  m.impl("softmax", &labops::softmax::softmax_autograd);
  m.impl("cross_entropy", &labops::softmax::cross_entropy_autograd);
}
