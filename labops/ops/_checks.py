"""Argument checks shared by the Python side of every op.

The C++ kernels check the same rules; checking here too means the fake
(shape-only) implementations used by torch.compile reject bad input with the
same message as the real kernels.
"""

import torch


def check_floating(x, op: str, arg: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"labops.{op}: {arg} must be a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise ValueError(
            f"labops.{op}: {arg} must be a floating-point tensor (float32, float64, float16 or "
            f"bfloat16), got {x.dtype}"
        )


def check_choice(value, choices, op: str, arg: str) -> None:
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"labops.{op}: {arg} must be one of {options}, got {value!r}")
