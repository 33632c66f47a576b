"""Readable reference implementations, written to be shown in the notebooks.

Each layer has its forward and backward as plain loops over NumPy arrays
(``*_loop``: the same arithmetic as the kernel body, one element at a time)
and, where it helps, as vectorized NumPy (``*_numpy``). They are slow on
purpose: their job is to be obviously right, so the compiled ops can be
checked against them.
"""

from labops._layers import export_layers  # noqa: E402

__all__ = export_layers(__name__, globals())
