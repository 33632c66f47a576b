// Tensor-level entry points of bilinear upsampling, written once and
// instantiated per device: upsample/cpu.cpp uses Entry<cpu::UpsampleLauncher>,
// upsample/cuda.cu uses Entry<cuda::UpsampleLauncher>. They check the
// arguments, make inputs contiguous, allocate, dispatch on dtype and hand raw
// pointers plus the two Axis descriptions to the launcher.
//
// A Launcher provides, for scalar_t in {float, double, half, bfloat16} and
// T = at::opmath_type<scalar_t>:
//   forward(x, y, planes, ah, aw, forced)          y = A_h x A_w^T per plane; `forced` is the
//                                                  forced rung (0: the launcher picks), see
//                                                  forward_ladder below
//   backward_gather(g, grad_in, planes, ah, aw)    deterministic gather
//   backward_scatter(g, acc, planes, ah, aw)       atomic scatter into a zeroed
//                                                  opmath-typed buffer `acc`
#pragma once

#include <array>
#include <limits>
#include <optional>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>

#include "../common/check.h"
#include "../common/empty.h"
#include "../common/ladder.h"
#include "upsample.h"

namespace labops::upsample {

// The forward's rungs (Note [the ladder], common/ladder.h), rung 1 the textbook body. Which rung
// runs by default: LADDER_DEFAULTS in labops/ops/upsample.py, docs/layers/upsample.md "The ladder".
inline ladder::Ladder& forward_ladder() {
  static ladder::Ladder rungs(
      "upsample", "upsample_bilinear2d",
      {{"textbook", "forward_at for every output element: its row's and its column's taps computed each time; "
                    "elements shared among the threads"},
       {"row_taps", "one output row per step: the column taps computed once per call, the row's once per row"}},
      {{"textbook", "forward_kernel: a grid-stride loop over forward_at, one output element per thread per trip"},
       {"column_rows", "forward_rows_kernel (Note [column-owning threads]): a thread owns V output columns, "
                       "computes their taps once and walks down the rows (output width a multiple of V)"},
       {"staged_rows", "forward_staged_kernel (Note [staged input rows]): a block copies the input rows of its "
                       "output tile into shared memory, then blends from there (upsampling on both axes)"}});
  return rungs;
}

inline void check_scale(std::optional<double> scale, const char* op, const char* arg) {
  LABOPS_CHECK(!scale.has_value() || (*scale > 0 && *scale < std::numeric_limits<double>::infinity()),
                    "labops.", op, ": ", arg, " must be a positive finite number or None, got ",
                    scale.value_or(0.0));
}

// ---- the rules and the output's shape, stated once ----
// Every call checks its arguments here first; the Meta kernels (struct Meta below), which fake tensors run
// under torch.compile, are these functions alone. Sizes are SymInts: under dynamic shapes they are
// symbols, and a comparison becomes a guard on them.

inline void check_4d(const at::Tensor& t, const char* op, const char* arg) {
  LABOPS_CHECK(t.dim() == 4, "labops.", op, ": ", arg, " must be a 4-D (N, C, H, W) tensor, got ",
                    t.dim(), "-D with shape ", t.sym_sizes());
}

// Spatial sizes go through float coordinates: keep them where a float still
// counts every integer (2^24), far beyond any real image.
inline void check_spatial(const c10::SymInt& size, const char* op, const char* what) {
  LABOPS_CHECK(size > 0 && size <= (int64_t(1) << 24), "labops.", op, ": ", what,
                    " must be between 1 and 2^24, got ", size);
}

// upsample_bilinear2d: (N, C, H, W) -> (N, C, out_h, out_w).
inline std::array<c10::SymInt, 4> upsample_bilinear2d_output_size(const at::Tensor& x,
                                                                  c10::SymIntArrayRef output_size,
                                                                  c10::string_view coordinate_mode,
                                                                  std::optional<double> scale_h,
                                                                  std::optional<double> scale_w) {
  constexpr const char* op = "upsample_bilinear2d";
  check_floating(x, op, "x");
  check_4d(x, op, "x");
  LABOPS_CHECK(output_size.size() == 2 && output_size[0] > 0 && output_size[1] > 0, "labops.", op,
                    ": output_size must be two positive integers (out_h, out_w), got ", output_size);
  check_spatial(x.sym_size(2), op, "x's height");
  check_spatial(x.sym_size(3), op, "x's width");
  check_spatial(output_size[0], op, "output_size[0]");
  check_spatial(output_size[1], op, "output_size[1]");
  check_scale(scale_h, op, "scale_h");
  check_scale(scale_w, op, "scale_w");
  parse_coordinate_mode(coordinate_mode, op);
  return {x.sym_size(0), x.sym_size(1), output_size[0], output_size[1]};
}

// upsample_bilinear2d_backward: grad_output (N, C, out_h, out_w) -> the gradient of an input of
// input_size (N, C, H, W), the output's shape.
inline void check_upsample_bilinear2d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef input_size,
                                               c10::string_view coordinate_mode, std::optional<double> scale_h,
                                               std::optional<double> scale_w) {
  constexpr const char* op = "upsample_bilinear2d_backward";
  check_floating(grad_output, op, "grad_output");
  check_4d(grad_output, op, "grad_output");
  LABOPS_CHECK(input_size.size() == 4, "labops.", op, ": input_size must have 4 entries (N, C, H, W), got ",
                    input_size);
  LABOPS_CHECK(input_size[0] >= 0 && input_size[1] >= 0, "labops.", op,
                    ": input_size must not be negative, got ", input_size);
  LABOPS_CHECK(grad_output.sym_size(0) == input_size[0] && grad_output.sym_size(1) == input_size[1],
                    "labops.", op, ": grad_output must have input_size's N and C (", input_size[0], ", ",
                    input_size[1], "), got shape ", grad_output.sym_sizes());
  check_spatial(input_size[2], op, "input_size[2]");
  check_spatial(input_size[3], op, "input_size[3]");
  check_spatial(grad_output.sym_size(2), op, "grad_output's height");
  check_spatial(grad_output.sym_size(3), op, "grad_output's width");
  check_scale(scale_h, op, "scale_h");
  check_scale(scale_w, op, "scale_w");
  parse_coordinate_mode(coordinate_mode, op);
}

