// Batch normalization: the tensor-level entry points, written once for both devices
// (batch_norm/cpu.cpp, batch_norm/cuda.cu); the math is batch_norm.h's.
//
// The ops, in the Torch7 layer contract:
//   updateOutput       batch_norm(x, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
//                        -> (y, save_mean, save_invstd); running_mean / running_var updated in place
//   updateGradInput    batch_norm_backward_input(grad_output, x, weight?, save_mean, save_invstd, training,
//                                                sum_grad_xhat?, sum_grad?) -> grad_input
//   accGradParameters  batch_norm_acc_grad_parameters(grad_output, x, save_mean, save_invstd, grad_weight,
//                                                     grad_bias?, scale): grad_weight += scale * dE/dweight,
//                                                     grad_bias += scale * dE/dbias, in place
//   for autograd       batch_norm_backward_parameters(grad_output, x, save_mean, save_invstd)
//                        -> (sum_grad_xhat, sum_grad): accGradParameters at scale 1 into new tensors
//
// What is saved: save_mean and save_invstd = 1/sqrt(var + eps) per channel, in the statistics'
// dtype (at::opmath_type of x: float32 for a float16/bfloat16 x, else x's), from the batch in
// training and from the running statistics in evaluation. Every backward formula reads them and x,
// never the running statistics, so a backward after the running statistics moved is still right.
//
// dtypes: weight, bias, running_mean and running_var (the "parameters") share one dtype, x's, or
// float32 when x is float16 or bfloat16 (as F.batch_norm allows on the CPU); the parameter
// gradients of backward_parameters come in the statistics' dtype.
//
// A Launcher provides, for scalar_t (x's type), param_t (the parameters' type) and
// acc_t = at::opmath_type<scalar_t>, on a Shape with count() >= 1 and channels >= 1, x contiguous,
// a null pointer for an absent parameter:
//   forward(s, ForwardArgs a, forced)    updateOutput, training or eval, on x with values (numel() >= 1):
//                                        the rung of forward_ladder() that `forced` names, else its own
//   running_statistics(s, running_mean, running_var, eps, save_mean, save_invstd)   eval of an empty x
//   grad_sums(s, grad, x, save_mean, save_invstd, sum_grad_xhat, sum_grad)
//   grad_input(s, grad, x, weight, save_mean, save_invstd, sum_grad_xhat, sum_grad, training, grad_input)
// (sum_grad_xhat and sum_grad are null for grad_input in eval).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "../common/check.h"
#include "../common/empty.h"
#include "../common/ladder.h"
#include "batch_norm.h"

