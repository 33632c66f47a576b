// Argument checks shared by every op. Each names the op, the argument and the
// rule, and raises ValueError (TORCH_CHECK_VALUE) so Python callers get a
// clear exception instead of a crash or silent garbage.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>
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

inline void check_floating(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), "labops.", op, ": ", arg,
                    " must be a floating-point tensor (float32, float64, float16 or "
                    "bfloat16), got ",
                    t.scalar_type());
}

inline void check_same_meta(const at::Tensor& t, const at::Tensor& ref, const char* op,
                            const char* arg, const char* ref_arg) {
  TORCH_CHECK_VALUE(t.sizes() == ref.sizes(), "labops.", op, ": ", arg, " must have the shape of ",
                    ref_arg, " ", shape_str(ref.sizes()), ", got ", shape_str(t.sizes()));
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), "labops.", op, ": ", arg,
                    " must have the dtype of ", ref_arg, " (", ref.scalar_type(), "), got ",
                    t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == ref.device(), "labops.", op, ": ", arg,
                    " must be on the device of ", ref_arg, " (", ref.device(), "), got ",
                    t.device());
}

}  // namespace labops
