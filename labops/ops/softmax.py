"""Softmax and fused cross-entropy: Python face of the compiled softmax ops.

The C++ a call reaches: csrc/softmax/entry.h (``SoftmaxOps``: argument
checks, dtype dispatch, the final reduction of per-row losses),
csrc/softmax/softmax.h (the row bodies), csrc/softmax/cpu.cpp and
csrc/softmax/cuda.cu (the launchers); the gradient: csrc/softmax/register.cpp.
"""

import torch

from .._checks import check_choice, check_enum, check_floating, check_same_meta, check_tensor, dtype_name, shape_str

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


# ---- the rules of csrc/softmax/entry.h, in its words, for the fakes (torch.compile) ----
# One rule a fake cannot state: cross_entropy's targets in [0, C) are values, which a fake tensor
# does not have; only the eager op checks them.

def _check_dim(x, dim, op):
    rank = max(x.dim(), 1)  # a 0-d tensor is a row of one element, as in torch.softmax
    if not -rank <= dim < rank:
        raise ValueError(f"labops.{op}: dim must be in [{-rank}, {rank - 1}] for a {x.dim()}-D tensor, got {dim}")


def _check_logits_target(logits, target, op):
    check_floating(logits, op, "logits")
    if logits.dim() != 2:
        raise ValueError(f"labops.{op}: logits must be 2-D (N, C), got a {logits.dim()}-D tensor of shape "
                         f"{shape_str(logits.shape)}")
    if target.dtype != torch.int64:
        raise ValueError(f"labops.{op}: target must be an int64 (torch.long) tensor of class indices, "
                         f"got {dtype_name(target.dtype)}")
    if target.dim() != 1 or target.shape[0] != logits.shape[0]:
        raise ValueError(f"labops.{op}: target must have shape (N,) = ({logits.shape[0]},), got "
                         f"{shape_str(target.shape)}")
    if target.device != logits.device:
        raise ValueError(f"labops.{op}: target must be on the device of logits ({logits.device}), "
                         f"got {target.device}")


@torch.library.register_fake("labops::softmax")
def _softmax_fake(x, dim):
    check_floating(x, "softmax", "x")
    _check_dim(x, dim, "softmax")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("labops::softmax_backward")
def _softmax_backward_fake(grad_output, output, dim):
    check_floating(output, "softmax_backward", "output")
    check_same_meta(grad_output, output, "softmax_backward", "grad_output", "output")
    _check_dim(output, dim, "softmax_backward")
    return torch.empty_like(output, memory_format=torch.contiguous_format)


@torch.library.register_fake("labops::cross_entropy")
def _cross_entropy_fake(logits, target, reduction="mean"):
    _check_logits_target(logits, target, "cross_entropy")
    check_enum(reduction, CROSS_ENTROPY_REDUCTIONS, "cross_entropy", "reduction")
    shape = (logits.shape[0],) if reduction == "none" else ()
    return logits.new_empty(shape)


@torch.library.register_fake("labops::cross_entropy_backward")
def _cross_entropy_backward_fake(grad_loss, logits, target, reduction):
    op = "cross_entropy_backward"
    _check_logits_target(logits, target, op)
    check_enum(reduction, CROSS_ENTROPY_REDUCTIONS, op, "reduction")
    check_floating(grad_loss, op, "grad_loss")
    if grad_loss.dtype != logits.dtype:
        raise ValueError(f"labops.{op}: grad_loss must have the dtype of logits ({dtype_name(logits.dtype)}), "
                         f"got {dtype_name(grad_loss.dtype)}")
    if grad_loss.device != logits.device:
        raise ValueError(f"labops.{op}: grad_loss must be on the device of logits ({logits.device}), "
                         f"got {grad_loss.device}")
    if reduction == "none":
        if grad_loss.dim() != 1 or grad_loss.shape[0] != logits.shape[0]:
            raise ValueError(f"labops.{op}: grad_loss must have shape (N,) = ({logits.shape[0]},) for "
                             f"reduction='none', got {shape_str(grad_loss.shape)}")
    elif grad_loss.dim() != 0:
        raise ValueError(f"labops.{op}: grad_loss must be 0-d for reduction='{reduction}', got shape "
                         f"{shape_str(grad_loss.shape)}")
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


# Autograd: a graph node built in csrc/softmax/register.cpp (softmax_backward from the saved output,
# cross_entropy_backward from the logits).
