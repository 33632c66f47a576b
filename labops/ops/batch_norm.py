"""Batch normalization: Python face of the compiled batch_norm ops.

The layer contract maps onto the ops like this (Torch7's SpatialBatchNormalization):
    updateOutput       -> batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)
                          -> (y, save_mean, save_invstd); training updates the running statistics in place
    updateGradInput    -> batch_norm_backward_input(grad_output, x, weight, save_mean, save_invstd, training)
    accGradParameters  -> batch_norm_acc_grad_parameters(grad_output, x, save_mean, save_invstd,
                                                         grad_weight, grad_bias, scale)
                          (accumulates into grad_weight / grad_bias, in place)
    autograd's gradient -> batch_norm_backward_parameters(grad_output, x, save_mean, save_invstd)
                          (accGradParameters at scale 1 into new tensors: (grad_weight, grad_bias)),
                          then batch_norm_backward_input given those sums, so a training backward
                          reduces over the batch once

save_mean and save_invstd = 1/sqrt(var + eps) are per channel, in the statistics' dtype (float32 for
a float16/bfloat16 x, else x's): from the batch in training, from the running statistics in
evaluation.

The C++ a call reaches: csrc/batch_norm/entry.h (``Entry``: argument checks, dtype dispatch),
csrc/batch_norm/batch_norm.h (the math: one value, one channel), csrc/batch_norm/cpu.cpp and
csrc/batch_norm/cuda.cu (the launchers); the schemas and the gradient: csrc/batch_norm/register.cpp.
"""

import math

import torch

from .._checks import check_floating, check_tensor, dtype_name, shape_str

__all__ = ["batch_norm"]

# The op's OpOverload, looked up once (as conv2d_mm.py does: a tiny call's host time).
_batch_norm = torch.ops.labops.batch_norm.default


