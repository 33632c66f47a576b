// Autograd kernels of the labops ops, in C++: one graph node per differentiable
// op, registered at the Autograd key.
//
// Why not torch.library.register_autograd (Python)? Every eager call of an op
// crosses its Autograd kernel, even when nothing needs a gradient: the Python
// one cost about 4 us per call on the course's CPU, more than the op itself
// (.ci/host_time.py measures it). These kernels do the same work in C++, and
// skip the graph entirely when no input requires grad.
//
// Each node mirrors the Python face named beside it (labops/ops/*.py): the
// same saved values, the same gradients, computed only for the inputs that
// want one. Forward calls the op below autograd; backward calls the labops
// backward ops through the dispatcher, so where a backward op has an Autograd
// kernel here (pooling, upsample, reorg, im2col/col2im) double backward works.
//
// Sizes taken from tensors travel as SymInts: under torch.compile with dynamic
// shapes they are symbols, and the CPU/CUDA kernels (which take IntArrayRef)
// get them as plain ints from the dispatcher.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <string>
#include <tuple>
#include <vector>

namespace {

using torch::autograd::variable_list;
using at::IntArrayRef;
using c10::SymIntArrayRef;
using c10::string_view;
using OptTensor = std::optional<at::Tensor>;
using OptDouble = std::optional<double>;

// The op `labops::name` as a typed handle, looked up on first use.
template <class Sig>
c10::TypedOperatorHandle<Sig> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// Call the op's CPU/CUDA (or fake) kernel, skipping the Autograd key.
template <class Sig, class... Args>
decltype(auto) below_autograd(const c10::TypedOperatorHandle<Sig>& op, Args&&... args) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(std::forward<Args>(args)...);
}

// Call a backward op from a backward formula. The engine runs a backward with grad mode on only
// for create_graph=True (double backward); otherwise nothing can be recorded, so skip the Autograd
// key: for the backward ops without an Autograd kernel here that key is PyTorch's boxed autograd
// fallback, which boxes every argument onto a stack to find that no graph is needed.
template <class Sig, class... Args>
decltype(auto) call_backward_op(const c10::TypedOperatorHandle<Sig>& op, Args&&... args) {
  if (at::GradMode::is_enabled()) return op.call(std::forward<Args>(args)...);
  return below_autograd(op, std::forward<Args>(args)...);
}

inline bool requires_grad(const at::Tensor& t) { return t.requires_grad(); }
inline bool requires_grad(const OptTensor& t) { return t.has_value() && t->defined() && t->requires_grad(); }

// No graph to build: call the op directly (no Node allocated, nothing saved).
template <class... Ts>
bool graph_needed(const Ts&... tensors) {
  return at::GradMode::is_enabled() && (requires_grad(tensors) || ...);
}

SymIntArrayRef last2(SymIntArrayRef sizes) { return sizes.slice(sizes.size() - 2); }

// Graph nodes written by hand. A torch::autograd::Function<T> is the shorter way to write a
// backward, but Function::apply does general work on every call that builds a graph: a CppNode
// holding a hash map of saved data, input and output info, sets of dirty and non-differentiable
// outputs, and a demangled type name at every backward. On a tiny tensor that costs several
// times the op itself (.ci/host_time.py, "fwd rg"). So every op builds its node the way
// PyTorch's generated VariableType code does: a Node subclass with plain fields, its edges to
// the inputs' gradients, then set_history on the output.
using torch::autograd::Node;
using torch::autograd::SavedVariable;

// The pointer that owns a graph node: c10::intrusive_ptr<Node> since torch 2.13, std::shared_ptr<Node>
// before (the GPU machines run 2.11). An Edge holds one, so its type says which.
using NodePtr = std::decay_t<decltype(std::declval<torch::autograd::Edge>().function)>;
constexpr bool kSharedNodes = std::is_same_v<NodePtr, std::shared_ptr<Node>>;

