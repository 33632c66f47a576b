// Tensor-level entry points of softmax and cross-entropy, written once and
// instantiated per device: softmax/cpu.cpp uses Entry<cpu::SoftmaxLauncher>,
// softmax/cuda.cu uses Entry<cuda::SoftmaxLauncher>.
//
// Here: argument checks, contiguous inputs, output allocation, dtype dispatch,
// the final reduction of per-row losses. The launcher gets raw pointers and a
// RowGeometry and runs the row bodies of softmax.h. Its interface:
//   kMinStridedRows: fewer strided rows (dim not last) than this are moved
//                    last and made contiguous first

//   softmax_forward<scalar_t>(x, y, geometry, forced)  // forced: the forward's forced rung (0: the launcher
//                                                      // picks), see forward_ladder below
//   softmax_backward<scalar_t>(grad_output, output, grad_input, geometry)
//   cross_entropy_forward<scalar_t>(logits, target, loss_rows, n, c) -> bool (all targets valid)
//   cross_entropy_backward<scalar_t>(grad_loss, grad_loss_stride, scale, logits, target,
//                                    grad_logits, n, c)
#pragma once

#include <algorithm>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/min.h>
#include <ATen/ops/sum.h>
#include <c10/core/DeviceGuard.h>

#include "../common/check.h"
#include "../common/empty.h"
#include "../common/ladder.h"
#include "softmax.h"

namespace labops::softmax {

// The forward's rungs (Note [the ladder], common/ladder.h), rung 1 the textbook body softmax_row of
// softmax.h. The softmax forward only: cross_entropy and the backward ops have no rungs. Which rung runs by
// default: labops/ops/softmax.py LADDER_DEFAULTS, docs/layers/softmax.md "The ladder".
inline ladder::Ladder& forward_ladder() {
  static ladder::Ladder rungs(
      "softmax", "softmax",
      {{"textbook", "softmax_row (softmax.h) per row, one element at a time; rows shared among the threads"},
       {"vectorized", "three sweeps over a row in cache, float32 and float64 in at::vec lanes: along a contiguous "
                      "row, or across 8 or 16 neighbouring strided rows; float16 and bfloat16 one element at a "
                      "time in float"}},
      {{"textbook", "softmax_forward_strided: one thread per row runs softmax_row, grid-stride loop; any rows"},
       {"block_two_pass", "softmax_forward_long: a block per row, an online (max, sum of exps) pass, then the "
                          "outputs from a second read served by L2; contiguous rows of any length"},
       {"register_rows", "softmax_forward_rows: 1 to 1024 threads hold a row in registers, read once, reduced by "
                         "shuffles (Note [softmax kernels]); contiguous rows that fit (up to 32K float32 or "
                         "float16, 4K float64)"},
       {"register_prefetch", "softmax_forward_rows_prefetch: register rows of a whole 1024-thread block, each "
                             "resident block copying its next row to shared memory (cp.async) meanwhile"}});
  return rungs;
}

// A 0-d tensor is a row of one element: dim may be 0 or -1, as in torch.softmax.
inline int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t rank = std::max<int64_t>(ndim, 1);
  LABOPS_CHECK(dim >= -rank && dim < rank, "labops.", op, ": dim must be in [", -rank, ", ",
                    rank - 1, "] for a ", ndim, "-D tensor, got ", dim);
  return dim < 0 ? dim + rank : dim;
}

inline RowGeometry geometry(const at::Tensor& t, int64_t dim) {
  RowGeometry g{1, 1, 1};
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim) g.outer *= t.size(d);
    else if (d == dim) g.size = t.size(d);
    else g.inner *= t.size(d);
  }
  return g;
}

inline void check_logits_target(const at::Tensor& logits, const at::Tensor& target, const char* op) {
  check_floating(logits, op, "logits");
  LABOPS_CHECK(logits.dim() == 2, "labops.", op, ": logits must be 2-D (N, C), got a ",
                    logits.dim(), "-D tensor of shape ", logits.sym_sizes());
  LABOPS_CHECK(target.scalar_type() == at::kLong, "labops.", op,
                    ": target must be an int64 (torch.long) tensor of class indices, got ",
                    target.scalar_type());
  LABOPS_CHECK(target.dim() == 1 && target.sym_size(0) == logits.sym_size(0), "labops.", op,
                    ": target must have shape (N,) = (", logits.sym_size(0), ",), got ", target.sym_sizes());
  LABOPS_CHECK(target.device() == logits.device(), "labops.", op,
                    ": target must be on the device of logits (", logits.device(), "), got ",
                    target.device());
}

