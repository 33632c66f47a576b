"""Softmax and fused cross-entropy: Python face of the compiled softmax ops.

The C++ a call reaches: csrc/softmax/entry.h (``SoftmaxOps``: argument
checks, dtype dispatch, the final reduction of per-row losses),
csrc/softmax/softmax.h (the row bodies), csrc/softmax/cpu.cpp and
csrc/softmax/cuda.cu (the launchers); the gradient: csrc/softmax/register.cpp.
"""

import torch

from .._checks import check_choice, check_tensor

__all__ = ["CROSS_ENTROPY_REDUCTIONS", "cross_entropy", "softmax"]

CROSS_ENTROPY_REDUCTIONS = ("mean", "sum", "none")

# The ops' OpOverloads, looked up once: `torch.ops.labops.softmax(...)` would walk three attributes
# and resolve the overload on every call, a measurable share of a tiny call's host time
# (tools/host_time.py).
_softmax = torch.ops.labops.softmax.default
_cross_entropy = torch.ops.labops.cross_entropy.default


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim`` (numerically stable).

    Any rank, any dim (negative counts from the end). Backward uses the saved
    output ``y``: ``grad_x = y * (g - sum(g * y, dim))``.

    Args:
        x: floating tensor of any rank.
        dim: the dim that sums to 1.

    Returns:
        a tensor of x's shape and dtype.

    Example:
        >>> import labops
        >>> labops.softmax(torch.tensor([[1000.0, 0.0], [0.0, 0.0]]), dim=1)
        tensor([[1.0000, 0.0000],
                [0.5000, 0.5000]])
    """
    check_tensor(x, "softmax", "x")
    if type(dim) is not int and (isinstance(dim, bool) or not isinstance(dim, int)):
        raise TypeError(f"labops.softmax: dim must be an int, got {type(dim).__name__}")
    return _softmax(x, dim)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """``F.cross_entropy(logits, target, reduction=...)`` fused in one pass per row.

    logits: (N, C) floating point; target: (N,) int64 class indices in [0, C);
    reduction: ``"mean"`` (over N), ``"sum"`` or ``"none"`` (one loss per row).
    Per row: ``loss = max + log(sum(exp(x - max))) - x[target]``. The backward
    recomputes softmax from the logits: ``(softmax - onehot) * g`` (``/ N`` for
    the mean). A target outside [0, C) raises ValueError (on CUDA this reads
    back one flag, so the call synchronizes and cannot be captured in a CUDA
    graph; the CUDA context stays usable). The backward op does not check
    again (autograd only runs it after a forward that passed): called
    directly, it returns NaN for the rows of out-of-range targets.

    Example:
        >>> import labops
        >>> logits = torch.zeros(2, 4, requires_grad=True)
        >>> loss = labops.cross_entropy(logits, torch.tensor([0, 3]))
        >>> loss.backward()
        >>> round(loss.item(), 4), logits.grad[0]  # log 4, and (softmax - onehot) / N
        (1.3863, tensor([-0.3750,  0.1250,  0.1250,  0.1250]))
    """
    check_tensor(logits, "cross_entropy", "logits")
    check_tensor(target, "cross_entropy", "target")
    check_choice(reduction, CROSS_ENTROPY_REDUCTIONS, "cross_entropy", "reduction")
    return _cross_entropy(logits, target, reduction)


# Fake tensors (torch.compile): no Python fake. The Meta kernels of csrc/softmax/register.cpp run the
# C++ rules and shapes of csrc/softmax/entry.h, so a bad argument raises the same error compiled or not.

# Autograd: a graph node built in csrc/softmax/register.cpp (softmax_backward from the saved output,
# cross_entropy_backward from the logits).
