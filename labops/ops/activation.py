"""Tanh and GELU: Python face of the compiled ops in csrc/ops/activation.h."""

import torch

from .._checks import check_choice, check_floating

__all__ = ["GELU_APPROXIMATIONS", "gelu", "tanh"]

GELU_APPROXIMATIONS = ("none", "tanh", "sigmoid")


def tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x)`` elementwise. Backward uses the saved output: ``g * (1 - y**2)``.

    Args:
        x: floating tensor of any shape (float32/float64 on the CPU; also float16/bfloat16 on CUDA).

    Returns:
        a tensor of x's shape and dtype.

    Example:
        >>> import labops
        >>> x = torch.tensor([0.0, 1.0], requires_grad=True)
        >>> y = labops.tanh(x)
        >>> y.sum().backward()
        >>> y.detach(), x.grad
        (tensor([0.0000, 0.7616]), tensor([1.0000, 0.4200]))
    """
    check_floating(x, "tanh", "x")
    return torch.ops.labops.tanh(x)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU elementwise.

    approximate:
        ``"none"``: ``x * Phi(x)`` with the exact normal CDF (``F.gelu``'s default);
        ``"tanh"``: ``x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`` (``F.gelu(approximate="tanh")``);
        ``"sigmoid"``: ``x * sigmoid(1.702 x)``, the cheap form from the GELU paper.

    Args:
        x: floating tensor of any shape.

    Returns:
        a tensor of x's shape and dtype.

    Example:
        >>> import labops
        >>> x = torch.tensor([-1.0, 0.0, 1.0])
        >>> labops.gelu(x)
        tensor([-0.1587,  0.0000,  0.8413])
        >>> labops.gelu(x, approximate="sigmoid")
        tensor([-0.1542,  0.0000,  0.8458])
    """
    check_floating(x, "gelu", "x")
    check_choice(approximate, GELU_APPROXIMATIONS, "gelu", "approximate")
    return torch.ops.labops.gelu(x, approximate)


# ---- shapes for torch.compile: every output has its first input's shape ----

@torch.library.register_fake("labops::tanh")
def _tanh_fake(x):
    check_floating(x, "tanh", "x")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("labops::tanh_backward")
def _tanh_backward_fake(grad_output, output):
    check_floating(output, "tanh_backward", "output")
    return torch.empty_like(output, memory_format=torch.contiguous_format)


@torch.library.register_fake("labops::gelu")
def _gelu_fake(x, approximate="none"):
    check_floating(x, "gelu", "x")
    check_choice(approximate, GELU_APPROXIMATIONS, "gelu", "approximate")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("labops::gelu_backward")
def _gelu_backward_fake(grad_output, x, approximate="none"):
    check_floating(x, "gelu_backward", "x")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# Autograd: a torch::autograd::Function in csrc/autograd.cpp (backward: tanh_backward from the saved output,
# gelu_backward from x).
