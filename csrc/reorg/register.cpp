// reorg: what the dispatcher knows of this layer — its schemas, and its Autograd kernels.
#include <torch/library.h>

#include "../common/autograd.h"
#include "../common/register_layer.h"
#include "entry.h"

TORCH_LIBRARY_FRAGMENT(labops, m) {
  // ---- reorg ----
  // YOLOv2 passthrough, order 'darknet', 'dcr' (space_to_depth) or 'crd' (pixel_unshuffle);
  // backward is the inverse permutation
  m.def("reorg(Tensor x, int stride=2, str order='darknet') -> Tensor");
  m.def("reorg_backward(Tensor grad_output, int stride=2, str order='darknet') -> Tensor");
}

// The forward's ladder and the Meta kernels (csrc/common/register_layer.h): fake tensors (torch.compile)
// run the rules and the shapes of entry.h, nothing else.
LABOPS_REGISTER_LAYER(reorg)

namespace labops::reorg {
namespace {
using namespace labops::autograd;

using ReorgSig = at::Tensor(const at::Tensor&, int64_t, string_view);
const auto& reorg_op() { static auto op = find_op<ReorgSig>("labops::reorg"); return op; }
const auto& reorg_backward_op() { static auto op = find_op<ReorgSig>("labops::reorg_backward"); return op; }

// Forward is `op`, backward is `inverse`: reorg and reorg_backward are each other's gradient.
template <bool IsBackward>
struct Reorg : OneGradientNode {
  int64_t stride = 0;
  std::string order;
  static const c10::TypedOperatorHandle<ReorgSig>& op() { return IsBackward ? reorg_backward_op() : reorg_op(); }
  static const c10::TypedOperatorHandle<ReorgSig>& inverse() { return IsBackward ? reorg_op() : reorg_backward_op(); }
  std::string name() const override { return IsBackward ? "labops::ReorgBackwardBackward" : "labops::ReorgBackward"; }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    return call_backward_op(inverse(), grad_output, stride, order);
  }
  static at::Tensor kernel(const at::Tensor& x, int64_t stride, string_view order) {
    if (!graph_needed(x)) return below_autograd(op(), x, stride, order);
    auto node = new_node<Reorg>(x);
    node->stride = stride;
    node->order = std::string(order);
    return output_of(node, op(), x, stride, order);
  }
};

}  // namespace
}  // namespace labops::reorg

TORCH_LIBRARY_IMPL(labops, Autograd, m) {
  m.impl("reorg", &labops::reorg::Reorg<false>::kernel);
  m.impl("reorg_backward", &labops::reorg::Reorg<true>::kernel);
}
