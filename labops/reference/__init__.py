"""Readable reference implementations, written to be shown in the notebooks.

Each layer has its forward and backward as plain loops over NumPy arrays
(``*_loop``: the same arithmetic as the kernel body, one element at a time)
and, where it helps, as vectorized NumPy (``*_numpy``). They are slow on
purpose: their job is to be obviously right, so the compiled ops can be
checked against them.
"""

# One line per layer module; each module lists its public names in __all__.
from . import activation
from .activation import *  # noqa: F401,F403
from . import softmax
from .softmax import *  # noqa: F401,F403

__all__ = [
    *activation.__all__,
    *softmax.__all__,
]
