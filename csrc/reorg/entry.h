// Reorg: the tensor-level entry points, written once for both devices
// (reorg/cpu.cpp, reorg/cuda.cu); the index math is reorg.h's.
//
// Launcher provides
//   run<scalar_t>(const scalar_t* src, scalar_t* dst, int64_t numel, const ReorgShape&, bool backward,
//                 int forced)
// forward: src = x, dst = y; backward: src = grad_y, dst = grad_x. numel >= 1. `forced` is the
// forward's forced rung (0: the launcher picks; always 0 for the backward, which has no rungs), see
// forward_ladder below.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <c10/util/safe_numerics.h>

#include "../common/check.h"
#include "../common/empty.h"
#include "../common/ladder.h"
#include "reorg.h"

namespace labops::reorg {

// The forward's rungs (Note [the ladder], common/ladder.h), rung 1 the textbook body. Which rung
// runs by default: LADDER_DEFAULTS in labops/ops/reorg.py, docs/layers/reorg.md "The ladder".
inline ladder::Ladder& forward_ladder() {
  static ladder::Ladder rungs(
      "reorg", "reorg",
      {{"textbook", "each output element gathers its input through reorg_input_index; elements shared among "
                    "the threads"},
       {"row_tasks", "one output row of tasks per step (Note [reorg tasks]): reorg_task once per row, then "
                     "the row's s contiguous input streams; any stride"},
       {"row_tasks_s2", "row_tasks with the stride fixed at 2 at compile time: the inner loop unrolls into "
                        "two streams (stride 2 only)"}},
      {{"textbook", "reorg_index_kernel: a grid-stride loop, one output element per thread per trip, gathered "
                    "through reorg_input_index"},
       {"packed_tasks", "reorg_kernel (Note [reorg task kernel]): each thread moves 1, 2 or 4 tasks with one "
                        "packed load and s packed stores, 4 groups in flight (stride 2 or 4, x aligned to a "
                        "task)"}});
  return rungs;
}

inline ReorgOrder parse_reorg_order(std::string_view name, const char* op) {
  if (name == "darknet") return ReorgOrder::Darknet;
  if (name == "dcr") return ReorgOrder::DCR;
  if (name == "crd") return ReorgOrder::CRD;
  LABOPS_CHECK(false, "labops.", op, ": order must be 'darknet', 'dcr' or 'crd', got '", name, "'");
}

// ---- the rules and the output's shape, stated once ----
// Every call checks its arguments here first; the Meta kernels (struct Meta below), which fake tensors run
// under torch.compile, are these functions alone. Sizes are SymInts: under dynamic shapes they are
// symbols, and a comparison becomes a guard on them.

// The geometry check both directions share, on the input's (C, H, W); `t` is the tensor the message shows.
inline void check_geometry(const char* op, const at::Tensor& t, const char* arg, int64_t s, ReorgOrder order,
                           const c10::SymInt& C, const c10::SymInt& H, const c10::SymInt& W) {
  LABOPS_CHECK(s >= 1, "labops.", op, ": stride must be >= 1, got ", s);
  int64_t s2 = 0;
  LABOPS_CHECK(!c10::mul_overflows(s, s, &s2), "labops.", op, ": stride is too large, got ", s);
  LABOPS_CHECK(H % s == 0 && W % s == 0, "labops.", op, ": ", arg,
               "'s height and width must be divisible by stride ", s, ", got ", t.sym_sizes());
  if (order == ReorgOrder::Darknet) {
    LABOPS_CHECK(C % s2 == 0, "labops.", op, ": ", arg, "'s channels must be divisible by stride^2 = ", s2,
                 " for order 'darknet', got ", t.sym_sizes());
  }
}

// reorg: (N, C, H, W) -> (N, C*s*s, H/s, W/s).
inline std::vector<c10::SymInt> reorg_output_size(const at::Tensor& x, int64_t stride, c10::string_view order_name) {
  const char* op = "reorg";
  check_floating(x, op, "x");
  const ReorgOrder order = parse_reorg_order(order_name, op);
  LABOPS_CHECK(x.dim() == 4, "labops.reorg: x must be a 4-D (N, C, H, W) tensor, got ", x.dim(), "-D");
  const c10::SymInt &N = x.sym_size(0), &C = x.sym_size(1), &H = x.sym_size(2), &W = x.sym_size(3);
  check_geometry(op, x, "x", stride, order, C, H, W);
  return {N, C * stride * stride, H / stride, W / stride};
}

// reorg_backward: the inverse, (N, C*s*s, H/s, W/s) -> (N, C, H, W).
inline std::vector<c10::SymInt> reorg_backward_output_size(const at::Tensor& grad_output, int64_t stride,
                                                           c10::string_view order_name) {
  const char* op = "reorg_backward";
  check_floating(grad_output, op, "grad_output");
  const ReorgOrder order = parse_reorg_order(order_name, op);
  LABOPS_CHECK(grad_output.dim() == 4, "labops.reorg_backward: grad_output must be a 4-D tensor, got ",
               grad_output.dim(), "-D");
  LABOPS_CHECK(stride >= 1, "labops.reorg_backward: stride must be >= 1, got ", stride);
  int64_t s2 = 0;
  LABOPS_CHECK(!c10::mul_overflows(stride, stride, &s2), "labops.reorg_backward: stride is too large, got ", stride);
  const c10::SymInt& C_out = grad_output.sym_size(1);
  LABOPS_CHECK(C_out % s2 == 0, "labops.reorg_backward: grad_output's channels must be divisible by stride^2 = ",
               s2, ", got ", grad_output.sym_sizes());
  const c10::SymInt C = C_out / s2, H = grad_output.sym_size(2) * stride, W = grad_output.sym_size(3) * stride;
  check_geometry(op, grad_output, "grad_output", stride, order, C, H, W);
  return {grad_output.sym_size(0), C, H, W};
}

struct Meta {
  static at::Tensor reorg(const at::Tensor& x, int64_t stride, c10::string_view order) {
    return at::empty_symint(reorg_output_size(x, stride, order), x.options());
  }

