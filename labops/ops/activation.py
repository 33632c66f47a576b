"""Tanh and GELU: Python face of the compiled activation ops.

The C++ a call reaches: csrc/activation/entry.h (``ActivationOps``: argument
checks, dtype dispatch), csrc/activation/activation.h (the math, one element per
call), csrc/activation/cpu.cpp and csrc/activation/cuda.cu (the launchers);
the gradient: csrc/activation/register.cpp.
"""

import torch

from .._checks import check_choice, check_tensor
from ..ladder import ALL_DTYPES, Default

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


def _x_aligned(x, approximate="none"):
    """Whether the CUDA forward reads x from a 16-byte-aligned address: x's own when contiguous; a
    non-contiguous x is copied into fresh (aligned) memory first. (The output is fresh memory too.)"""
    return not x.is_contiguous() or x.data_ptr() % 16 == 0


# Which rung the forward (tanh and gelu alike) runs when none is forced (labops.ladder.DEFAULTS reads this):
# per device, the first line whose dtype and condition hold. tests/test_ladder.py holds the kernels to it.
LADDER_DEFAULTS = {
    "cpu": (
        Default("simd", ("float32", "float64"), "always"),
        Default("textbook", ("float16", "bfloat16"), "always: simd vectorizes float32 and float64 only"),
    ),
    "cuda": (
        Default("vector_loads", ALL_DTYPES, "x 16-byte aligned (a non-contiguous x is copied into fresh, aligned "
                "memory first)", _x_aligned),
        Default("textbook", ALL_DTYPES, "x not 16-byte aligned (a contiguous view that starts inside its storage)"),
    ),
}
