// Every labops operator schema, in one place. The kernels register
// themselves per device in cpu/*.cpp and cuda/*.cu (TORCH_LIBRARY_IMPL);
// autograd and "fake" (shape-only) implementations are registered from
// Python in labops/ops/.
#include <torch/library.h>

TORCH_LIBRARY(labops, m) {
  // Tanh: backward takes the saved output y, since dtanh/dx = 1 - y^2.
  m.def("tanh(Tensor x) -> Tensor");
  m.def("tanh_backward(Tensor grad_output, Tensor output) -> Tensor");
  // GELU: approximate is 'none' (erf), 'tanh' or 'sigmoid' (x * sigmoid(1.702 x)).
  m.def("gelu(Tensor x, str approximate='none') -> Tensor");
  m.def("gelu_backward(Tensor grad_output, Tensor x, str approximate='none') -> Tensor");
}
