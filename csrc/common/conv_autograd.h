// The graph node the two convolutions share (csrc/depthwise/register.cpp, csrc/conv2d_mm/register.cpp).
#pragma once

#include "autograd.h"

namespace labops::autograd {

// The convolutions (depthwise_conv2d, conv2d_mm) share one signature,
// (x, weight, bias?, stride, padding, dilation), and one graph node: it keeps
// the window, the sizes, whether a bias was given, and only the tensors the
// wanted gradients read (grad_x reads the weight, grad_w reads x). Each
// convolution's Kind names its ops and says how its three gradients are made.
using ConvSig = at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&, IntArrayRef, IntArrayRef,
                           IntArrayRef);
// called with sizes as SymInts: the schemas say int[], the kernels get ints (see autograd.h)
using ConvInputSig = at::Tensor(const at::Tensor&, const at::Tensor&, SymIntArrayRef, IntArrayRef, IntArrayRef,
                                IntArrayRef);

template <class Kind>
struct ConvBackward : Node {
  SavedVariable x, weight;  // each saved only when the gradient that reads it is wanted
  std::vector<c10::SymInt> input_size, weight_size;
  std::vector<int64_t> stride, padding, dilation;
  bool has_bias = false;

  std::string name() const override { return Kind::kNodeName; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    x.reset_data();
    weight.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const at::Tensor& g = grads[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    // Edge i is input i (x, weight, bias): invalid, or not wanted by this backward call, means no gradient.
    return Kind::gradients(*this, g, task_should_compute_output(0), task_should_compute_output(1),
                           has_bias && task_should_compute_output(2));
  }

  // The backward ops of both convolutions take (grad_output, a saved tensor, a size, the window): the
  // input's gradient (updateGradInput) reads the weight, the weight's gradient reads x.
  template <class Sig>
  auto input_gradient(const c10::TypedOperatorHandle<Sig>& op, const at::Tensor& g) {
    return call_backward_op(op, g, weight.unpack(), input_size, stride, padding, dilation);
  }
  template <class Sig>
  auto weight_gradient(const c10::TypedOperatorHandle<Sig>& op, const at::Tensor& g) {
    return call_backward_op(op, g, x.unpack(), weight_size, stride, padding, dilation);
  }
};

// A convolution's Autograd kernel: straight to the op when no gradient is wanted, else the op and a
// ConvBackward<Kind> node holding what the backward needs.
template <class Kind>
at::Tensor conv_autograd(const at::Tensor& x, const at::Tensor& weight, const OptTensor& bias, IntArrayRef stride,
                         IntArrayRef padding, IntArrayRef dilation) {
  if (!graph_needed(x, weight, bias)) return below_autograd(Kind::op(), x, weight, bias, stride, padding, dilation);
  auto node = new_node<ConvBackward<Kind>>(x, weight, bias);
  if (weight.requires_grad()) node->x = SavedVariable(x, /*is_output=*/false);
  if (x.requires_grad()) node->weight = SavedVariable(weight, /*is_output=*/false);
  node->input_size = x.sym_sizes().vec();
  node->weight_size = weight.sym_sizes().vec();
  node->stride = stride.vec();
  node->padding = padding.vec();
  node->dilation = dilation.vec();
  node->has_bias = bias.has_value() && bias->defined();
  return output_of(node, Kind::op(), x, weight, bias, stride, padding, dilation);
}

}  // namespace labops::autograd
