"""Readable reference implementations, written to be shown in the notebooks.

Each layer has its forward and backward as plain loops over NumPy arrays
(``*_loop``: the same arithmetic as the kernel body, one element at a time)
and as vectorized NumPy (``*_numpy``). They are slow on purpose: their job is
to be obviously right, so the compiled ops can be checked against them.
"""

from .activation import (
    gelu_backward_loop,
    gelu_backward_numpy,
    gelu_forward_loop,
    gelu_forward_numpy,
    tanh_backward_loop,
    tanh_backward_numpy,
    tanh_forward_loop,
    tanh_forward_numpy,
)

__all__ = [
    "gelu_backward_loop",
    "gelu_backward_numpy",
    "gelu_forward_loop",
    "gelu_forward_numpy",
    "tanh_backward_loop",
    "tanh_backward_numpy",
    "tanh_forward_loop",
    "tanh_forward_numpy",
]
