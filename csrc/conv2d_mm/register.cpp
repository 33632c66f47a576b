// conv2d_mm: what the dispatcher knows of this layer — its schemas, its Autograd kernels and its Meta kernels.
#include <torch/library.h>

#include "../common/autograd.h"
#include "../common/conv_autograd.h"
#include "../common/register_layer.h"
#include "entry.h"

TORCH_LIBRARY_FRAGMENT(labops, m) {
  // ---- im2col / col2im / conv2d_mm ----
  // im2col == F.unfold: (N, C, H, W) -> (N, C*kH*kW, L), rows ordered (c, kh, kw).
  // col2im == F.fold: its adjoint, summing overlapping windows (not its inverse).
  m.def("im2col(Tensor x, int[2] kernel_size, int[2] stride=1, int[2] padding=0, int[2] dilation=1) -> Tensor");
  m.def("col2im(Tensor cols, SymInt[2] output_size, int[2] kernel_size, int[2] stride=1, int[2] padding=0, "
        "int[2] dilation=1) -> Tensor");
  // conv2d_mm == F.conv2d (groups=1) as SpatialConvolutionMM: im2col + GEMM.
  m.def("conv2d_mm(Tensor x, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
        "int[2] dilation=1) -> Tensor");
  m.def("conv2d_mm_backward_input(Tensor grad_output, Tensor weight, SymInt[] input_size, int[2] stride, "
        "int[2] padding, int[2] dilation) -> Tensor");
  // accGradParameters: grad_weight += scale * dE/dW, grad_bias += scale * dE/db, in place.
  m.def("conv2d_mm_acc_grad_parameters(Tensor grad_output, Tensor x, Tensor(a!) grad_weight, "
        "Tensor(b!)? grad_bias, int[2] stride, int[2] padding, int[2] dilation, float scale=1) -> ()");
  // What autograd calls: accGradParameters at scale 1 into new tensors (grad_weight, grad_bias), one op.
  m.def("conv2d_mm_backward_weight(Tensor grad_output, Tensor x, SymInt[] weight_size, int[2] stride, "
        "int[2] padding, int[2] dilation) -> (Tensor, Tensor)");
}

// The forward's ladder and the Meta kernels (csrc/common/register_layer.h): fake tensors (torch.compile)
// run the rules and the shapes of entry.h, nothing else.
LABOPS_REGISTER_LAYER(conv2d_mm)

namespace labops::conv2d_mm {
namespace {
using namespace labops::autograd;

using Im2colSig = at::Tensor(const at::Tensor&, IntArrayRef, IntArrayRef, IntArrayRef, IntArrayRef);
using Col2imSig = at::Tensor(const at::Tensor&, SymIntArrayRef, IntArrayRef, IntArrayRef, IntArrayRef, IntArrayRef);
const auto& im2col_op() { static auto op = find_op<Im2colSig>("labops::im2col"); return op; }
const auto& col2im_op() { static auto op = find_op<Col2imSig>("labops::col2im"); return op; }

// The window of im2col / col2im, kept in their nodes for the backward.
struct ConvWindow {
  std::vector<int64_t> kernel_size, stride, padding, dilation;
  ConvWindow(IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef d)
      : kernel_size(k.vec()), stride(s.vec()), padding(p.vec()), dilation(d.vec()) {}
};

// The adjoint of "copy each pixel into every column that sees it" is "sum those columns back".
struct Im2colBackward : OneGradientNode {
  std::vector<c10::SymInt> image_size;
  std::optional<ConvWindow> w;
  std::string name() const override { return "labops::Im2colBackward"; }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    return call_backward_op(col2im_op(), grad_output, image_size, w->kernel_size, w->stride, w->padding,
                            w->dilation);
  }
};

struct Col2imBackward : OneGradientNode {
  std::optional<ConvWindow> w;
  std::string name() const override { return "labops::Col2imBackward"; }
  at::Tensor gradient(const at::Tensor& grad_output) override {
    return call_backward_op(im2col_op(), grad_output, w->kernel_size, w->stride, w->padding, w->dilation);
  }
};

at::Tensor im2col_autograd(const at::Tensor& x, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef d) {
  if (!graph_needed(x)) return below_autograd(im2col_op(), x, k, s, p, d);
  auto node = new_node<Im2colBackward>(x);
  node->image_size = last2(x.sym_sizes()).vec();
  node->w.emplace(k, s, p, d);
  return output_of(node, im2col_op(), x, k, s, p, d);
}
at::Tensor col2im_autograd(const at::Tensor& cols, SymIntArrayRef output_size, IntArrayRef k, IntArrayRef s,
                           IntArrayRef p, IntArrayRef d) {
  if (!graph_needed(cols)) return below_autograd(col2im_op(), cols, output_size, k, s, p, d);
  auto node = new_node<Col2imBackward>(cols);
  node->w.emplace(k, s, p, d);
  return output_of(node, col2im_op(), cols, output_size, k, s, p, d);
}

using ConvWeightSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, SymIntArrayRef,
                                                          IntArrayRef, IntArrayRef, IntArrayRef);

// updateGradInput, then accGradParameters at scale 1 into new tensors (exactly the gradients):
// conv2d_mm_backward_weight is that, as one op that also returns the bias gradient. Zeros to
// accumulate into, the accumulating op and a separate sum cost more host time per call than the
// kernels of a small convolution (tools/host_pieces.py).
struct Conv2dMM {
  static constexpr const char* kNodeName = "labops::Conv2dMMBackward";
  static const c10::TypedOperatorHandle<ConvSig>& op() {
    static auto handle = find_op<ConvSig>("labops::conv2d_mm");
    return handle;
  }
  static variable_list gradients(ConvBackward<Conv2dMM>& n, const at::Tensor& grad, bool want_x, bool want_w,
                                 bool want_b) {
    static auto input_op = find_op<ConvInputSig>("labops::conv2d_mm_backward_input");
    static auto weight_op = find_op<ConvWeightSig>("labops::conv2d_mm_backward_weight");
    // The ops take NCHW and channels_last alike (a channels_last grad gives a channels_last grad_x, as the
    // forward does): copying it to NCHW here cost more than the rest of the input gradient (ATen's strided
    // copy, 51 us for a 32 x 64 x 56 x 56 float16 grad on an H100). Other layouts (an expanded grad) are copied.
    const bool dense = grad.is_contiguous() || grad.is_contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor g = dense ? grad : grad.contiguous();
    at::Tensor grad_x, grad_w, grad_b;
    if (want_x) grad_x = n.input_gradient(input_op, g);  // updateGradInput
    if (want_w) {  // accGradParameters into new tensors; the bias gradient comes with the weight's
      std::tie(grad_w, grad_b) = n.weight_gradient(weight_op, g);
      if (!want_b) grad_b = at::Tensor();
    } else if (want_b) {  // x was not saved (the weight wants no gradient): the sum alone
      grad_b = g.dim() == 4 ? g.sum({0, 2, 3}) : g.sum({1, 2});
    }
    return {grad_x, grad_w, grad_b};
  }
};

}  // namespace
}  // namespace labops::conv2d_mm

TORCH_LIBRARY_IMPL(labops, Autograd, m) {
  m.impl("im2col", &labops::conv2d_mm::im2col_autograd);
  m.impl("col2im", &labops::conv2d_mm::col2im_autograd);
  m.impl("conv2d_mm", &labops::autograd::conv_autograd<labops::conv2d_mm::Conv2dMM>);
}
