import torch

from labops import ops
from labops._checks import check_module_choice

__all__ = ["GELU", "Tanh"]


class Tanh(torch.nn.Module):
    """``labops.tanh`` as a module: y = tanh(x), any shape (backward from the saved output).

    Example:
        >>> Tanh()(torch.tensor([0.0, 1.0]))
        tensor([0.0000, 0.7616])
    """

    def forward(self, x):
        return ops.tanh(x)


class GELU(torch.nn.Module):
    """``labops.gelu`` as a module, like ``torch.nn.GELU``: any shape in, the same shape out.

    Args:
        approximate: ``"none"`` (x * Phi(x)), ``"tanh"`` or ``"sigmoid"`` (x * sigmoid(1.702 x)).

    Example:
        >>> GELU("tanh")(torch.tensor([1.0]))
        tensor([0.8412])
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        check_module_choice(approximate, ops.GELU_APPROXIMATIONS, "GELU", "approximate")
        self.approximate = approximate

    def forward(self, x):
        return ops.gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"
