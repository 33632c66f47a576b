// What every layer's autograd kernel (csrc/<layer>/register.cpp) is built from.
//
// Why C++ and not torch.library.register_autograd (Python)? Every eager call of
// an op crosses its Autograd kernel, even when nothing needs a gradient: the
// Python one cost about 4 us per call on the course's CPU, more than the op
// itself (tools/host_time.py measures it). These kernels do the same work in
// C++, and skip the graph entirely when no input requires grad.
//
// A layer's autograd kernel: when no input wants a gradient, call the op below
// autograd; otherwise build a graph node that keeps what the backward needs,
// call the op below autograd and hang the output on the node. The node's
// backward calls the layer's backward ops through the dispatcher, so where a
// backward op has an Autograd kernel too, double backward works.
//
// Sizes taken from tensors travel as SymInts: under torch.compile with dynamic
// shapes they are symbols, and the CPU/CUDA kernels (which take IntArrayRef)
// get them as plain ints from the dispatcher.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace labops::autograd {

using at::IntArrayRef;
using c10::string_view;
using c10::SymIntArrayRef;
using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;
using OptTensor = std::optional<at::Tensor>;
using OptDouble = std::optional<double>;

// The op `labops::name` as a typed handle. Look it up once, in a function-local static.
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
// key: for the backward ops without an Autograd kernel that key is PyTorch's boxed autograd
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

// Run the op below autograd and make `node` the grad_fn of its output: the last step of every
// Autograd kernel that builds a graph.
template <class NodePointer, class Sig, class... Args>
at::Tensor output_of(const NodePointer& node, const c10::TypedOperatorHandle<Sig>& op, Args&&... args) {
  at::Tensor y = below_autograd(op, std::forward<Args>(args)...);
  torch::autograd::set_history(y, node);
  return y;
}

inline SymIntArrayRef last2(SymIntArrayRef sizes) { return sizes.slice(sizes.size() - 2); }

// Graph nodes are written by hand. A torch::autograd::Function<T> is the shorter way to write a
// backward, but Function::apply does general work on every call that builds a graph: a CppNode
// holding a hash map of saved data, input and output info, sets of dirty and non-differentiable
// outputs, and a demangled type name at every backward. On a tiny tensor that costs several
// times the op itself (tools/host_time.py, "fwd rg"). So every op builds its node the way
// PyTorch's generated VariableType code does: a Node subclass with plain fields, its edges to
// the inputs' gradients, then set_history on the output.
//
// The pointer that owns a graph node is c10::intrusive_ptr<Node> since torch 2.13 and
// std::shared_ptr<Node> before (the GPU machines run 2.11); an Edge holds one.
using NodePtr = decltype(torch::autograd::Edge::function);
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

// The node of an op with one edge (one input that can take a gradient) whose backward is one call:
// a backward op, or for a linear op's backward, the forward op. A node names itself and says what
// it keeps; `gradient` is its backward formula. When nothing flowed back to the node (an undefined
// grad_output), apply returns no gradient without calling it.
struct OneGradientNode : Node {
  virtual at::Tensor gradient(const at::Tensor& grad_output) = 0;
  variable_list apply(variable_list&& grads) final {
    if (!grads[0].defined()) return {at::Tensor()};
    return {gradient(grads[0])};
  }
};

}  // namespace labops::autograd
