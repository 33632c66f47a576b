// Every labops operator schema, in one place. The kernels register
// themselves per device in cpu/*.cpp and cuda/*.cu (TORCH_LIBRARY_IMPL), the
// autograd formulas in autograd.cpp (at the Autograd key); the "fake"
// (shape-only) implementations are registered from Python in labops/ops/.
//
// Naming: <layer> is updateOutput; <layer>_backward (or _backward_input) is
// updateGradInput; _backward_weight / _backward_bias / _acc_grad_parameters
// are accGradParameters.
//
// Sizes that an autograd formula (autograd.cpp) takes from a tensor's shape and passes to an op
// with an Autograd kernel are SymInt[]: symbols under torch.compile's dynamic shapes. The CPU and
// CUDA kernels still take them as int[] (the dispatcher hands them concrete ints).
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
  // x (N, C_in, H, W), weight (C_in*m, 1, kH, kW): F.conv2d(..., groups=C_in). The backward ops
  // are updateGradInput (a gather) and accGradParameters (reductions over N*outH*outW).
  m.def("depthwise_conv2d(Tensor x, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, "
        "int[2] dilation) -> Tensor");
  m.def("depthwise_conv2d_backward_input(Tensor grad_output, Tensor weight, int[] input_size, "
        "int[2] stride, int[2] padding, int[2] dilation) -> Tensor");
  m.def("depthwise_conv2d_backward_weight(Tensor grad_output, Tensor x, int[] weight_size, "
        "int[2] stride, int[2] padding, int[2] dilation) -> Tensor");
  m.def("depthwise_conv2d_backward_bias(Tensor grad_output) -> Tensor");
  // Private, CPU only, for tests/test_depthwise.py: forward and the three gradients through the
  // textbook launcher (the per-element bodies of ops/depthwise.h), to hold the fast CPU path to them.
  m.def("_depthwise_conv2d_textbook(Tensor x, Tensor weight, Tensor? bias, Tensor grad_output, int[2] stride, "
        "int[2] padding, int[2] dilation) -> (Tensor, Tensor, Tensor, Tensor)");

  // ---- upsample_bilinear2d ----
  // coordinate_mode is 'half_pixel', 'align_corners' or 'asymmetric'; scale_h/scale_w are the
  // caller's scale_factor (PyTorch then steps by 1/scale_factor, not in/out) or None.
  // deterministic=True: gather backward; False: the atomic scatter PyTorch uses.
  m.def("upsample_bilinear2d(Tensor x, SymInt[2] output_size, str coordinate_mode, float? scale_h, "
        "float? scale_w) -> Tensor");
  m.def("upsample_bilinear2d_backward(Tensor grad_output, SymInt[] input_size, str coordinate_mode, "
        "float? scale_h, float? scale_w, bool deterministic=True) -> Tensor");

  // ---- im2col / col2im / conv2d_mm ----
  // im2col == F.unfold: (N, C, H, W) -> (N, C*kH*kW, L), rows ordered (c, kh, kw).
  // col2im == F.fold: its adjoint, summing overlapping windows (not its inverse).
  m.def("im2col(Tensor x, int[2] kernel_size, int[2] stride=1, int[2] padding=0, int[2] dilation=1) -> Tensor");
  m.def("col2im(Tensor cols, SymInt[2] output_size, int[2] kernel_size, int[2] stride=1, int[2] padding=0, "
        "int[2] dilation=1) -> Tensor");
  // conv2d_mm == F.conv2d (groups=1) as SpatialConvolutionMM: im2col + GEMM.
  m.def("conv2d_mm(Tensor x, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
        "int[2] dilation=1) -> Tensor");
  m.def("conv2d_mm_backward_input(Tensor grad_output, Tensor weight, int[] input_size, int[2] stride, "
        "int[2] padding, int[2] dilation) -> Tensor");
  // accGradParameters: grad_weight += scale * dE/dW, grad_bias += scale * dE/db, in place.
  m.def("conv2d_mm_acc_grad_parameters(Tensor grad_output, Tensor x, Tensor(a!) grad_weight, "
        "Tensor(b!)? grad_bias, int[2] stride, int[2] padding, int[2] dilation, float scale=1) -> ()");
  // What autograd calls: accGradParameters at scale 1 into new tensors (grad_weight, grad_bias), one op.
  m.def("conv2d_mm_backward_weight(Tensor grad_output, Tensor x, int[] weight_size, int[2] stride, "
        "int[2] padding, int[2] dilation) -> (Tensor, Tensor)");

  // ---- softmax / cross_entropy ----
  // softmax backward takes the saved output y: grad_x = y * (g - sum(g * y)) along dim.
  m.def("softmax(Tensor x, int dim) -> Tensor");
  m.def("softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
  // Fused log-softmax + NLL on (N, C) logits and int64 class indices; reduction is
  // 'mean', 'sum' or 'none'. The backward recomputes softmax from the logits.
  m.def("cross_entropy(Tensor logits, Tensor target, str reduction='mean') -> Tensor");
  m.def("cross_entropy_backward(Tensor grad_loss, Tensor logits, Tensor target, str reduction) -> Tensor");

  // ---- reorg ----
  // YOLOv2 passthrough, order 'darknet', 'dcr' (space_to_depth) or 'crd' (pixel_unshuffle);
  // backward is the inverse permutation
  m.def("reorg(Tensor x, int stride=2, str order='darknet') -> Tensor");
  m.def("reorg_backward(Tensor grad_output, int stride=2, str order='darknet') -> Tensor");
}
