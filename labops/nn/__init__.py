"""torch.nn.Module wrappers around the labops ops."""

# One line per layer module; each module lists its public names in __all__.
from . import activation
from .activation import *  # noqa: F401,F403
from . import pooling
from .pooling import *  # noqa: F401,F403
from . import reorg
from .reorg import *  # noqa: F401,F403

__all__ = [
    *activation.__all__,
    *pooling.__all__,
    *reorg.__all__,
]
