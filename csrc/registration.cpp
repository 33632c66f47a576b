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
  // (N,C,H,W) -> (N,C,1,1) or (C,H,W) -> (C,1,1); backward spreads grad_output / (H*W)
  m.def("global_avg_pool2d(Tensor x) -> Tensor");
  m.def("global_avg_pool2d_backward(Tensor grad_output, SymInt[] input_size) -> Tensor");

  // ---- depthwise_conv2d ----

  // ---- upsample_bilinear2d ----

  // ---- im2col / col2im / conv2d_mm ----

  // ---- softmax / cross_entropy ----

  // ---- reorg ----
  // YOLOv2 passthrough, order 'darknet', 'dcr' (space_to_depth) or 'crd' (pixel_unshuffle);
  // backward is the inverse permutation
  m.def("reorg(Tensor x, int stride=2, str order='darknet') -> Tensor");
  m.def("reorg_backward(Tensor grad_output, int stride=2, str order='darknet') -> Tensor");
}
