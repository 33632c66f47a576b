"""Tanh and GELU: Python face of the compiled activation ops.

The C++ a call reaches: csrc/activation/entry.h (``ActivationOps``: argument
checks, dtype dispatch), csrc/activation/activation.h (the math, one element per
call), csrc/activation/cpu.cpp and csrc/activation/cuda.cu (the launchers);
the gradient: csrc/activation/register.cpp.
"""

import torch

from .._checks import check_choice, check_tensor

__all__ = ["GELU_APPROXIMATIONS", "gelu", "tanh"]

# The ops' OpOverloads, looked up once: `torch.ops.labops.tanh(...)` would walk three attributes
# and resolve the overload on every call, a measurable share of a tiny call's host time
# (tools/host_time.py).
_tanh = torch.ops.labops.tanh.default
_gelu = torch.ops.labops.gelu.default

GELU_APPROXIMATIONS = ("none", "tanh", "sigmoid")


def tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x)`` elementwise. Backward uses the saved output: ``g * (1 - y**2)``.

    Args:
        x: floating tensor of any shape: float32, float64, float16 or bfloat16, on the CPU or CUDA
            (float16 and bfloat16 are computed in float32 and rounded once).

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
    check_tensor(x, "tanh", "x")
    return _tanh(x)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU elementwise.

    approximate:
        ``"none"``: ``x * Phi(x)`` with the exact normal CDF (``F.gelu``'s default);
        ``"tanh"``: ``x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`` (``F.gelu(approximate="tanh")``);
        ``"sigmoid"``: ``x * sigmoid(1.702 x)``, the cheap form from the GELU paper.

    ``x`` and the result are as for :func:`tanh`: any shape, float32, float64, float16 or bfloat16.

    Example:
        >>> import labops
        >>> x = torch.tensor([-1.0, 0.0, 1.0])
        >>> labops.gelu(x)
        tensor([-0.1587,  0.0000,  0.8413])
        >>> labops.gelu(x, approximate="sigmoid")
        tensor([-0.1542,  0.0000,  0.8458])
    """
    check_tensor(x, "gelu", "x")
    check_choice(approximate, GELU_APPROXIMATIONS, "gelu", "approximate")
    return _gelu(x, approximate)


# Fake tensors (torch.compile): no Python fake. The Meta kernels of csrc/activation/register.cpp run the
# C++ rules of csrc/activation/entry.h, so a bad argument raises the same error compiled or not.

# Autograd: a graph node built in csrc/activation/register.cpp (backward: tanh_backward from the saved output,
# gelu_backward from x).
