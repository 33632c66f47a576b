"""The compiled ops, as plain Python functions.

Importing this package builds (first time) and loads the C++/CUDA library
(kernels, and the autograd formulas: csrc/<layer>/register.cpp), then registers, for
every ``torch.ops.labops.*`` op, its "fake" implementation (output shape and
dtype only, used by ``torch.compile``). The functions here turn their
arguments into what the schema takes and call the op; the op checks them.
"""

from labops._build import load_library

load_library()

from labops._layers import export_layers  # noqa: E402

__all__ = export_layers(__name__, globals())
