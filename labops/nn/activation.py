import torch

from labops import ops

__all__ = ["GELU", "Tanh"]


class Tanh(torch.nn.Module):
    def forward(self, x):
        return ops.tanh(x)


class GELU(torch.nn.Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ops.GELU_APPROXIMATIONS:
            raise ValueError(f"GELU: approximate must be one of {ops.GELU_APPROXIMATIONS}, got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return ops.gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"