// A new node of type N whose edges lead to the gradients of `inputs` (edge i: input i).
template <class N, class... Inputs>
auto new_node(const Inputs&... inputs) {
  auto node = [] {
    if constexpr (kSharedNodes) return std::make_shared<N>();
    else return c10::make_intrusive<N>();
  }();
  node->set_next_edges(torch::autograd::collect_next_edges(inputs...));
  return node;
}

// ---------------------------------------------------------------- activation.py: tanh, gelu

using TanhSig = at::Tensor(const at::Tensor&);
using TanhBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&);
const auto& tanh_op() { static auto op = find_op<TanhSig>("labops::tanh"); return op; }
const auto& tanh_backward_op() { static auto op = find_op<TanhBackwardSig>("labops::tanh_backward"); return op; }

struct TanhBackward : Node {
  SavedVariable output;  // tanh's gradient needs y, not x
  std::string name() const override { return "labops::TanhBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    output.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(tanh_backward_op(), grads[0], output.unpack(getptr()))};
  }
};

at::Tensor tanh_autograd(const at::Tensor& x) {
  if (!graph_needed(x)) return below_autograd(tanh_op(), x);
  auto node = new_node<TanhBackward>(x);
  auto y = below_autograd(tanh_op(), x);
  torch::autograd::set_history(y, node);
  node->output = SavedVariable(y, /*is_output=*/true);
  return y;
}

using GeluSig = at::Tensor(const at::Tensor&, string_view);
using GeluBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, string_view);
const auto& gelu_op() { static auto op = find_op<GeluSig>("labops::gelu"); return op; }
const auto& gelu_backward_op() { static auto op = find_op<GeluBackwardSig>("labops::gelu_backward"); return op; }

struct GeluBackward : Node {
  SavedVariable input;
  std::string approximate;
  std::string name() const override { return "labops::GeluBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    input.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(gelu_backward_op(), grads[0], input.unpack(), approximate)};
  }
};

at::Tensor gelu_autograd(const at::Tensor& x, string_view approximate) {
  if (!graph_needed(x)) return below_autograd(gelu_op(), x, approximate);
  auto node = new_node<GeluBackward>(x);
  node->input = SavedVariable(x, /*is_output=*/false);
  node->approximate = std::string(approximate);
  auto y = below_autograd(gelu_op(), x, approximate);
  torch::autograd::set_history(y, node);
  return y;
}

// ---------------------------------------------------------------- pooling.py: global_avg_pool2d

using PoolSig = at::Tensor(const at::Tensor&);
using PoolBackwardSig = at::Tensor(const at::Tensor&, SymIntArrayRef);
const auto& pool_op() { static auto op = find_op<PoolSig>("labops::global_avg_pool2d"); return op; }
const auto& pool_backward_op() {
  static auto op = find_op<PoolBackwardSig>("labops::global_avg_pool2d_backward");
  return op;
}

struct GlobalAvgPool2dBackward : Node {
  std::vector<c10::SymInt> input_size;  // the gradient needs only the shape, not x
  std::string name() const override { return "labops::GlobalAvgPool2dBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(pool_backward_op(), grads[0], input_size)};
  }
};

// The backward is linear in grad_output; its adjoint is the forward (mean of each plane).
struct GlobalAvgPool2dBackwardBackward : Node {
  std::string name() const override { return "labops::GlobalAvgPool2dBackwardBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(pool_op(), grads[0])};
  }
};

at::Tensor pool_autograd(const at::Tensor& x) {
  if (!graph_needed(x)) return below_autograd(pool_op(), x);
  auto node = new_node<GlobalAvgPool2dBackward>(x);
  node->input_size = x.sym_sizes().vec();
  auto y = below_autograd(pool_op(), x);
  torch::autograd::set_history(y, node);
  return y;
}
at::Tensor pool_backward_autograd(const at::Tensor& grad_output, SymIntArrayRef input_size) {
  if (!graph_needed(grad_output)) return below_autograd(pool_backward_op(), grad_output, input_size);
  auto node = new_node<GlobalAvgPool2dBackwardBackward>(grad_output);
  auto y = below_autograd(pool_backward_op(), grad_output, input_size);
  torch::autograd::set_history(y, node);
  return y;
}

