// Every labops operator schema, in one place. The kernels register
// themselves per device in cpu/*.cpp and cuda/*.cu (TORCH_LIBRARY_IMPL);
// autograd and "fake" (shape-only) implementations are registered from
// Python in labops/ops/.
//
// Naming: <layer> is updateOutput; <layer>_backward (or _backward_input) is
// updateGradInput; _backward_weight / _backward_bias / _acc_grad_parameters
// are accGradParameters.
#include <torch/library.h>

TORCH_LIBRARY(labops, m) {
  // ---- tanh: backward takes the saved output y, since dtanh/dx = 1 - y^2 ----
  m.def("tanh(Tensor x) -> Tensor");
  m.def("tanh_backward(Tensor grad_output, Tensor output) -> Tensor");

  // ---- gelu: approximate is 'none' (erf), 'tanh' or 'sigmoid' (x * sigmoid(1.702 x)) ----
  m.def("gelu(Tensor x, str approximate='none') -> Tensor");
  m.def("gelu_backward(Tensor grad_output, Tensor x, str approximate='none') -> Tensor");

  // ---- global_avg_pool2d ----

  // ---- depthwise_conv2d ----

  // ---- upsample_bilinear2d ----

  // ---- im2col / col2im / conv2d_mm ----

  // ---- softmax / cross_entropy ----
  // softmax backward takes the saved output y: grad_x = y * (g - sum(g * y)) along dim.
  m.def("softmax(Tensor x, int dim) -> Tensor");
  m.def("softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
  // Fused log-softmax + NLL on (N, C) logits and int64 class indices; reduction is
  // 'mean', 'sum' or 'none'. The backward recomputes softmax from the logits.
  m.def("cross_entropy(Tensor logits, Tensor target, str reduction='mean') -> Tensor");
  m.def("cross_entropy_backward(Tensor grad_loss, Tensor logits, Tensor target, str reduction) -> Tensor");

  // ---- reorg ----
}
