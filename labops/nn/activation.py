import torch

from labops import ops

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
        if approximate not in ops.GELU_APPROXIMATIONS:
            raise ValueError(f"GELU: approximate must be one of {ops.GELU_APPROXIMATIONS}, got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return ops.gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"