// ---------------------------------------------------------------- the convolutions' graph node

// The convolutions (depthwise_conv2d, conv2d_mm) share one signature,
// (x, weight, bias?, stride, padding, dilation), and one graph node: it keeps
// the window, the sizes, whether a bias was given, and only the tensors the
// wanted gradients read (grad_x reads the weight, grad_w reads x). Each
// convolution's Kind names its ops and says how its three gradients are made.
using ConvSig = at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&, IntArrayRef, IntArrayRef,
                           IntArrayRef);
// called with sizes as SymInts: the schemas say int[], the kernels get ints (see the top of this file)
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
  auto y = below_autograd(Kind::op(), x, weight, bias, stride, padding, dilation);
  torch::autograd::set_history(y, node);
  return y;
}

// ---------------------------------------------------------------- depthwise.py: depthwise_conv2d

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
    if (want_x) {  // updateGradInput
      grad_x = call_backward_op(input_op, g, n.weight.unpack(), n.input_size, n.stride, n.padding, n.dilation);
    }
    if (want_w) {  // accGradParameters, weight
      grad_w = call_backward_op(weight_op, g, n.x.unpack(), n.weight_size, n.stride, n.padding, n.dilation);
    }
    if (want_b) grad_b = call_backward_op(bias_op, g);  // accGradParameters, bias
    return {grad_x, grad_w, grad_b};
  }
};

// ---------------------------------------------------------------- conv2d_mm.py: im2col, col2im, conv2d_mm

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
struct Im2colBackward : Node {
  std::vector<c10::SymInt> image_size;
  std::optional<ConvWindow> w;
  std::string name() const override { return "labops::Im2colBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(col2im_op(), grads[0], image_size, w->kernel_size, w->stride, w->padding,
                             w->dilation)};
  }
};

struct Col2imBackward : Node {
  std::optional<ConvWindow> w;
  std::string name() const override { return "labops::Col2imBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(im2col_op(), grads[0], w->kernel_size, w->stride, w->padding, w->dilation)};
  }
};

at::Tensor im2col_autograd(const at::Tensor& x, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef d) {
  if (!graph_needed(x)) return below_autograd(im2col_op(), x, k, s, p, d);
  auto node = new_node<Im2colBackward>(x);
  node->image_size = last2(x.sym_sizes()).vec();
  node->w.emplace(k, s, p, d);
  auto y = below_autograd(im2col_op(), x, k, s, p, d);
  torch::autograd::set_history(y, node);
  return y;
}
at::Tensor col2im_autograd(const at::Tensor& cols, SymIntArrayRef output_size, IntArrayRef k, IntArrayRef s,
                           IntArrayRef p, IntArrayRef d) {
  if (!graph_needed(cols)) return below_autograd(col2im_op(), cols, output_size, k, s, p, d);
  auto node = new_node<Col2imBackward>(cols);
  node->w.emplace(k, s, p, d);
  auto y = below_autograd(col2im_op(), cols, output_size, k, s, p, d);
  torch::autograd::set_history(y, node);
  return y;
}

using ConvWeightSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, SymIntArrayRef,
                                                          IntArrayRef, IntArrayRef, IntArrayRef);

