"""labops: learn how deep-learning layers are really built.

Each layer exists three ways: a readable reference in ``labops.reference``,
a compiled CPU op and a CUDA op (``labops.tanh``, ``labops.gelu``, ...,
registered with PyTorch as ``torch.ops.labops.*``).

``import labops`` loads the compiled ops when they are already built for this
torch (milliseconds), so ``torch.ops.labops.<op>`` works at once; otherwise
the first use of an op (``labops.gelu``) builds them (about half a minute on
two cores, once). ``dir(labops)`` and ``help(labops)`` never build: they list
the ops once they are loaded.
"""

import importlib as _importlib
import importlib.util as _importlib_util
import sys as _sys

__version__ = "0.1.0"

_SUBMODULES = ("ops", "nn", "reference", "torch7", "ladder", "testing", "bench", "simt", "viz", "exercises", "rtc",
               "rtc_layers", "source")

# Helpers that are not ops but that the notebooks call as labops.<name>: name -> the submodule defining it.
_HELPERS = {"show_source": "labops.source"}


def _ops_module():
    """labops.ops, imported: it builds the library the first time, then loads it."""
    return _importlib.import_module("labops.ops")


def __getattr__(name):
    # Loaded on first access (PEP 562), so `labops doctor` can run and report
    # even when the C++ build fails. Whatever is found is stored in this
    # module's globals, so the lookup runs once per name, not on every call of
    # `labops.gelu(...)`.
    if name in _SUBMODULES:
        value = _importlib.import_module(f"labops.{name}")
    elif name in _HELPERS:
        value = getattr(_importlib.import_module(_HELPERS[name]), name)
    elif name.startswith("_"):
        if _importlib_util.find_spec(f"labops.{name}") is None:
            raise AttributeError(f"module 'labops' has no attribute {name!r}")
        value = _importlib.import_module(f"labops.{name}")  # private submodules (`from labops import _build`)
    elif name in _ops_module().__all__:  # an op, or a constant beside it (GELU_APPROXIMATIONS)
        value = getattr(_ops_module(), name)
    else:
        raise AttributeError(f"module 'labops' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    # What is loaded already (the ops, once built) and the helpers; never a build, so not the submodules,
    # whose import would build the ops (help() lists them under PACKAGE CONTENTS anyway).
    ops = _sys.modules.get("labops.ops")
    return sorted({n for n in globals() if not n.startswith("_")} | set(getattr(ops, "__all__", ())) | set(_HELPERS))


def _load_if_built() -> None:
    """Import the ops now if their library is already built: loading it costs milliseconds."""
    try:
        from labops import _build

        if _build.plan().library.exists():
            _importlib.import_module("labops.ops")
    except Exception:  # never fail `import labops`: the first op call reports build problems
        pass


_load_if_built()
