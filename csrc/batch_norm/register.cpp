// batch_norm: what the dispatcher knows of this layer — its schemas, its Autograd kernel, its Meta kernels
// and its forward's ladder.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../common/autograd.h"
#include "../common/register_layer.h"
#include "entry.h"

TORCH_LIBRARY_FRAGMENT(labops, m) {
  // ---- batch_norm ----
  // F.batch_norm on x (N, C, ...): per-channel statistics over every dim but C. updateOutput returns
  // (y, save_mean, save_invstd) with save_invstd = 1/sqrt(var + eps), both in the statistics' dtype
  // (float32 for a float16/bfloat16 x), from the batch in training and from the running statistics
  // in evaluation. Training updates running_mean and running_var in place when they are given.
  m.def("batch_norm(Tensor x, Tensor? weight, Tensor? bias, Tensor(a!)? running_mean, Tensor(b!)? running_var, "
        "bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)");
  // updateGradInput. sum_grad_xhat, sum_grad: batch_norm_backward_parameters's results for this
  // grad_output, when the caller has them (then training skips its own reduction).
  m.def("batch_norm_backward_input(Tensor grad_output, Tensor x, Tensor? weight, Tensor save_mean, "
        "Tensor save_invstd, bool training, Tensor? sum_grad_xhat=None, Tensor? sum_grad=None) -> Tensor");
  // accGradParameters: grad_weight += scale * dE/dweight, grad_bias += scale * dE/dbias, in place.
  m.def("batch_norm_acc_grad_parameters(Tensor grad_output, Tensor x, Tensor save_mean, Tensor save_invstd, "
        "Tensor(a!) grad_weight, Tensor(b!)? grad_bias, float scale=1) -> ()");
  // What autograd calls: accGradParameters at scale 1 into new tensors, (sum grad_output * xhat, sum grad_output)
  // per channel = (dE/dweight, dE/dbias), in the statistics' dtype.
  m.def("batch_norm_backward_parameters(Tensor grad_output, Tensor x, Tensor save_mean, Tensor save_invstd) "
        "-> (Tensor, Tensor)");
}

// The forward's ladder and the Meta kernels (csrc/common/register_layer.h): fake tensors (torch.compile)
// run the rules and the shapes of entry.h, nothing else.
LABOPS_REGISTER_LAYER(batch_norm)

namespace labops::batch_norm {
namespace {
using namespace labops::autograd;

using BatchNormSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const OptTensor&,
                                                                     const OptTensor&, const OptTensor&,
                                                                     const OptTensor&, bool, double, double);
using BackwardInputSig = at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&, const at::Tensor&,
                                    const at::Tensor&, bool, const OptTensor&, const OptTensor&);
using BackwardParametersSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                 const at::Tensor&, const at::Tensor&);

const auto& batch_norm_op() {
  static auto op = find_op<BatchNormSig>("labops::batch_norm");
  return op;
}

// Double backward is not implemented: a backward run with create_graph=True hangs its gradients on
// this node, which raises when a second backward reaches it. Without it, the backward ops (no Autograd
// kernel) would reach PyTorch's fallback, which only warns and leaves the second derivative wrong.
struct BatchNormBackwardBackward : Node {
  std::string name() const override { return "labops::BatchNormBackwardBackward"; }
  variable_list apply(variable_list&&) override {
    TORCH_CHECK(false, "labops.batch_norm: double backward is not implemented (the gradient of batch_norm's "
                       "gradient); use F.batch_norm where a second derivative is needed");
  }
};

// One node, edges to x, weight and bias. It keeps x and the saved statistics (every gradient reads
// them) and the weight when grad_input is wanted.
struct BatchNormBackward : Node {
  SavedVariable x, weight, save_mean, save_invstd;
  bool training = false, has_weight = false, has_bias = false;
  c10::ScalarType parameter_dtype = at::kFloat;  // the parameter gradients' dtype (the weight's or bias's)