struct Meta {
  static at::Tensor forward(const at::Tensor& x, c10::SymIntArrayRef output_size,
                            c10::string_view coordinate_mode, std::optional<double> scale_h,
                            std::optional<double> scale_w) {
    return at::empty_symint(upsample_bilinear2d_output_size(x, output_size, coordinate_mode, scale_h, scale_w),
                            x.options());
  }

  static at::Tensor backward(const at::Tensor& grad_output, c10::SymIntArrayRef input_size,
                             c10::string_view coordinate_mode, std::optional<double> scale_h,
                             std::optional<double> scale_w, bool /*deterministic*/) {
    check_upsample_bilinear2d_backward(grad_output, input_size, coordinate_mode, scale_h, scale_w);
    return at::empty_symint(input_size, grad_output.options());
  }
};

template <typename Launcher>
struct Entry {
  static at::Tensor forward(const at::Tensor& x, at::IntArrayRef output_size,
                            c10::string_view coordinate_mode, std::optional<double> scale_h,
                            std::optional<double> scale_w) {
    // output_size is SymInt[]: this kernel gets concrete ints from the dispatcher, SymInts as they are (no copy).
    const std::array<c10::SymInt, 4> out_size = upsample_bilinear2d_output_size(
        x, c10::fromIntArrayRefSlow(output_size), coordinate_mode, scale_h, scale_w);
    const CoordMode mode = parse_coordinate_mode(coordinate_mode, "upsample_bilinear2d");

    c10::OptionalDeviceGuard guard(x.device());
    at::Tensor input = x.contiguous();
    at::Tensor out = labops::empty(C10_AS_INTARRAYREF_SLOW(out_size), x.options());
    const int64_t planes = x.size(0) * x.size(1);
    if (out.numel() == 0) return out;
    const int forced = forward_ladder().forced();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "labops_upsample_fwd", [&] {
      using T = at::opmath_type<scalar_t>;
      Launcher::template forward<scalar_t, T>(
          input.template const_data_ptr<scalar_t>(), out.template mutable_data_ptr<scalar_t>(), planes,
          make_axis<T>(x.size(2), output_size[0], mode, scale_h),
          make_axis<T>(x.size(3), output_size[1], mode, scale_w), forced);
    });
    return out;
  }

  static at::Tensor backward(const at::Tensor& grad_output, at::IntArrayRef input_size,
                             c10::string_view coordinate_mode, std::optional<double> scale_h,
                             std::optional<double> scale_w, bool deterministic) {
    check_upsample_bilinear2d_backward(grad_output, c10::fromIntArrayRefSlow(input_size), coordinate_mode,
                                       scale_h, scale_w);
    const CoordMode mode = parse_coordinate_mode(coordinate_mode, "upsample_bilinear2d_backward");

    c10::OptionalDeviceGuard guard(grad_output.device());
    at::Tensor g = grad_output.contiguous();
    const int64_t planes = input_size[0] * input_size[1];
    at::Tensor result;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "labops_upsample_bwd", [&] {
      using T = at::opmath_type<scalar_t>;
      Axis<T> ah = make_axis<T>(input_size[2], g.size(2), mode, scale_h);
      Axis<T> aw = make_axis<T>(input_size[3], g.size(3), mode, scale_w);
      if (deterministic) {
        result = labops::empty(input_size, g.options());
        if (result.numel() == 0) return;
        Launcher::template backward_gather<scalar_t, T>(
            g.template const_data_ptr<scalar_t>(), result.template mutable_data_ptr<scalar_t>(), planes, ah, aw);
      } else {
        // Scatter adds into zeros, in opmath precision: for half/bfloat16 a
        // float buffer, converted once at the end (adding in half loses bits).
        constexpr auto acc_type = c10::CppTypeToScalarType<T>::value;
        at::Tensor acc = at::zeros(input_size, g.options().dtype(acc_type));
        if (acc.numel() != 0) {
          Launcher::template backward_scatter<scalar_t, T>(
              g.template const_data_ptr<scalar_t>(), acc.template mutable_data_ptr<T>(), planes, ah, aw);
        }
        result = acc_type == g.scalar_type() ? acc : acc.to(g.scalar_type());
      }
    });
    return result;
  }

};

// Every op of the layer with its kernel in `Kernels`: Entry<Launcher> on a device (cpu.cpp, cuda.cu),
// Meta for fake tensors (register.cpp). One list, so no op lacks a kernel on one dispatch key.
template <typename Kernels, typename Module>
void register_kernels(Module& m) {
  m.impl("upsample_bilinear2d", &Kernels::forward).impl("upsample_bilinear2d_backward", &Kernels::backward);
}

}  // namespace labops::upsample
