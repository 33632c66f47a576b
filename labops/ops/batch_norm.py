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

import torch

from .._checks import check_tensor
from ..ladder import ALL_DTYPES, Default

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


# Fake tensors (torch.compile): no Python fake. The Meta kernels of csrc/batch_norm/register.cpp run the
# C++ rules and shapes of csrc/batch_norm/entry.h, so a bad argument raises the same error compiled or not.

# Autograd: csrc/batch_norm/register.cpp (one graph node; its backward is batch_norm_backward_parameters, then
# batch_norm_backward_input given those sums; the parameter gradients in the parameters' dtype). Double backward
# is not implemented.


# Which rung the forward runs when none is forced (labops.ladder.DEFAULTS reads this): per device, the first
# line whose dtype and condition hold. tests/test_ladder.py holds the kernels to it. The inputs are
# labops.batch_norm's: (x, running_mean, running_var, weight, bias, training, momentum, eps).
def _many_channels(x, *rest):
    """block_per_channel's rule (kChannelsForBlockPerChannel in csrc/batch_norm/cuda.cu): C >= 64."""
    return x.shape[1] >= 64


LADDER_DEFAULTS = {
    "cpu": (
        Default("chunked_simd", ALL_DTYPES, "always (float16 and bfloat16 one value at a time, in float)"),
    ),
    "cuda": (
        Default("block_per_channel", ALL_DTYPES,
                "at least 64 channels, training or evaluation: a block per channel keeps enough loads in flight, "
                "and in training one launch with x reread from L2 beats three (measured on an H100: "
                "docs/benchmarks/ladder/cuda_batch_norm.json)", _many_channels),
        Default("split_channels", ALL_DTYPES, "fewer than 64 channels (several blocks share each channel)"),
    ),
}
