"""labops: learn how deep-learning layers are really built.

Each layer exists three ways: a readable reference in ``labops.reference``,
a compiled CPU op and a CUDA op (``labops.tanh``, ``labops.gelu``, ...,
registered with PyTorch as ``torch.ops.labops.*``).

``import labops`` is cheap; the compiled library is built (first time only)
and loaded when an op is first used.
"""

import importlib
import importlib.util

__version__ = "0.1.0"

_SUBMODULES = ("ops", "nn", "reference", "testing", "bench", "simt", "viz")


def __getattr__(name):
    # Loaded on first access (PEP 562), so `labops doctor` can run and report
    # even when the C++ build fails. Submodules first: `from labops import
    # _build` asks here before importing the submodule.
    if importlib.util.find_spec(f"labops.{name}") is not None:
        return importlib.import_module(f"labops.{name}")
    if not name.startswith("_"):
        ops = importlib.import_module("labops.ops")
        if name in ops.__all__:
            return getattr(ops, name)
    raise AttributeError(f"module 'labops' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES) + importlib.import_module("labops.ops").__all__)
