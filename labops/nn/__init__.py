"""torch.nn.Module wrappers around the labops ops."""

# One line per layer module; each module lists its public names in __all__.
from . import activation
from .activation import *  # noqa: F401,F403
from . import softmax
from .softmax import *  # noqa: F401,F403

__all__ = [
    *activation.__all__,
    *softmax.__all__,
]
