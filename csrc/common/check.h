// Argument checks shared by every op. Each names the op, the argument and the
// rule, and raises ValueError (TORCH_CHECK_VALUE) so Python callers get a
// clear exception instead of a crash or silent garbage.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace labops {

inline void check_floating(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), "labops.", op, ": ", arg,
                    " must be a floating-point tensor (float32, float64, float16 or "
                    "bfloat16), got ",
                    t.scalar_type());
}

inline void check_same_meta(const at::Tensor& t, const at::Tensor& ref, const char* op,
                            const char* arg, const char* ref_arg) {
  TORCH_CHECK_VALUE(t.sizes() == ref.sizes(), "labops.", op, ": ", arg, " must have the shape of ",
                    ref_arg, " ", ref.sizes(), ", got ", t.sizes());
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), "labops.", op, ": ", arg,
                    " must have the dtype of ", ref_arg, " (", ref.scalar_type(), "), got ",
                    t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == ref.device(), "labops.", op, ": ", arg,
                    " must be on the device of ", ref_arg, " (", ref.device(), "), got ",
                    t.device());
}

}  // namespace labops