  static at::Tensor reorg_backward(const at::Tensor& grad_output, int64_t stride, c10::string_view order) {
    return at::empty_symint(reorg_backward_output_size(grad_output, stride, order), grad_output.options());
  }
};

template <typename Launcher>
struct Entry {
  static at::Tensor run(const at::Tensor& src, at::IntArrayRef out_size, const ReorgShape& shape,
                        bool backward) {
    c10::OptionalDeviceGuard guard(src.device());
    at::Tensor dst = labops::empty(out_size, src.options());
    if (dst.numel() == 0) return dst;
    at::Tensor sc = src.contiguous();
    const int forced = backward ? 0 : forward_ladder().forced();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, sc.scalar_type(), "labops_reorg", [&] {
      Launcher::run(sc.const_data_ptr<scalar_t>(), dst.mutable_data_ptr<scalar_t>(), dst.numel(), shape,
                    backward, forced);
    });
    return dst;
  }

  static at::Tensor reorg(const at::Tensor& x, int64_t stride, c10::string_view order_name) {
    const std::vector<c10::SymInt> out_size = reorg_output_size(x, stride, order_name);
    const ReorgOrder order = parse_reorg_order(order_name, "reorg");
    const ReorgShape shape = reorg_shape(order, x.size(1), x.size(2), x.size(3), stride);
    return run(x, C10_AS_INTARRAYREF_SLOW(out_size), shape, /*backward=*/false);
  }

  static at::Tensor reorg_backward(const at::Tensor& grad_output, int64_t stride, c10::string_view order_name) {
    const std::vector<c10::SymInt> in_size = reorg_backward_output_size(grad_output, stride, order_name);
    const ReorgOrder order = parse_reorg_order(order_name, "reorg_backward");
    const ReorgShape shape = reorg_shape(order, in_size[1].expect_int(), in_size[2].expect_int(),
                                         in_size[3].expect_int(), stride);
    return run(grad_output, C10_AS_INTARRAYREF_SLOW(in_size), shape, /*backward=*/true);
  }

};

// Every op of the layer with its kernel in `Kernels`: Entry<Launcher> on a device (cpu.cpp, cuda.cu),
// Meta for fake tensors (register.cpp). One list, so no op lacks a kernel on one dispatch key.
template <typename Kernels, typename Module>
void register_kernels(Module& m) {
  m.impl("reorg", &Kernels::reorg).impl("reorg_backward", &Kernels::reorg_backward);
}

}  // namespace labops::reorg
