"""Global average pooling: Python face of the compiled pooling ops.

The C++ a call reaches: csrc/pooling/entry.h (``PoolingOps``: argument
checks, dtype dispatch), csrc/pooling/pooling.h (the math: one plane's mean, one
element's gradient), csrc/pooling/cpu.cpp and csrc/pooling/cuda.cu (the
launchers); the gradient: csrc/pooling/register.cpp.
"""

import torch

from .._checks import check_tensor
from ..ladder import ALL_DTYPES, Default, kernel_address

__all__ = ["global_avg_pool2d"]

# The op's OpOverload, looked up once (as in activation.py: a share of a tiny call's host time).
_global_avg_pool2d = torch.ops.labops.global_avg_pool2d.default


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
    return _global_avg_pool2d(x)


# The rules and the output shapes for fake tensors (torch.compile): the Meta kernels of
# csrc/pooling/register.cpp (entry.h's rule functions, the ones every eager call runs first).


# Autograd: a graph node built in csrc/pooling/register.cpp (backward: global_avg_pool2d_backward; its own
# backward is the forward, so double backward works).


# Which rung the forward runs when none is forced (csrc/pooling/entry.h names the rungs; labops.ladder.DEFAULTS
# gathers this table): per device, the first line whose dtype and condition hold. tests/test_ladder.py holds
# the kernels to it.
def _whole_packs(x):
    pack = 16 // x.element_size()
    return kernel_address(x) % 16 == 0 and (x.shape[-2] * x.shape[-1]) % pack == 0


LADDER_DEFAULTS = {
    "cpu": (
        Default("simd4", ("float32", "float64"), "always"),
        Default("textbook", ("float16", "bfloat16"), "always: simd4 adds in the data's own type, so not in 2-byte ones"),
    ),
    "cuda": (
        Default("whole_packs", ALL_DTYPES, "x 16-byte aligned and H*W a multiple of the 16-byte pack "
                "(4 float32, 2 float64, 8 float16 or bfloat16 elements)", _whole_packs),
        Default("vector_loads", ALL_DTYPES, "x 16-byte aligned, H*W not a multiple of the pack",
                lambda x: kernel_address(x) % 16 == 0),
        Default("plane_groups", ALL_DTYPES, "x not 16-byte aligned (a contiguous view that starts inside its storage; "
                "a non-contiguous x is copied into fresh, aligned memory first)"),
    ),
}
