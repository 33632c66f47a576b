// depthwise: what the dispatcher knows of this layer — its schemas, and its Autograd kernels.
#include <torch/library.h>

#include "../common/autograd.h"
#include "../common/conv_autograd.h"
#include "../common/register_layer.h"
#include "entry.h"

TORCH_LIBRARY_FRAGMENT(labops, m) {
  // ---- depthwise_conv2d ----
  // x (N, C_in, H, W), weight (C_in*m, 1, kH, kW): F.conv2d(..., groups=C_in). The backward ops
  // are updateGradInput (a gather) and accGradParameters (reductions over N*outH*outW).
  m.def("depthwise_conv2d(Tensor x, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, "
        "int[2] dilation) -> Tensor");
  m.def("depthwise_conv2d_backward_input(Tensor grad_output, Tensor weight, SymInt[] input_size, "
        "int[2] stride, int[2] padding, int[2] dilation) -> Tensor");
  m.def("depthwise_conv2d_backward_weight(Tensor grad_output, Tensor x, SymInt[] weight_size, "
        "int[2] stride, int[2] padding, int[2] dilation) -> Tensor");
  m.def("depthwise_conv2d_backward_bias(Tensor grad_output) -> Tensor");
  // accGradParameters: grad_weight += scale * dE/dW, grad_bias += scale * dE/db, in place (as conv2d_mm's).
  m.def("depthwise_conv2d_acc_grad_parameters(Tensor grad_output, Tensor x, Tensor(a!) grad_weight, "
        "Tensor(b!)? grad_bias, int[2] stride, int[2] padding, int[2] dilation, float scale=1) -> ()");
  // Private, CPU only, for tests/test_depthwise.py and notebook 06: forward and the three gradients through
  // the textbook launcher (the per-element bodies of depthwise/depthwise.h), to hold the fast CPU path to
  // them. The forward alone is also rung 1 of the ladder (labops.ladder.use("depthwise", "textbook")).
  m.def("_depthwise_conv2d_textbook(Tensor x, Tensor weight, Tensor? bias, Tensor grad_output, int[2] stride, "
        "int[2] padding, int[2] dilation) -> (Tensor, Tensor, Tensor, Tensor)");
}

// The forward's ladder and the Meta kernels (csrc/common/register_layer.h): fake tensors (torch.compile)
// run the rules and the shapes of entry.h, nothing else.
// The private _depthwise_conv2d_textbook (CPU only, for tests) has none.
LABOPS_REGISTER_LAYER(depthwise)

namespace labops::depthwise {
namespace {
using namespace labops::autograd;

// The gradient is three compiled ops, each called only when its gradient is wanted.
struct Depthwise {
  static constexpr const char* kNodeName = "labops::DepthwiseConv2dBackward";
  static const c10::TypedOperatorHandle<ConvSig>& op() {
    static auto handle = find_op<ConvSig>("labops::depthwise_conv2d");
    return handle;
  }
  static variable_list gradients(ConvBackward<Depthwise>& n, const at::Tensor& g, bool want_x, bool want_w,
                                 bool want_b) {
    static auto input_op = find_op<ConvInputSig>("labops::depthwise_conv2d_backward_input");
    static auto weight_op = find_op<ConvInputSig>("labops::depthwise_conv2d_backward_weight");
    static auto bias_op = find_op<at::Tensor(const at::Tensor&)>("labops::depthwise_conv2d_backward_bias");
    at::Tensor grad_x, grad_w, grad_b;
    if (want_x) grad_x = n.input_gradient(input_op, g);    // updateGradInput
    if (want_w) grad_w = n.weight_gradient(weight_op, g);  // accGradParameters, weight
    if (want_b) grad_b = call_backward_op(bias_op, g);     // accGradParameters, bias
    return {grad_x, grad_w, grad_b};
  }
};

}  // namespace
}  // namespace labops::depthwise

TORCH_LIBRARY_IMPL(labops, Autograd, m) {
  m.impl("depthwise_conv2d", &labops::autograd::conv_autograd<labops::depthwise::Depthwise>);
}
