"""The compiled ops, as plain Python functions.

Importing this package builds (first time) and loads the C++/CUDA library,
then registers, for every ``torch.ops.labops.*`` op, its autograd formula and
its "fake" implementation (output shape and dtype only, used by
``torch.compile``). The functions here only check arguments and call the op.
"""

from labops._build import load_library

load_library()

# One line per layer module; each module lists its public names in __all__.
from . import activation  # noqa: E402
from .activation import *  # noqa: E402,F401,F403
from . import pooling  # noqa: E402
from .pooling import *  # noqa: E402,F401,F403
from . import reorg as _reorg_module  # noqa: E402  (its function reorg shadows the module name)
from .reorg import *  # noqa: E402,F401,F403

__all__ = [
    *activation.__all__,
    *pooling.__all__,
    *_reorg_module.__all__,
]
