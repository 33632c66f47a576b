// upsample: what the dispatcher knows of this layer — its schemas, its Autograd kernels and its Meta kernels.
#include <torch/library.h>

#include "../common/autograd.h"
#include "../common/register_layer.h"
#include "entry.h"

TORCH_LIBRARY_FRAGMENT(labops, m) {
  // ---- upsample_bilinear2d ----
  // coordinate_mode is 'half_pixel', 'align_corners' or 'asymmetric'; scale_h/scale_w are the
  // caller's scale_factor (PyTorch then steps by 1/scale_factor, not in/out) or None.
  // deterministic=True: gather backward; False: the atomic scatter PyTorch uses.
  m.def("upsample_bilinear2d(Tensor x, SymInt[2] output_size, str coordinate_mode, float? scale_h, "
        "float? scale_w) -> Tensor");
  m.def("upsample_bilinear2d_backward(Tensor grad_output, SymInt[] input_size, str coordinate_mode, "
        "float? scale_h, float? scale_w, bool deterministic=True) -> Tensor");
}

// The forward's ladder and the Meta kernels (csrc/common/register_layer.h): fake tensors (torch.compile)
// run the rules and the shapes of entry.h, nothing else.
LABOPS_REGISTER_LAYER(upsample)

namespace labops::upsample {
namespace {
using namespace labops::autograd;

using UpsampleSig = at::Tensor(const at::Tensor&, SymIntArrayRef, string_view, OptDouble, OptDouble);
using UpsampleBackwardSig = at::Tensor(const at::Tensor&, SymIntArrayRef, string_view, OptDouble, OptDouble, bool);
const auto& upsample_op() { static auto op = find_op<UpsampleSig>("labops::upsample_bilinear2d"); return op; }
const auto& upsample_backward_op() {
  static auto op = find_op<UpsampleBackwardSig>("labops::upsample_bilinear2d_backward");
  return op;
}

// The coordinate mode and the caller's scales, kept for the backward.
struct Resize {
  std::string mode;
  OptDouble scale_h, scale_w;
};

// The backward is the compiled deterministic gather.
struct UpsampleBilinear2dBackward : OneGradientNode {
  std::vector<c10::SymInt> input_size;
  Resize r;
  std::string name() const override { return "labops::UpsampleBilinear2dBackward"; }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    return call_backward_op(upsample_backward_op(), grad_output, input_size, r.mode, r.scale_h, r.scale_w, true);
  }
};

// The backward op is linear in grad_output (grad_in = A_h^T G A_w): its gradient is the forward.
struct UpsampleBilinear2dBackwardBackward : OneGradientNode {
  std::vector<c10::SymInt> output_size;
  Resize r;
  std::string name() const override { return "labops::UpsampleBilinear2dBackwardBackward"; }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    return call_backward_op(upsample_op(), grad_output, output_size, r.mode, r.scale_h, r.scale_w);
  }
};

at::Tensor upsample_autograd(const at::Tensor& x, SymIntArrayRef output_size, string_view mode, OptDouble scale_h,
                             OptDouble scale_w) {
  if (!graph_needed(x)) return below_autograd(upsample_op(), x, output_size, mode, scale_h, scale_w);
  auto node = new_node<UpsampleBilinear2dBackward>(x);
  node->input_size = x.sym_sizes().vec();
  node->r = {std::string(mode), scale_h, scale_w};
  return output_of(node, upsample_op(), x, output_size, mode, scale_h, scale_w);
}
at::Tensor upsample_backward_autograd(const at::Tensor& grad_output, SymIntArrayRef input_size, string_view mode,
                                      OptDouble scale_h, OptDouble scale_w, bool deterministic) {
  if (!graph_needed(grad_output)) {
    return below_autograd(upsample_backward_op(), grad_output, input_size, mode, scale_h, scale_w, deterministic);
  }
  auto node = new_node<UpsampleBilinear2dBackwardBackward>(grad_output);
  node->output_size = last2(grad_output.sym_sizes()).vec();
  node->r = {std::string(mode), scale_h, scale_w};
  return output_of(node, upsample_backward_op(), grad_output, input_size, mode, scale_h, scale_w, deterministic);
}

}  // namespace
}  // namespace labops::upsample

TORCH_LIBRARY_IMPL(labops, Autograd, m) {
  m.impl("upsample_bilinear2d", &labops::upsample::upsample_autograd);
  m.impl("upsample_bilinear2d_backward", &labops::upsample::upsample_backward_autograd);
}