namespace labops::batch_norm {

// The forward's rungs (Note [the ladder], common/ladder.h), rung 1 the textbook body. Which rung
// runs by default: LADDER_DEFAULTS in labops/ops/batch_norm.py, docs/layers/batch_norm.md "The ladder".
// Every rung takes training and evaluation; the backward ops have no rungs.
inline ladder::Ladder& forward_ladder() {
  static ladder::Ladder rungs(
      "batch_norm", "batch_norm",
      {{"textbook", "channel_statistics: each channel's values one at a time, summed in double, then y value by "
                    "value; channels shared among the threads"},
       {"chunked_simd", "per channel, chunks of 256 values summed on at::vec lanes and added in double, then y on "
                        "at::vec lanes (float16 and bfloat16 one value at a time, in float)"}},
      {{"textbook", "one thread per channel runs channel_statistics (its values one at a time, in double), then "
                    "one thread per value of y"},
       {"split_channels", "several blocks share a channel (Note [channel partial sums]), a kernel adds their sums, "
                          "then y over 16-byte packs: three launches in training"},
       {"block_per_channel", "one launch, one block per channel: its statistics, then y from its values read "
                             "again, backwards, while in L2 (Note [one block per channel])"}});
  return rungs;
}

using OptTensor = std::optional<at::Tensor>;

// x viewed as (N, C, S).
struct Shape {
  int64_t batch, channels, plane;
  int64_t count() const { return batch * plane; }  // values per channel
  int64_t numel() const { return batch * channels * plane; }
};

// What updateOutput reads and writes, every tensor contiguous; null for a parameter not given.
// The statistics are saved in acc_t = at::opmath_type<scalar_t>.
template <typename scalar_t, typename param_t>
struct ForwardArgs {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* x;
  const param_t* weight;
  const param_t* bias;
  param_t* running_mean;  // updated in training (null: none given), read in evaluation
  param_t* running_var;
  bool training;
  double momentum, eps;
  acc_t* save_mean;
  acc_t* save_invstd;
  scalar_t* y;
};

inline bool given(const OptTensor& t) { return t.has_value() && t->defined(); }

// ---- the rules and the outputs' shapes, stated once ----
// Every call checks its arguments here first; the Meta kernels below, which fake tensors run under
// torch.compile (registered in register.cpp), are these functions alone. Sizes are SymInts: under
// dynamic shapes they are symbols, and a comparison becomes a guard on them.

// a == b for two sizes. An eager call's sizes are plain numbers, compared inline, at the host cost
// of an int64_t comparison (SymInt's == is a call); symbols (dynamic shapes) go through SymInt's ==,
// which guards on them.
C10_NOINLINE inline bool same_symbolic_size(const c10::SymInt& a, const c10::SymInt& b) { return a == b; }
C10_ALWAYS_INLINE bool same_size(const c10::SymInt& a, const c10::SymInt& b) {
  if (C10_LIKELY(!a.is_heap_allocated() && !b.is_heap_allocated())) {
    return a.as_int_unchecked() == b.as_int_unchecked();
  }
  return same_symbolic_size(a, b);
}

// x: floating, (N, C, ...) with at least 2 dims. Returns C.
inline c10::SymInt check_input(const at::Tensor& x, const char* op) {
  check_floating(x, op, "x");
  LABOPS_CHECK(x.dim() >= 2, "labops.", op, ": x must be (N, C, ...) with at least 2 dims, got ", x.dim(),
               "-D of shape ", x.sym_sizes());
  return x.sym_sizes()[1];
}

// The values per channel of a checked x: N times the sizes of the dims after C.
inline c10::SymInt values_per_channel(const at::Tensor& x) {
  const c10::SymIntArrayRef sizes = x.sym_sizes();
  c10::SymInt count = sizes[0];
  for (size_t d = 2; d < sizes.size(); ++d) count *= sizes[d];
  return count;
}

// The statistics' dtype for x: float32 for float16/bfloat16, else x's own.
inline c10::ScalarType statistics_dtype(const at::Tensor& x) { return at::toOpMathType(x.scalar_type()); }

// A per-channel tensor `t` (named `arg`): 1-D of C values, on x's device.
inline void check_per_channel(const at::Tensor& t, const at::Tensor& x, const c10::SymInt& channels,
                              const char* op, const char* arg) {
  LABOPS_CHECK(t.dim() == 1 && same_size(t.sym_sizes()[0], channels), "labops.", op, ": ", arg, " must have shape (",
               channels, ",) (the channels of x, x.size(1)), got ", t.sym_sizes());
  LABOPS_CHECK(t.device() == x.device(), "labops.", op, ": ", arg, " must be on the device of x (", x.device(),
               "), got ", t.device());
}

// The parameters (weight, bias, running_mean, running_var: those given) share one dtype: the first
// one's, which must be x's, or float32 for a float16/bfloat16 x. Returns it (x's dtype if none given).
class ParameterDtype {
 public:
  ParameterDtype(const at::Tensor& x, const char* op) : x_(x), op_(op), dtype_(x.scalar_type()) {}
  void check(const at::Tensor& t, const char* arg) {
    if (first_ == nullptr) {
      const bool reduced = x_.scalar_type() == at::kHalf || x_.scalar_type() == at::kBFloat16;
      LABOPS_CHECK(t.scalar_type() == x_.scalar_type() || (reduced && t.scalar_type() == at::kFloat), "labops.",
                   op_, ": ", arg, " must have the dtype of x (", x_.scalar_type(),
                   "), or Float when x is Half or BFloat16, got ", t.scalar_type());
      first_ = arg;
      dtype_ = t.scalar_type();
    } else {
      LABOPS_CHECK(t.scalar_type() == dtype_, "labops.", op_, ": ", arg, " must have the dtype of ", first_, " (",
                   dtype_, "), got ", t.scalar_type());
    }
  }
  c10::ScalarType dtype() const { return dtype_; }

