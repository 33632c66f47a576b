// Argument checks shared by every op. Each names the op, the argument and the
// rule, and raises ValueError (TORCH_CHECK_VALUE) so Python callers get a
// clear exception instead of a crash or silent garbage.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/core/SymNodeImpl.h>
#include <c10/util/DimVector.h>
#include <c10/util/Exception.h>

namespace labops {

// "[2, 3, 4]". Built by hand: streaming an IntArrayRef into an error message
// crashed a g++ 13 build of these checks against torch 2.11.
inline std::string shape_str(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(sizes[i]);
  }
  return out + "]";
}

// A size as the messages print it: its value, or its symbol under torch.compile's dynamic shapes
// (the Meta kernels see SymInts; the eager ops see plain numbers and print the same).
inline std::string sym_str(const c10::SymInt& v) {
  if (auto value = v.maybe_as_int()) return std::to_string(*value);
  return v.toSymNodeImplUnowned()->str();
}

inline std::string shape_str(c10::SymIntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + sym_str(sizes[i]);
  return out + "]";
}

// An int[] size argument (input_size, weight_size) as the SymInt rules read it: a kernel gets ints,
// copied into SymInts here, on the stack up to 5 entries (SymInt(v) keeps any int64, even one too
// negative for a SymInt's inline range). A Meta kernel takes int[] as IntArrayRef too: the
// dispatcher refuses SymIntArrayRef for an int[] argument.
inline c10::SymDimVector as_sym_sizes(at::IntArrayRef sizes) { return c10::SymDimVector(sizes.begin(), sizes.end()); }

namespace detail {
// Error messages are assembled here, as strings, instead of by streaming
// numbers into an ostream (what TORCH_CHECK does with its arguments): with
// g++ 13 against torch 2.11, inserting an integer into an ostream from this
// library segfaulted inside libstdc++ (cuda-gdb: ostream::_M_insert<long>).
inline void append(std::string& s, std::string_view v) { s.append(v.data(), v.size()); }
inline void append(std::string& s, const char* v) { s += v; }
inline void append(std::string& s, const std::string& v) { s += v; }
inline void append(std::string& s, char v) { s += v; }
inline void append(std::string& s, at::IntArrayRef v) { s += shape_str(v); }
inline void append(std::string& s, c10::SymIntArrayRef v) { s += shape_str(v); }
inline void append(std::string& s, const c10::SymInt& v) { s += sym_str(v); }
inline void append(std::string& s, c10::ScalarType v) { s += c10::toString(v); }
inline void append(std::string& s, const c10::Device& v) { s += v.str(); }
template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
void append(std::string& s, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    s += v ? "true" : "false";
  } else {
    s += std::to_string(v);
  }
}

template <typename... Args>
std::string message(const Args&... args) {
  std::string s;
  (append(s, args), ...);
  return s;
}
}  // namespace detail

// TORCH_CHECK_VALUE (raises ValueError in Python) with a message built by
// detail::message. Every labops argument check goes through this macro.
#define LABOPS_CHECK(cond, ...) TORCH_CHECK_VALUE(cond, ::labops::detail::message(__VA_ARGS__))

inline void check_floating(const at::Tensor& t, const char* op, const char* arg) {
  LABOPS_CHECK(at::isFloatingType(t.scalar_type()), "labops.", op, ": ", arg,
                    " must be a floating-point tensor (float32, float64, float16 or "
                    "bfloat16), got ",
                    t.scalar_type());
}

// A (h, w) pair argument (stride, padding, dilation, kernel_size): exactly two
// entries, each >= min (1 for stride, dilation and kernel_size; 0 for padding).
namespace detail {
template <typename Sizes>
void check_pair(Sizes v, const char* op, const char* arg, int64_t min) {
  LABOPS_CHECK(v.size() == 2, "labops.", op, ": ", arg, " must have 2 entries (h, w), got ", v.size());
  LABOPS_CHECK(v[0] >= min && v[1] >= min, "labops.", op, ": ", arg, " must be >= ", min, ", got ", v);
}
}  // namespace detail
inline void check_pair(at::IntArrayRef v, const char* op, const char* arg, int64_t min) {
  detail::check_pair(v, op, arg, min);
}
// The same rule for a SymInt[2] argument (col2im's output_size), read by a Meta kernel.
inline void check_pair(c10::SymIntArrayRef v, const char* op, const char* arg, int64_t min) {
  detail::check_pair(v, op, arg, min);
}

// `t` must have the dtype and the device of `ref` (named `ref_arg` in the message).
inline void check_like(const at::Tensor& t, const at::Tensor& ref, const char* op, const char* arg,
                       const char* ref_arg) {
  LABOPS_CHECK(t.scalar_type() == ref.scalar_type(), "labops.", op, ": ", arg,
               " must have the dtype of ", ref_arg, " (", ref.scalar_type(), "), got ",
               t.scalar_type());
  LABOPS_CHECK(t.device() == ref.device(), "labops.", op, ": ", arg, " must be on the device of ",
               ref_arg, " (", ref.device(), "), got ", t.device());
}

// check_like plus the same shape.
inline void check_same_meta(const at::Tensor& t, const at::Tensor& ref, const char* op,
                            const char* arg, const char* ref_arg) {
  LABOPS_CHECK(t.sym_sizes() == ref.sym_sizes(), "labops.", op, ": ", arg, " must have the shape of ",
               ref_arg, " ", ref.sym_sizes(), ", got ", t.sym_sizes());
  check_like(t, ref, op, arg, ref_arg);
}

}  // namespace labops