// ---- the rules and the output's shape, stated once ----
// Every call checks its arguments here first; the Meta kernels (struct Meta below), which fake tensors run
// under torch.compile, are these functions alone. Sizes are SymInts (symbols under dynamic shapes).
// One rule is left to the eager op: cross_entropy's targets must lie in [0, C), a rule on values,
// which a fake tensor does not have.

inline int64_t softmax_dim(const at::Tensor& x, int64_t dim) {
  check_floating(x, "softmax", "x");
  return wrap_dim(dim, x.dim(), "softmax");
}

inline int64_t softmax_backward_dim(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim) {
  check_floating(output, "softmax_backward", "output");
  check_same_meta(grad_output, output, "softmax_backward", "grad_output", "output");
  return wrap_dim(dim, output.dim(), "softmax_backward");
}

inline Reduction cross_entropy_reduction(const at::Tensor& logits, const at::Tensor& target,
                                         c10::string_view reduction) {
  check_logits_target(logits, target, "cross_entropy");
  return parse_reduction(reduction, "cross_entropy");
}

inline Reduction cross_entropy_backward_reduction(const at::Tensor& grad_loss, const at::Tensor& logits,
                                                  const at::Tensor& target, c10::string_view reduction) {
  constexpr const char* op = "cross_entropy_backward";
  check_logits_target(logits, target, op);
  const Reduction red = parse_reduction(reduction, op);
  check_floating(grad_loss, op, "grad_loss");
  LABOPS_CHECK(grad_loss.scalar_type() == logits.scalar_type(),
               "labops.cross_entropy_backward: grad_loss must have the dtype of logits (", logits.scalar_type(),
               "), got ", grad_loss.scalar_type());
  LABOPS_CHECK(grad_loss.device() == logits.device(),
               "labops.cross_entropy_backward: grad_loss must be on the device of logits (", logits.device(),
               "), got ", grad_loss.device());
  if (red == Reduction::None) {
    LABOPS_CHECK(grad_loss.dim() == 1 && grad_loss.sym_size(0) == logits.sym_size(0),
                 "labops.cross_entropy_backward: grad_loss must have shape (N,) = (", logits.sym_size(0),
                 ",) for reduction='none', got ", grad_loss.sym_sizes());
  } else {
    LABOPS_CHECK(grad_loss.dim() == 0, "labops.cross_entropy_backward: grad_loss must be 0-d for reduction='",
                 reduction, "', got shape ", grad_loss.sym_sizes());
  }
  return red;
}

struct Meta {
  static at::Tensor softmax(const at::Tensor& x, int64_t dim) {
    softmax_dim(x, dim);
    return at::empty_symint(x.sym_sizes(), x.options());
  }

  static at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim) {
    softmax_backward_dim(grad_output, output, dim);
    return at::empty_symint(output.sym_sizes(), output.options());
  }

  static at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& target, c10::string_view reduction) {
    const Reduction red = cross_entropy_reduction(logits, target, reduction);
    if (red == Reduction::None) return at::empty_symint({logits.sym_size(0)}, logits.options());
    return at::empty({}, logits.options());
  }

  static at::Tensor cross_entropy_backward(const at::Tensor& grad_loss, const at::Tensor& logits,
                                           const at::Tensor& target, c10::string_view reduction) {
    cross_entropy_backward_reduction(grad_loss, logits, target, reduction);
    return at::empty_symint(logits.sym_sizes(), logits.options());
  }
};

template <typename Launcher>
struct Entry {
  static at::Tensor softmax(const at::Tensor& x, int64_t dim) {
    return softmax_forward(x, dim, forward_ladder().forced());  // the forced rung, read once per call
  }