 private:
  const at::Tensor& x_;
  const char* op_;
  const char* first_ = nullptr;
  c10::ScalarType dtype_;
};

// save_mean / save_invstd (or the sums a backward op takes): (C,), the statistics' dtype, x's device.
inline void check_statistic(const at::Tensor& t, const at::Tensor& x, const c10::SymInt& channels, const char* op,
                            const char* arg) {
  check_per_channel(t, x, channels, op, arg);
  LABOPS_CHECK(t.scalar_type() == statistics_dtype(x), "labops.", op, ": ", arg, " must have the dtype ",
               statistics_dtype(x), " (the statistics' dtype for x of dtype ", x.scalar_type(), "), got ",
               t.scalar_type());
}

// What every backward op checks: x, grad_output like x, save_mean and save_invstd. Returns C.
inline c10::SymInt check_backward(const at::Tensor& grad_output, const at::Tensor& x, const at::Tensor& save_mean,
                                  const at::Tensor& save_invstd, const char* op) {
  c10::SymInt channels = check_input(x, op);
  check_floating(grad_output, op, "grad_output");
  check_same_meta(grad_output, x, op, "grad_output", "x");
  check_statistic(save_mean, x, channels, op, "save_mean");
  check_statistic(save_invstd, x, channels, op, "save_invstd");
  return channels;
}

// ---- each op's rules ----

// batch_norm. Returns the parameters' dtype.
inline c10::ScalarType check_batch_norm(const at::Tensor& x, const OptTensor& weight, const OptTensor& bias,
                                        const OptTensor& running_mean, const OptTensor& running_var, bool training,
                                        double momentum, double eps) {
  const char* op = "batch_norm";
  const c10::SymInt channels = check_input(x, op);
  ParameterDtype params(x, op);
  const OptTensor* per_channel[] = {&weight, &bias, &running_mean, &running_var};
  const char* names[] = {"weight", "bias", "running_mean", "running_var"};
  for (int i = 0; i < 4; ++i) {
    if (!given(*per_channel[i])) continue;
    check_per_channel(**per_channel[i], x, channels, op, names[i]);
    params.check(**per_channel[i], names[i]);
  }
  LABOPS_CHECK(given(running_mean) == given(running_var), "labops.", op,
               ": running_mean and running_var must be given together, got ",
               given(running_mean) ? "running_mean only" : "running_var only");
  LABOPS_CHECK(training || given(running_mean), "labops.", op,
               ": running_mean and running_var must be given when training is false (evaluation normalizes "
               "with them)");
  LABOPS_CHECK(momentum >= 0.0 && momentum <= 1.0, "labops.", op, ": momentum must be in [0, 1], got ", momentum);
  LABOPS_CHECK(eps > 0.0 && std::isfinite(eps), "labops.", op, ": eps must be a finite number > 0, got ", eps);
  LABOPS_CHECK(!training || !same_size(values_per_channel(x), 1), "labops.", op,
               ": x must have more than 1 value per channel when training (the variance of one value is 0), "
               "got x of shape ", x.sym_sizes());
  return params.dtype();
}

// batch_norm_backward_input. Returns the parameters' dtype (the weight's, x's without one).
inline c10::ScalarType check_batch_norm_backward_input(const at::Tensor& grad_output, const at::Tensor& x,
                                                       const OptTensor& weight, const at::Tensor& save_mean,
                                                       const at::Tensor& save_invstd, const OptTensor& sum_grad_xhat,
                                                       const OptTensor& sum_grad) {
  const char* op = "batch_norm_backward_input";
  const c10::SymInt channels = check_backward(grad_output, x, save_mean, save_invstd, op);
  ParameterDtype params(x, op);
  if (given(weight)) {
    check_per_channel(*weight, x, channels, op, "weight");
    params.check(*weight, "weight");
  }
  LABOPS_CHECK(given(sum_grad_xhat) == given(sum_grad), "labops.", op,
               ": sum_grad_xhat and sum_grad must be given together, got ",
               given(sum_grad_xhat) ? "sum_grad_xhat only" : "sum_grad only");
  if (given(sum_grad_xhat)) {
    check_statistic(*sum_grad_xhat, x, channels, op, "sum_grad_xhat");
    check_statistic(*sum_grad, x, channels, op, "sum_grad");
  }
  return params.dtype();
}

// batch_norm_acc_grad_parameters: grad_weight and grad_bias are per channel, of the parameters' dtype.
inline void check_batch_norm_acc_grad_parameters(const at::Tensor& grad_output, const at::Tensor& x,
                                                 const at::Tensor& save_mean, const at::Tensor& save_invstd,
                                                 const at::Tensor& grad_weight, const OptTensor& grad_bias) {
  const char* op = "batch_norm_acc_grad_parameters";
  const c10::SymInt channels = check_backward(grad_output, x, save_mean, save_invstd, op);
  ParameterDtype params(x, op);
  check_per_channel(grad_weight, x, channels, op, "grad_weight");
  params.check(grad_weight, "grad_weight");
  if (given(grad_bias)) {
    check_per_channel(*grad_bias, x, channels, op, "grad_bias");
    params.check(*grad_bias, "grad_bias");
  }
}

// batch_norm_backward_parameters: the backward ops' common rules alone. Returns C.
inline c10::SymInt check_batch_norm_backward_parameters(const at::Tensor& grad_output, const at::Tensor& x,
                                                        const at::Tensor& save_mean, const at::Tensor& save_invstd) {
  return check_backward(grad_output, x, save_mean, save_invstd, "batch_norm_backward_parameters");
}

// ---- the Meta kernels: the rules, then empty outputs of the right shapes and dtypes ----
// They never write an argument: batch_norm's running statistics and accGradParameters's gradients
// are only checked (their shape and dtype are the caller's, which an in-place update keeps).

// A per-channel statistic, (C,) in the statistics' dtype (save_mean, save_invstd, the parameter sums).
inline at::Tensor empty_statistic(const at::Tensor& x, const c10::SymInt& channels) {
  return at::empty_symint({channels}, x.options().dtype(statistics_dtype(x)));
}

struct Meta {
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(const at::Tensor& x, const OptTensor& weight,
                                                                   const OptTensor& bias,
                                                                   const OptTensor& running_mean,
                                                                   const OptTensor& running_var, bool training,
                                                                   double momentum, double eps) {
    check_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
    const c10::SymInt channels = x.sym_size(1);
    return {at::empty_symint(x.sym_sizes(), x.options()), empty_statistic(x, channels), empty_statistic(x, channels)};
  }