def _number(value, op, arg):
    """A real number as a float (TypeError for anything else, bool included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.SymInt, torch.SymFloat)):
        raise TypeError(f"labops.{op}: {arg} must be a number, got {value!r}")
    return float(value)


def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    """``F.batch_norm``: normalize each channel of x (N, C, ...) by its mean and variance, then scale and shift.

    In training the statistics are the batch's (over every dim but C; the variance biased), and the
    running statistics, when given, move towards them in place:
    ``running = (1 - momentum) * running + momentum * batch``, with the unbiased variance
    (times M / (M - 1), M = values per channel). In evaluation the running statistics are used.
    Arithmetic runs in float32 for float16/bfloat16 inputs, whose parameters may be float32.

    Args:
        x: floating tensor (N, C), (N, C, L), (N, C, H, W), ...
        running_mean, running_var: (C,) or None (both or neither; needed when ``training`` is False).
        weight, bias: (C,) or None (1 and 0).
        training: use the batch's statistics (and update the running ones).
        momentum: in [0, 1]. eps: > 0, added to the variance.

    Returns:
        y, x's shape and dtype (contiguous).

    Example:
        >>> import labops
        >>> x = torch.tensor([[1.0, 10.0], [3.0, 30.0]])  # (N=2, C=2)
        >>> mean, var = torch.zeros(2), torch.ones(2)
        >>> labops.batch_norm(x, mean, var, training=True, eps=1e-8)
        tensor([[-1., -1.],
                [ 1.,  1.]])
        >>> mean, var  # moved 10 % of the way to the batch's (2, 20) and unbiased (2, 200)
        (tensor([0.2000, 2.0000]), tensor([ 1.1000, 20.9000]))
    """
    op = "batch_norm"
    check_tensor(x, op, "x")
    for arg, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                   ("bias", bias)):
        if t is not None:
            check_tensor(t, op, arg)
    if not isinstance(training, bool):
        raise TypeError(f"labops.{op}: training must be a bool, got {training!r}")
    y, _, _ = _batch_norm(x, weight, bias, running_mean, running_var, training, _number(momentum, op, "momentum"),
                          _number(eps, op, "eps"))
    return y


# ---- the rules of csrc/batch_norm/entry.h, in its words, for the fakes (torch.compile) ----

def _check_input(x, op):
    """check_input: x floating, (N, C, ...) with at least 2 dims. Returns C."""
    check_floating(x, op, "x")
    if x.dim() < 2:
        raise ValueError(f"labops.{op}: x must be (N, C, ...) with at least 2 dims, got {x.dim()}-D of shape "
                         f"{shape_str(x.shape)}")
    return x.shape[1]


def _statistics_dtype(x):
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _check_per_channel(t, x, channels, op, arg):
    if t.dim() != 1 or t.shape[0] != channels:
        raise ValueError(f"labops.{op}: {arg} must have shape ({channels},) (the channels of x, x.size(1)), got "
                         f"{shape_str(t.shape)}")
    if t.device != x.device:
        raise ValueError(f"labops.{op}: {arg} must be on the device of x ({x.device}), got {t.device}")


class _ParameterDtype:
    """ParameterDtype: the parameters given share the first one's dtype, x's or (x half) float32."""

    def __init__(self, x, op):
        self.x, self.op, self.first, self.dtype = x, op, None, x.dtype

    def check(self, t, arg):
        if self.first is None:
            reduced = self.x.dtype in (torch.float16, torch.bfloat16)
            if not (t.dtype == self.x.dtype or (reduced and t.dtype == torch.float32)):
                raise ValueError(f"labops.{self.op}: {arg} must have the dtype of x ({dtype_name(self.x.dtype)}), "
                                 f"or Float when x is Half or BFloat16, got {dtype_name(t.dtype)}")
            self.first, self.dtype = arg, t.dtype
        elif t.dtype != self.dtype:
            raise ValueError(f"labops.{self.op}: {arg} must have the dtype of {self.first} "
                             f"({dtype_name(self.dtype)}), got {dtype_name(t.dtype)}")


def _check_statistic(t, x, channels, op, arg):
    _check_per_channel(t, x, channels, op, arg)
    want = _statistics_dtype(x)
    if t.dtype != want:
        raise ValueError(f"labops.{op}: {arg} must have the dtype {dtype_name(want)} (the statistics' dtype for x "
                         f"of dtype {dtype_name(x.dtype)}), got {dtype_name(t.dtype)}")


def _check_backward(grad_output, x, save_mean, save_invstd, op):
    channels = _check_input(x, op)
    check_floating(grad_output, op, "grad_output")
    if tuple(grad_output.shape) != tuple(x.shape):
        raise ValueError(f"labops.{op}: grad_output must have the shape of x {shape_str(x.shape)}, got "
                         f"{shape_str(grad_output.shape)}")
    if grad_output.dtype != x.dtype:
        raise ValueError(f"labops.{op}: grad_output must have the dtype of x ({dtype_name(x.dtype)}), got "
                         f"{dtype_name(grad_output.dtype)}")
    if grad_output.device != x.device:
        raise ValueError(f"labops.{op}: grad_output must be on the device of x ({x.device}), got {grad_output.device}")
    _check_statistic(save_mean, x, channels, op, "save_mean")
    _check_statistic(save_invstd, x, channels, op, "save_invstd")
    return channels


def _values_per_channel(x):
    return math.prod(x.shape[:1] + x.shape[2:])


def _statistics(x, channels):
    return (x.new_empty((channels,), dtype=_statistics_dtype(x)),
            x.new_empty((channels,), dtype=_statistics_dtype(x)))


@torch.library.register_fake("labops::batch_norm")
def _batch_norm_fake(x, weight, bias, running_mean, running_var, training, momentum, eps):
    op = "batch_norm"
    channels = _check_input(x, op)
    params = _ParameterDtype(x, op)
    for arg, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                   ("running_var", running_var)):
        if t is not None:
            _check_per_channel(t, x, channels, op, arg)
            params.check(t, arg)
    if (running_mean is None) != (running_var is None):
        given = "running_mean only" if running_mean is not None else "running_var only"
        raise ValueError(f"labops.{op}: running_mean and running_var must be given together, got {given}")
    if not training and running_mean is None:
        raise ValueError(f"labops.{op}: running_mean and running_var must be given when training is false "
                         "(evaluation normalizes with them)")
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"labops.{op}: momentum must be in [0, 1], got {momentum:f}")
    if not (eps > 0.0 and math.isfinite(eps)):
        raise ValueError(f"labops.{op}: eps must be a finite number > 0, got {eps:f}")
    if training and _values_per_channel(x) == 1:
        raise ValueError(f"labops.{op}: x must have more than 1 value per channel when training (the variance of "
                         f"one value is 0), got x of shape {shape_str(x.shape)}")
    return (x.new_empty(x.shape), *_statistics(x, channels))


@torch.library.register_fake("labops::batch_norm_backward_input")
def _batch_norm_backward_input_fake(grad_output, x, weight, save_mean, save_invstd, training, sum_grad_xhat=None,
                                    sum_grad=None):
    op = "batch_norm_backward_input"
    channels = _check_backward(grad_output, x, save_mean, save_invstd, op)
    if weight is not None:
        _check_per_channel(weight, x, channels, op, "weight")
        _ParameterDtype(x, op).check(weight, "weight")
    if (sum_grad_xhat is None) != (sum_grad is None):
        given = "sum_grad_xhat only" if sum_grad_xhat is not None else "sum_grad only"
        raise ValueError(f"labops.{op}: sum_grad_xhat and sum_grad must be given together, got {given}")
    if sum_grad_xhat is not None:
        _check_statistic(sum_grad_xhat, x, channels, op, "sum_grad_xhat")
        _check_statistic(sum_grad, x, channels, op, "sum_grad")
    return x.new_empty(x.shape)


@torch.library.register_fake("labops::batch_norm_acc_grad_parameters")
def _batch_norm_acc_grad_parameters_fake(grad_output, x, save_mean, save_invstd, grad_weight, grad_bias, scale=1.0):
    op = "batch_norm_acc_grad_parameters"
    channels = _check_backward(grad_output, x, save_mean, save_invstd, op)
    params = _ParameterDtype(x, op)
    _check_per_channel(grad_weight, x, channels, op, "grad_weight")
    params.check(grad_weight, "grad_weight")
    if grad_bias is not None:
        _check_per_channel(grad_bias, x, channels, op, "grad_bias")
        params.check(grad_bias, "grad_bias")
    return None


@torch.library.register_fake("labops::batch_norm_backward_parameters")
def _batch_norm_backward_parameters_fake(grad_output, x, save_mean, save_invstd):
    channels = _check_backward(grad_output, x, save_mean, save_invstd, "batch_norm_backward_parameters")
    return _statistics(x, channels)


# Autograd: csrc/batch_norm/register.cpp (one graph node; its backward is batch_norm_backward_parameters, then
# batch_norm_backward_input given those sums; the parameter gradients in the parameters' dtype). Double backward
# is not implemented.