  static at::Tensor softmax_forward(const at::Tensor& x, int64_t dim, int forced) {
    const int64_t d = softmax_dim(x, dim);
    c10::OptionalDeviceGuard guard(x.device());
    const auto g = geometry(x, d);
    if (g.inner > 1 && g.rows() < Launcher::kMinStridedRows && x.numel() > 0) {
      // Few, long strided rows would leave most of the device idle: make them
      // contiguous rows instead (two extra copies, at full bandwidth). A
      // forced rung then runs on the contiguous rows.
      return softmax_forward(x.movedim(d, -1), -1, forced).movedim(-1, d).contiguous();
    }
    at::Tensor xc = x.contiguous();
    at::Tensor y = labops::empty(x.sizes(), x.options());
    if (x.numel() == 0) return y;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "labops_softmax", [&] {
      Launcher::template softmax_forward<scalar_t>(xc.const_data_ptr<scalar_t>(),
                                                   y.mutable_data_ptr<scalar_t>(), g, forced);
    });
    return y;
  }

  static at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                     int64_t dim) {
    const int64_t d = softmax_backward_dim(grad_output, output, dim);
    c10::OptionalDeviceGuard guard(output.device());
    const auto g = geometry(output, d);
    if (g.inner > 1 && g.rows() < Launcher::kMinStridedRows && output.numel() > 0) {
      return softmax_backward(grad_output.movedim(d, -1), output.movedim(d, -1), -1).movedim(-1, d).contiguous();
    }
    at::Tensor gc = grad_output.contiguous(), yc = output.contiguous();
    at::Tensor dx = labops::empty(output.sizes(), output.options());
    if (output.numel() == 0) return dx;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, output.scalar_type(),
                                    "labops_softmax_backward", [&] {
      Launcher::template softmax_backward<scalar_t>(gc.const_data_ptr<scalar_t>(),
                                                    yc.const_data_ptr<scalar_t>(),
                                                    dx.mutable_data_ptr<scalar_t>(), g);
    });
    return dx;
  }

  static at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                  c10::string_view reduction) {
    const Reduction red = cross_entropy_reduction(logits, target, reduction);
    c10::OptionalDeviceGuard guard(logits.device());
    at::Tensor lc = logits.contiguous(), tc = target.contiguous();
    const int64_t n = lc.size(0), c = lc.size(1);
    const auto acc_dtype = at::toOpMathType(lc.scalar_type());
    // One loss per row, in the accumulation type; the kernel writes NaN for a
    // row whose target is out of range and reports it. The launcher may also
    // write the mean or sum into `loss` (CrossEntropyForward::reduced).
    at::Tensor loss_rows = labops::empty({n}, lc.options().dtype(acc_dtype));
    at::Tensor loss = red == Reduction::None ? at::Tensor() : labops::empty({}, lc.options());
    CrossEntropyForward done{true, false};
    if (n > 0) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, lc.scalar_type(),
                                      "labops_cross_entropy", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        done = Launcher::template cross_entropy_forward<scalar_t>(
            lc.const_data_ptr<scalar_t>(), tc.const_data_ptr<int64_t>(),
            loss_rows.mutable_data_ptr<acc_t>(), n, c, red,
            loss.defined() ? loss.mutable_data_ptr<scalar_t>() : nullptr);
      });
    }
    if (!done.valid) {  // the rare path: spend two reductions on a precise message
      LABOPS_CHECK(false, "labops.cross_entropy: target must hold class indices in [0, C) = [0, ",
                        c, "), got values from ", at::min(tc).item<int64_t>(), " to ",
                        at::max(tc).item<int64_t>());
    }
    if (red == Reduction::None) return loss_rows.to(lc.scalar_type());
    if (done.reduced) return loss;
    // One reduction kernel either way (a sum then a div would be two launches); mean of n = 0: NaN, as torch.
    return (red == Reduction::Mean ? at::mean(loss_rows) : at::sum(loss_rows)).to(lc.scalar_type());
  }

  static at::Tensor cross_entropy_backward(const at::Tensor& grad_loss, const at::Tensor& logits,
                                           const at::Tensor& target, c10::string_view reduction) {
    const Reduction red = cross_entropy_backward_reduction(grad_loss, logits, target, reduction);
    const int64_t n = logits.size(0), c = logits.size(1);
    c10::OptionalDeviceGuard guard(logits.device());
    at::Tensor lc = logits.contiguous(), tc = target.contiguous(), gc = grad_loss.contiguous();
    at::Tensor grad = labops::empty({n, c}, lc.options());
    if (grad.numel() == 0) return grad;
    const int64_t g_stride = red == Reduction::None ? 1 : 0;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, lc.scalar_type(),
                                    "labops_cross_entropy_backward", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      // Divide by N for the mean only; 'sum' and 'none' pass g through.
      const acc_t scale = red == Reduction::Mean ? acc_t(1) / acc_t(n) : acc_t(1);
      Launcher::template cross_entropy_backward<scalar_t>(
          gc.const_data_ptr<scalar_t>(), g_stride, scale, lc.const_data_ptr<scalar_t>(),
          tc.const_data_ptr<int64_t>(), grad.mutable_data_ptr<scalar_t>(), n, c);
    });
    return grad;
  }

};

// Every op of the layer with its kernel in `Kernels`: Entry<Launcher> on a device (cpu.cpp, cuda.cu),
// Meta for fake tensors (register.cpp). One list, so no op lacks a kernel on one dispatch key.
template <typename Kernels, typename Module>
void register_kernels(Module& m) {
  m.impl("softmax", &Kernels::softmax).impl("softmax_backward", &Kernels::softmax_backward)
      .impl("cross_entropy", &Kernels::cross_entropy).impl("cross_entropy_backward", &Kernels::cross_entropy_backward);
}

}  // namespace labops::softmax
