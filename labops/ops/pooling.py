"""Global average pooling: Python face of the compiled pooling ops.

The C++ a call reaches: csrc/pooling/entry.h (``PoolingOps``: argument
checks, dtype dispatch), csrc/pooling/pooling.h (the math: one plane's mean, one
element's gradient), csrc/pooling/cpu.cpp and csrc/pooling/cuda.cu (the
launchers); the gradient: csrc/pooling/register.cpp.
"""

import torch

from .._checks import check_floating, check_tensor, shape_str

__all__ = ["global_avg_pool2d"]


def global_avg_pool2d(x: torch.Tensor) -> torch.Tensor:
    """Mean over the last two dims: (N, C, H, W) -> (N, C, 1, 1), (C, H, W) -> (C, 1, 1).

    Torch7's SpatialGlobalAveragePooling. Sums and divides in float32 for
    float16/bfloat16 inputs (float64 for float64). Backward spreads
    ``grad_output / (H*W)`` over every input position.

    Args:
        x: floating tensor (N, C, H, W) or (C, H, W).

    Returns:
        (N, C, 1, 1) or (C, 1, 1), x's dtype.

    Example:
        >>> import labops
        >>> x = torch.arange(8.0).reshape(1, 2, 2, 2)
        >>> labops.global_avg_pool2d(x).flatten()
        tensor([1.5000, 5.5000])
    """
    check_tensor(x, "global_avg_pool2d", "x")
    return torch.ops.labops.global_avg_pool2d(x)


# ---- the rules of csrc/pooling/entry.h, in its words, for the fakes (torch.compile) ----

def _check_rank(dim: int, op: str, arg: str) -> None:
    if dim not in (3, 4):
        raise ValueError(f"labops.{op}: {arg} must be a 3-D (C, H, W) or 4-D (N, C, H, W) tensor, got {dim}-D")


@torch.library.register_fake("labops::global_avg_pool2d")
def _global_avg_pool2d_fake(x):
    check_floating(x, "global_avg_pool2d", "x")
    _check_rank(x.dim(), "global_avg_pool2d", "x")
    return x.new_empty((*x.shape[:-2], 1, 1))


@torch.library.register_fake("labops::global_avg_pool2d_backward")
def _global_avg_pool2d_backward_fake(grad_output, input_size):
    check_floating(grad_output, "global_avg_pool2d_backward", "grad_output")
    _check_rank(len(input_size), "global_avg_pool2d_backward", "input_size")
    if any(s < 0 for s in input_size):
        raise ValueError(f"labops.global_avg_pool2d_backward: input_size must not be negative, got "
                         f"{shape_str(input_size)}")
    expected = (*input_size[:-2], 1, 1)
    if tuple(grad_output.shape) != tuple(expected):
        raise ValueError(f"labops.global_avg_pool2d_backward: grad_output must have shape {shape_str(expected)} "
                         f"(input_size with H and W set to 1), got {shape_str(grad_output.shape)}")
    return grad_output.new_empty(input_size)


# Autograd: a graph node built in csrc/pooling/register.cpp (backward: global_avg_pool2d_backward; its own
# backward is the forward, so double backward works).