// updateGradInput, then accGradParameters at scale 1 into new tensors (exactly the gradients):
// conv2d_mm_backward_weight is that, as one op that also returns the bias gradient. Zeros to
// accumulate into, the accumulating op and a separate sum cost more host time per call than the
// kernels of a small convolution (.ci/host_pieces.py).
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
    const at::Tensor g = grad.contiguous();
    at::Tensor grad_x, grad_w, grad_b;
    if (want_x) {  // updateGradInput
      grad_x = call_backward_op(input_op, g, n.weight.unpack(), n.input_size, n.stride, n.padding, n.dilation);
    }
    if (want_w) {  // accGradParameters into new tensors; the bias gradient comes with the weight's
      std::tie(grad_w, grad_b) =
          call_backward_op(weight_op, g, n.x.unpack(), n.weight_size, n.stride, n.padding, n.dilation);
      if (!want_b) grad_b = at::Tensor();
    } else if (want_b) {  // x was not saved (the weight wants no gradient): the sum alone
      grad_b = g.dim() == 4 ? g.sum({0, 2, 3}) : g.sum({1, 2});
    }
    return {grad_x, grad_w, grad_b};
  }
};

// ---------------------------------------------------------------- upsample.py: upsample_bilinear2d

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
struct UpsampleBilinear2dBackward : Node {
  std::vector<c10::SymInt> input_size;
  Resize r;
  std::string name() const override { return "labops::UpsampleBilinear2dBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(upsample_backward_op(), grads[0], input_size, r.mode, r.scale_h, r.scale_w, true)};
  }
};

// The backward op is linear in grad_output (grad_in = A_h^T G A_w): its gradient is the forward.
struct UpsampleBilinear2dBackwardBackward : Node {
  std::vector<c10::SymInt> output_size;
  Resize r;
  std::string name() const override { return "labops::UpsampleBilinear2dBackwardBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(upsample_op(), grads[0], output_size, r.mode, r.scale_h, r.scale_w)};
  }
};

at::Tensor upsample_autograd(const at::Tensor& x, SymIntArrayRef output_size, string_view mode, OptDouble scale_h,
                             OptDouble scale_w) {
  if (!graph_needed(x)) return below_autograd(upsample_op(), x, output_size, mode, scale_h, scale_w);
  auto node = new_node<UpsampleBilinear2dBackward>(x);
  node->input_size = x.sym_sizes().vec();
  node->r = {std::string(mode), scale_h, scale_w};
  auto y = below_autograd(upsample_op(), x, output_size, mode, scale_h, scale_w);
  torch::autograd::set_history(y, node);
  return y;
}
at::Tensor upsample_backward_autograd(const at::Tensor& grad_output, SymIntArrayRef input_size, string_view mode,
                                      OptDouble scale_h, OptDouble scale_w, bool deterministic) {
  if (!graph_needed(grad_output)) {
    return below_autograd(upsample_backward_op(), grad_output, input_size, mode, scale_h, scale_w, deterministic);
  }
  auto node = new_node<UpsampleBilinear2dBackwardBackward>(grad_output);
  node->output_size = last2(grad_output.sym_sizes()).vec();
  node->r = {std::string(mode), scale_h, scale_w};
  auto y = below_autograd(upsample_backward_op(), grad_output, input_size, mode, scale_h, scale_w, deterministic);
  torch::autograd::set_history(y, node);
  return y;
}

// ---------------------------------------------------------------- softmax.py: softmax, cross_entropy

using SoftmaxSig = at::Tensor(const at::Tensor&, int64_t);
using SoftmaxBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t);
const auto& softmax_op() { static auto op = find_op<SoftmaxSig>("labops::softmax"); return op; }

struct SoftmaxBackward : Node {
  SavedVariable output;  // the gradient needs y, not x
  int64_t dim = 0;
  std::string name() const override { return "labops::SoftmaxBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    output.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    static auto backward_op = find_op<SoftmaxBackwardSig>("labops::softmax_backward");
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(backward_op, grads[0], output.unpack(getptr()), dim)};
  }
};

at::Tensor softmax_autograd(const at::Tensor& x, int64_t dim) {
  if (!graph_needed(x)) return below_autograd(softmax_op(), x, dim);
  auto node = new_node<SoftmaxBackward>(x);
  auto y = below_autograd(softmax_op(), x, dim);
  torch::autograd::set_history(y, node);
  node->output = SavedVariable(y, /*is_output=*/true);
  node->dim = dim;
  return y;
}

