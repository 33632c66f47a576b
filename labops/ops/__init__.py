"""The compiled ops, as plain Python functions.

Importing this package builds (first time) and loads the C++/CUDA library,
then registers, for every ``torch.ops.labops.*`` op, its autograd formula and
its "fake" implementation (output shape and dtype only, used by
``torch.compile``). The functions here only check arguments and call the op.
"""

from labops._build import load_library

load_library()

from .activation import GELU_APPROXIMATIONS, gelu, tanh  # noqa: E402

__all__ = ["GELU_APPROXIMATIONS", "gelu", "tanh"]
