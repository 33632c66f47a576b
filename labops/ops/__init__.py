"""The compiled ops, as plain Python functions.

Importing this package builds (first time) and loads the C++/CUDA library
(kernels, and the autograd formulas: csrc/autograd.cpp), then registers, for
every ``torch.ops.labops.*`` op, its "fake" implementation (output shape and
dtype only, used by ``torch.compile``). The functions here only check
arguments and call the op.
"""

from labops._build import load_library

load_library()

# Each layer module lists its public names in __all__. The modules are bound
# to _aliases first: a star-import may rebind a module's own name (conv2d_mm).
from . import (  # noqa: E402
    activation as _activation,
    upsample as _upsample,
    depthwise as _depthwise,
    conv2d_mm as _conv2d_mm,
    pooling as _pooling,
    reorg as _reorg,
    softmax as _softmax,
)
from .activation import *  # noqa: E402,F401,F403
from .upsample import *  # noqa: E402,F401,F403
from .depthwise import *  # noqa: E402,F401,F403
from .conv2d_mm import *  # noqa: E402,F401,F403
from .pooling import *  # noqa: E402,F401,F403
from .reorg import *  # noqa: E402,F401,F403
from .softmax import *  # noqa: E402,F401,F403

__all__ = [
    *_activation.__all__,
    *_upsample.__all__,
    *_depthwise.__all__,
    *_conv2d_mm.__all__,
    *_pooling.__all__,
    *_reorg.__all__,
    *_softmax.__all__,
]
