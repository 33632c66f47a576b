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

_SUBMODULES = ("ops", "nn", "reference", "legacy", "testing", "bench", "simt", "viz")


def __getattr__(name):
    # Loaded on first access (PEP 562), so `labops doctor` can run and report
    # even when the C++ build fails. Whatever is found is stored in this
    # module's globals, so the lookup (a search of the file system) runs once
    # per name, not on every call of `labops.gelu(...)`.
    if name in _SUBMODULES:
        value = importlib.import_module(f"labops.{name}")
    elif not name.startswith("_"):
        ops = importlib.import_module("labops.ops")
        if name not in ops.__all__:
            raise AttributeError(f"module 'labops' has no attribute {name!r}")
        globals().update({op: getattr(ops, op) for op in ops.__all__})
        value = getattr(ops, name)
    elif importlib.util.find_spec(f"labops.{name}") is not None:
        # Private submodules (`from labops import _build` asks here first).
        value = importlib.import_module(f"labops.{name}")
    else:
        raise AttributeError(f"module 'labops' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES) + importlib.import_module("labops.ops").__all__)