  static at::Tensor batch_norm_backward_input(const at::Tensor& grad_output, const at::Tensor& x,
                                              const OptTensor& weight, const at::Tensor& save_mean,
                                              const at::Tensor& save_invstd, bool /*training*/,
                                              const OptTensor& sum_grad_xhat, const OptTensor& sum_grad) {
    check_batch_norm_backward_input(grad_output, x, weight, save_mean, save_invstd, sum_grad_xhat, sum_grad);
    return at::empty_symint(x.sym_sizes(), x.options());
  }

  static void batch_norm_acc_grad_parameters(const at::Tensor& grad_output, const at::Tensor& x,
                                             const at::Tensor& save_mean, const at::Tensor& save_invstd,
                                             const at::Tensor& grad_weight, const OptTensor& grad_bias,
                                             double /*scale*/) {
    check_batch_norm_acc_grad_parameters(grad_output, x, save_mean, save_invstd, grad_weight, grad_bias);
  }

  static std::tuple<at::Tensor, at::Tensor> batch_norm_backward_parameters(const at::Tensor& grad_output,
                                                                          const at::Tensor& x,
                                                                          const at::Tensor& save_mean,
                                                                          const at::Tensor& save_invstd) {
    const c10::SymInt channels = check_batch_norm_backward_parameters(grad_output, x, save_mean, save_invstd);
    return {empty_statistic(x, channels), empty_statistic(x, channels)};
  }
};

// ---- the eager kernels' geometry, from the checked, concrete sizes ----

inline Shape shape_of(const at::Tensor& x) {
  int64_t plane = 1;
  for (int64_t d = 2; d < x.dim(); ++d) plane *= x.size(d);
  return {x.size(0), x.size(1), plane};
}

template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}
template <typename T>
T* mutable_data_or_null(const at::Tensor& t) {
  return t.defined() ? t.mutable_data_ptr<T>() : nullptr;
}