  std::string name() const override { return "labops::BatchNormBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    x.reset_data();
    weight.reset_data();
    save_mean.reset_data();
    save_invstd.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    static auto input_op = find_op<BackwardInputSig>("labops::batch_norm_backward_input");
    static auto parameters_op = find_op<BackwardParametersSig>("labops::batch_norm_backward_parameters");
    const at::Tensor& g = grads[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const bool want_x = task_should_compute_output(0);
    const bool want_w = has_weight && task_should_compute_output(1);
    const bool want_b = has_bias && task_should_compute_output(2);
    const at::Tensor x_ = x.unpack(), mean = save_mean.unpack(), invstd = save_invstd.unpack();
    const OptTensor w = has_weight && want_x ? OptTensor(weight.unpack()) : std::nullopt;
    // The parameter gradients' sums, which grad_input in training needs too: computed once.
    at::Tensor sum_grad_xhat, sum_grad;
    if (want_w || want_b || (want_x && training)) {
      std::tie(sum_grad_xhat, sum_grad) = below_autograd(parameters_op, g, x_, mean, invstd);
    }
    at::Tensor grad_x, grad_w, grad_b;
    if (want_x) {  // updateGradInput
      const OptTensor sums_xhat = training ? OptTensor(sum_grad_xhat) : std::nullopt;
      const OptTensor sums = training ? OptTensor(sum_grad) : std::nullopt;
      grad_x = below_autograd(input_op, g, x_, w, mean, invstd, training, sums_xhat, sums);
    }
    // accGradParameters at scale 1, in the parameters' dtype (float16 parameters of a float16 x get
    // float32 sums).
    if (want_w) grad_w = sum_grad_xhat.to(parameter_dtype);
    if (want_b) grad_b = sum_grad.to(parameter_dtype);
    if (graph_needed(g, x_, w)) {  // create_graph=True: a second backward must stop here
      auto node = new_node<BatchNormBackwardBackward>(g, x_, w);
      for (at::Tensor* t : {&grad_x, &grad_w, &grad_b}) {
        if (t->defined()) torch::autograd::set_history(*t, node);
      }
    }
    return {grad_x, grad_w, grad_b};
  }
};

// The op writes the running statistics below autograd, where nothing bumps their version counters:
// bump them here, so autograd sees that a saved running statistic has changed.
void bump_versions(const OptTensor& running_mean, const OptTensor& running_var, bool training) {
  if (!training) return;
  if (given(running_mean)) torch::autograd::impl::bump_version(*running_mean);
  if (given(running_var)) torch::autograd::impl::bump_version(*running_var);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_autograd(const at::Tensor& x, const OptTensor& weight,
                                                                   const OptTensor& bias,
                                                                   const OptTensor& running_mean,
                                                                   const OptTensor& running_var, bool training,
                                                                   double momentum, double eps) {
  if (!graph_needed(x, weight, bias)) {
    auto out = below_autograd(batch_norm_op(), x, weight, bias, running_mean, running_var, training, momentum, eps);
    bump_versions(running_mean, running_var, training);
    return out;
  }
  auto node = new_node<BatchNormBackward>(x, weight, bias);
  auto out = below_autograd(batch_norm_op(), x, weight, bias, running_mean, running_var, training, momentum, eps);
  bump_versions(running_mean, running_var, training);
  auto& [y, save_mean, save_invstd] = out;
  node->x = SavedVariable(x, /*is_output=*/false);
  if (x.requires_grad() && given(weight)) node->weight = SavedVariable(*weight, /*is_output=*/false);
  // save_mean and save_invstd are outputs without a gradient (the graph holds only y): saved as plain tensors.
  node->save_mean = SavedVariable(save_mean, /*is_output=*/false);
  node->save_invstd = SavedVariable(save_invstd, /*is_output=*/false);
  node->training = training;
  node->has_weight = given(weight);
  node->has_bias = given(bias);
  node->parameter_dtype = given(weight) ? weight->scalar_type()
                          : given(bias) ? bias->scalar_type()
                                        : x.scalar_type();
  torch::autograd::set_history(y, node);
  return out;
}

}  // namespace
}  // namespace labops::batch_norm

TORCH_LIBRARY_IMPL(labops, Autograd, m) {
  m.impl("batch_norm", &labops::batch_norm::batch_norm_autograd);
}
