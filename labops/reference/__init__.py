"""Readable reference implementations, written to be shown in the notebooks.

Each layer has its forward and backward as plain loops over NumPy arrays
(``*_loop``: the same arithmetic as the kernel body, one element at a time)
and, where it helps, as vectorized NumPy (``*_numpy``). They are slow on
purpose: their job is to be obviously right, so the compiled ops can be
checked against them.
"""

# Each layer module lists its public names in __all__. The modules are bound
# to _aliases first: a star-import may rebind a module's own name (conv2d_mm).
from . import (
    activation as _activation,
    upsample as _upsample,
    depthwise as _depthwise,
    conv2d_mm as _conv2d_mm,
    pooling as _pooling,
    reorg as _reorg,
    softmax as _softmax,
)
from .activation import *  # noqa: F401,F403
from .upsample import *  # noqa: F401,F403
from .depthwise import *  # noqa: F401,F403
from .conv2d_mm import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .reorg import *  # noqa: F401,F403
from .softmax import *  # noqa: F401,F403

__all__ = [
    *_activation.__all__,
    *_upsample.__all__,
    *_depthwise.__all__,
    *_conv2d_mm.__all__,
    *_pooling.__all__,
    *_reorg.__all__,
    *_softmax.__all__,
]
