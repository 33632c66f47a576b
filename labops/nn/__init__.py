"""torch.nn.Module wrappers around the labops ops."""

from .activation import GELU, Tanh

__all__ = ["GELU", "Tanh"]
