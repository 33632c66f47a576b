import torch

from labops import ops
from labops._checks import check_module_choice

__all__ = ["CrossEntropyLoss", "Softmax"]


class Softmax(torch.nn.Module):
    """Softmax along ``dim`` (no default: say which dim holds the classes).

    Args:
        dim: the dim that sums to 1.

    Example:
        >>> Softmax(dim=1)(torch.zeros(2, 4))[0]
        tensor([0.2500, 0.2500, 0.2500, 0.2500])
    """

    def __init__(self, dim: int):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"Softmax: dim must be an int, got {type(dim).__name__}")
        self.dim = dim

    def forward(self, x):
        return ops.softmax(x, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class CrossEntropyLoss(torch.nn.Module):
    """Fused softmax + negative log-likelihood on (N, C) logits and (N,) int64 targets.

    Args:
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Example:
        >>> loss = CrossEntropyLoss()(torch.zeros(2, 4), torch.tensor([0, 3]))
        >>> round(loss.item(), 4)
        1.3863
    """

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        check_module_choice(reduction, ops.CROSS_ENTROPY_REDUCTIONS, "CrossEntropyLoss", "reduction")
        self.reduction = reduction

    def forward(self, logits, target):
        return ops.cross_entropy(logits, target, self.reduction)

    def extra_repr(self):
        return f"reduction={self.reduction!r}"