// t made contiguous, or an undefined tensor when t is not given.
inline at::Tensor contiguous_or_undefined(const OptTensor& t) { return given(t) ? t->contiguous() : at::Tensor(); }

template <typename Launcher>
struct Entry {
  // ---- updateOutput ----
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(const at::Tensor& x, const OptTensor& weight,
                                                                   const OptTensor& bias,
                                                                   const OptTensor& running_mean,
                                                                   const OptTensor& running_var, bool training,
                                                                   double momentum, double eps) {
    const c10::ScalarType param_dtype =
        check_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
    const Shape s = shape_of(x);
    c10::OptionalDeviceGuard guard(x.device());
    const at::Tensor xc = x.contiguous();
    at::Tensor y = labops::empty(x.sizes(), x.options());  // contiguous
    at::Tensor save_mean = labops::empty({s.channels}, x.options().dtype(statistics_dtype(x)));
    at::Tensor save_invstd = labops::empty({s.channels}, x.options().dtype(statistics_dtype(x)));
    if (s.channels == 0) return {y, save_mean, save_invstd};
    if (training && s.count() == 0) {  // the statistics of nothing; the running ones stay as they are
      save_mean.fill_(std::numeric_limits<double>::quiet_NaN());
      save_invstd.fill_(std::numeric_limits<double>::quiet_NaN());
      return {y, save_mean, save_invstd};
    }
    // The launchers write the running statistics through a pointer: a strided one goes through a copy.
    const at::Tensor w = contiguous_or_undefined(weight), b = contiguous_or_undefined(bias);
    at::Tensor rm = contiguous_or_undefined(running_mean), rv = contiguous_or_undefined(running_var);
    // The parameters are x's dtype or the statistics' (float for a half x): opmath_type<scalar_t> is both
    // for float and double, so each x dtype instantiates two launchers at most.
    const bool stats_dtype_params = param_dtype == statistics_dtype(x);
    const int forced = forward_ladder().forced();  // read once: the call runs one rung (Note [the ladder])
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "labops_batch_norm", [&] {
      if (stats_dtype_params) {
        forward<scalar_t, at::opmath_type<scalar_t>>(s, xc, w, b, rm, rv, training, momentum, eps, save_mean,
                                                     save_invstd, y, forced);
      } else {
        forward<scalar_t, scalar_t>(s, xc, w, b, rm, rv, training, momentum, eps, save_mean, save_invstd, y,
                                    forced);
      }
    });
    if (training && rm.defined() && !rm.is_same(*running_mean)) running_mean->copy_(rm);
    if (training && rv.defined() && !rv.is_same(*running_var)) running_var->copy_(rv);
    return {y, save_mean, save_invstd};
  }

  // ---- updateGradInput ----
  // sum_grad_xhat and sum_grad: backward_parameters's results for the same grad_output, when the
  // caller has them already (autograd does, when it also wants the parameter gradients): training
  // then skips the reduction. Not read in evaluation.
  static at::Tensor batch_norm_backward_input(const at::Tensor& grad_output, const at::Tensor& x,
                                              const OptTensor& weight, const at::Tensor& save_mean,
                                              const at::Tensor& save_invstd, bool training,
                                              const OptTensor& sum_grad_xhat, const OptTensor& sum_grad) {
    const c10::ScalarType param_dtype =
        check_batch_norm_backward_input(grad_output, x, weight, save_mean, save_invstd, sum_grad_xhat, sum_grad);
    const Shape s = shape_of(x);

    c10::OptionalDeviceGuard guard(x.device());
    at::Tensor grad_input = labops::empty(x.sizes(), x.options());
    if (s.numel() == 0) return grad_input;
    const at::Tensor xc = x.contiguous(), g = grad_output.contiguous(), w = contiguous_or_undefined(weight);
    const at::Tensor mean = save_mean.contiguous(), invstd = save_invstd.contiguous();
    at::Tensor sums_xhat, sums;
    if (training) {
      if (given(sum_grad_xhat)) {
        sums_xhat = sum_grad_xhat->contiguous();
        sums = sum_grad->contiguous();
      } else {
        std::tie(sums_xhat, sums) = parameter_gradients(s, g, xc, mean, invstd);
      }
    }
    const bool stats_dtype_params = param_dtype == statistics_dtype(x);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "labops_batch_norm_backward_input", [&] {
      if (stats_dtype_params) {
        backward_input<scalar_t, at::opmath_type<scalar_t>>(s, g, xc, w, mean, invstd, sums_xhat, sums, training,
                                                            grad_input);
      } else {
        backward_input<scalar_t, scalar_t>(s, g, xc, w, mean, invstd, sums_xhat, sums, training, grad_input);
      }
    });
    return grad_input;
  }

  // ---- accGradParameters ----
  static void batch_norm_acc_grad_parameters(const at::Tensor& grad_output, const at::Tensor& x,
                                             const at::Tensor& save_mean, const at::Tensor& save_invstd,
                                             const at::Tensor& grad_weight, const OptTensor& grad_bias,
                                             double scale) {
    check_batch_norm_acc_grad_parameters(grad_output, x, save_mean, save_invstd, grad_weight, grad_bias);
    const Shape s = shape_of(x);
    c10::OptionalDeviceGuard guard(x.device());
    if (s.count() == 0 || s.channels == 0) return;  // sums over nothing add nothing
    auto [sums_xhat, sums] = parameter_gradients(s, grad_output.contiguous(), x.contiguous(),
                                                 save_mean.contiguous(), save_invstd.contiguous());
    grad_weight.add_(sums_xhat, scale);
    if (given(grad_bias)) grad_bias->add_(sums, scale);
  }

  // ---- the parameter gradients, for autograd ----
  static std::tuple<at::Tensor, at::Tensor> batch_norm_backward_parameters(const at::Tensor& grad_output,
                                                                          const at::Tensor& x,
                                                                          const at::Tensor& save_mean,
                                                                          const at::Tensor& save_invstd) {
    check_batch_norm_backward_parameters(grad_output, x, save_mean, save_invstd);
    const Shape s = shape_of(x);
    c10::OptionalDeviceGuard guard(x.device());
    return parameter_gradients(s, grad_output.contiguous(), x.contiguous(), save_mean.contiguous(),
                               save_invstd.contiguous());
  }


 private:
  // updateOutput for x of scalar_t and parameters of param_t, every tensor contiguous: the rung
  // `forced` names (0: the launcher's choice).
  template <typename scalar_t, typename param_t>
  static void forward(const Shape& s, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      const at::Tensor& running_mean, const at::Tensor& running_var, bool training, double momentum,
                      double eps, const at::Tensor& save_mean, const at::Tensor& save_invstd, const at::Tensor& y,
                      int forced) {
    using acc_t = at::opmath_type<scalar_t>;
    const ForwardArgs<scalar_t, param_t> a{x.const_data_ptr<scalar_t>(),
                                           data_or_null<param_t>(weight),
                                           data_or_null<param_t>(bias),
                                           mutable_data_or_null<param_t>(running_mean),
                                           mutable_data_or_null<param_t>(running_var),
                                           training,
                                           momentum,
                                           eps,
                                           save_mean.mutable_data_ptr<acc_t>(),
                                           save_invstd.mutable_data_ptr<acc_t>(),
                                           y.mutable_data_ptr<scalar_t>()};
    if (s.numel() == 0) {  // evaluation of an empty batch (training returned earlier): no rung runs
      Launcher::running_statistics(s, a.running_mean, a.running_var, eps, a.save_mean, a.save_invstd);
      return;
    }
    Launcher::forward(s, a, forced);
  }

  // updateGradInput, every tensor contiguous; sums undefined in evaluation.
  template <typename scalar_t, typename param_t>
  static void backward_input(const Shape& s, const at::Tensor& g, const at::Tensor& x, const at::Tensor& weight,
                             const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& sum_grad_xhat,
                             const at::Tensor& sum_grad, bool training, const at::Tensor& grad_input) {
    using acc_t = at::opmath_type<scalar_t>;
    Launcher::grad_input(s, g.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), data_or_null<param_t>(weight),
                         mean.const_data_ptr<acc_t>(), invstd.const_data_ptr<acc_t>(),
                         data_or_null<acc_t>(sum_grad_xhat), data_or_null<acc_t>(sum_grad), training,
                         grad_input.mutable_data_ptr<scalar_t>());
  }

  // (sum g xhat, sum g) per channel, in the statistics' dtype, for contiguous g and x.
  static std::tuple<at::Tensor, at::Tensor> parameter_gradients(const Shape& s, const at::Tensor& g,
                                                                const at::Tensor& x, const at::Tensor& mean,
                                                                const at::Tensor& invstd) {
    const auto options = x.options().dtype(statistics_dtype(x));
    if (s.count() == 0 || s.channels == 0) {
      return {at::zeros({s.channels}, options), at::zeros({s.channels}, options)};
    }
    at::Tensor sum_grad_xhat = labops::empty({s.channels}, options), sum_grad = labops::empty({s.channels}, options);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "labops_batch_norm_grad_sums", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      Launcher::grad_sums(s, g.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), mean.const_data_ptr<acc_t>(),
                          invstd.const_data_ptr<acc_t>(), sum_grad_xhat.mutable_data_ptr<acc_t>(),
                          sum_grad.mutable_data_ptr<acc_t>());
    });
    return {sum_grad_xhat, sum_grad};
  }
};

// Every op of the layer with its kernel in `Kernels`: Entry<Launcher> on a device (cpu.cpp, cuda.cu),
// Meta for fake tensors (register.cpp). One list, so no op lacks a kernel on one dispatch key.
template <typename Kernels, typename Module>
void register_kernels(Module& m) {
  m.impl("batch_norm", &Kernels::batch_norm);
  m.impl("batch_norm_backward_input", &Kernels::batch_norm_backward_input);
  m.impl("batch_norm_acc_grad_parameters", &Kernels::batch_norm_acc_grad_parameters);
  m.impl("batch_norm_backward_parameters", &Kernels::batch_norm_backward_parameters);
}

}  // namespace labops::batch_norm
