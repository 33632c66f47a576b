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
from . import softmax as _softmax_module  # noqa: E402  (the name softmax becomes the function below)
from .softmax import *  # noqa: E402,F401,F403

__all__ = [
    *activation.__all__,
    *_softmax_module.__all__,
]
