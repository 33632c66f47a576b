"""Softmax and fused cross-entropy: Python face of the compiled ops in csrc/ops/softmax.h."""

import torch

from .._checks import check_choice, check_floating

__all__ = ["CROSS_ENTROPY_REDUCTIONS", "cross_entropy", "softmax"]

CROSS_ENTROPY_REDUCTIONS = ("mean", "sum", "none")


def _check_dim(x, dim, op):
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"labops.{op}: dim must be an int, got {type(dim).__name__}")
    rank = max(x.dim(), 1)
    if not -rank <= dim < rank:
        raise ValueError(f"labops.{op}: dim must be in [{-rank}, {rank - 1}] for a {x.dim()}-D tensor, got {dim}")


def _check_logits_target(logits, target, op):
    check_floating(logits, op, "logits")
    if logits.dim() != 2:
        raise ValueError(f"labops.{op}: logits must be 2-D (N, C), got a {logits.dim()}-D tensor of shape "
                         f"{list(logits.shape)}")
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"labops.{op}: target must be a torch.Tensor, got {type(target).__name__}")
    if target.dtype != torch.int64:
        raise ValueError(f"labops.{op}: target must be an int64 (torch.long) tensor of class indices, "
                         f"got {target.dtype}")
    if target.dim() != 1 or target.shape[0] != logits.shape[0]:
        raise ValueError(f"labops.{op}: target must have shape (N,) = ({logits.shape[0]},), got "
                         f"{list(target.shape)}")
    if target.device != logits.device:
        raise ValueError(f"labops.{op}: target must be on the device of logits ({logits.device}), "
                         f"got {target.device}")


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
    check_floating(x, "softmax", "x")
    _check_dim(x, dim, "softmax")
    return torch.ops.labops.softmax(x, dim)


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
    _check_logits_target(logits, target, "cross_entropy")
    check_choice(reduction, CROSS_ENTROPY_REDUCTIONS, "cross_entropy", "reduction")
    return torch.ops.labops.cross_entropy(logits, target, reduction)


# ---- shapes for torch.compile ----

@torch.library.register_fake("labops::softmax")
def _softmax_fake(x, dim):
    check_floating(x, "softmax", "x")
    _check_dim(x, dim, "softmax")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("labops::softmax_backward")
def _softmax_backward_fake(grad_output, output, dim):
    check_floating(output, "softmax_backward", "output")
    _check_dim(output, dim, "softmax_backward")
    return torch.empty_like(output, memory_format=torch.contiguous_format)


@torch.library.register_fake("labops::cross_entropy")
def _cross_entropy_fake(logits, target, reduction="mean"):
    _check_logits_target(logits, target, "cross_entropy")
    check_choice(reduction, CROSS_ENTROPY_REDUCTIONS, "cross_entropy", "reduction")
    shape = (logits.shape[0],) if reduction == "none" else ()
    return logits.new_empty(shape)


@torch.library.register_fake("labops::cross_entropy_backward")
def _cross_entropy_backward_fake(grad_loss, logits, target, reduction):
    _check_logits_target(logits, target, "cross_entropy_backward")
    check_choice(reduction, CROSS_ENTROPY_REDUCTIONS, "cross_entropy_backward", "reduction")
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


# Autograd: a torch::autograd::Function in csrc/autograd.cpp (softmax_backward from the saved output,
# cross_entropy_backward from the logits).