using CrossEntropySig = at::Tensor(const at::Tensor&, const at::Tensor&, string_view);
using CrossEntropyBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, string_view);
const auto& cross_entropy_op() { static auto op = find_op<CrossEntropySig>("labops::cross_entropy"); return op; }

// One edge, to the logits: the target holds integers, which never require grad.
struct CrossEntropyBackward : Node {
  SavedVariable logits, target;  // the backward recomputes softmax from the logits
  std::string reduction;
  std::string name() const override { return "labops::CrossEntropyBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    logits.reset_data();
    target.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    static auto backward_op = find_op<CrossEntropyBackwardSig>("labops::cross_entropy_backward");
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(backward_op, grads[0], logits.unpack(), target.unpack(), reduction)};
  }
};

at::Tensor cross_entropy_autograd(const at::Tensor& logits, const at::Tensor& target, string_view reduction) {
  if (!graph_needed(logits)) return below_autograd(cross_entropy_op(), logits, target, reduction);
  auto node = new_node<CrossEntropyBackward>(logits);
  node->logits = SavedVariable(logits, /*is_output=*/false);
  node->target = SavedVariable(target, /*is_output=*/false);
  node->reduction = std::string(reduction);
  auto loss = below_autograd(cross_entropy_op(), logits, target, reduction);
  torch::autograd::set_history(loss, node);
  return loss;
}

// ---------------------------------------------------------------- reorg.py: a permutation and its inverse

using ReorgSig = at::Tensor(const at::Tensor&, int64_t, string_view);
const auto& reorg_op() { static auto op = find_op<ReorgSig>("labops::reorg"); return op; }
const auto& reorg_backward_op() { static auto op = find_op<ReorgSig>("labops::reorg_backward"); return op; }

// Forward is `op`, backward is `inverse`: reorg and reorg_backward are each other's gradient.
template <bool IsBackward>
struct Reorg : Node {
  int64_t stride = 0;
  std::string order;
  static const c10::TypedOperatorHandle<ReorgSig>& op() { return IsBackward ? reorg_backward_op() : reorg_op(); }
  static const c10::TypedOperatorHandle<ReorgSig>& inverse() { return IsBackward ? reorg_op() : reorg_backward_op(); }
  std::string name() const override { return IsBackward ? "labops::ReorgBackwardBackward" : "labops::ReorgBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward_op(inverse(), grads[0], stride, order)};
  }
  static at::Tensor kernel(const at::Tensor& x, int64_t stride, string_view order) {
    if (!graph_needed(x)) return below_autograd(op(), x, stride, order);
    auto node = new_node<Reorg>(x);
    node->stride = stride;
    node->order = std::string(order);
    auto y = below_autograd(op(), x, stride, order);
    torch::autograd::set_history(y, node);
    return y;
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(labops, Autograd, m) {
  m.impl("tanh", &tanh_autograd);
  m.impl("gelu", &gelu_autograd);
  m.impl("global_avg_pool2d", &pool_autograd);
  m.impl("global_avg_pool2d_backward", &pool_backward_autograd);
  m.impl("depthwise_conv2d", &conv_autograd<Depthwise>);
  m.impl("im2col", &im2col_autograd);
  m.impl("col2im", &col2im_autograd);
  m.impl("conv2d_mm", &conv_autograd<Conv2dMM>);
  m.impl("upsample_bilinear2d", &upsample_autograd);
  m.impl("upsample_bilinear2d_backward", &upsample_backward_autograd);
  m.impl("softmax", &softmax_autograd);
  m.impl("cross_entropy", &cross_entropy_autograd);
  m.impl("reorg", &Reorg<false>::kernel);
  m.impl("reorg_backward", &Reorg<true>::kernel);
}
