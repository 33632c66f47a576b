"""labops: learn how deep-learning layers are really built.

Each layer exists three ways: a readable reference in ``labops.reference``,
a compiled CPU op and a CUDA op (``labops.tanh``, ``labops.gelu``, ...,
registered with PyTorch as ``torch.ops.labops.*``).

``import labops`` loads the compiled ops when they are already built for this
torch (milliseconds), so ``torch.ops.labops.<op>`` works at once; otherwise
they are built (one to five minutes, once) when an op is first called.
``dir(labops)`` and ``help(labops)`` never build anything.
"""

import ast as _ast
import importlib as _importlib
import importlib.util as _importlib_util
import pathlib as _pathlib
import sys as _sys

__version__ = "0.1.0"

_SUBMODULES = ("ops", "nn", "reference", "torch7", "ladder", "testing", "bench", "simt", "viz", "exercises", "rtc",
               "rtc_layers", "source")

# Helpers that are not ops but that the notebooks call as labops.<name>: name -> the submodule defining it.
_HELPERS = {"show_source": "labops.source"}


def _public_ops() -> dict:
    """name -> literal value (constants) or docstring (functions), read from labops/ops/*.py without importing."""
    found = {}
    for path in sorted((_pathlib.Path(__file__).parent / "ops").glob("[!_]*.py")):
        tree = _ast.parse(path.read_text())
        exported, values = [], {}
        for node in tree.body:
            if isinstance(node, _ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], _ast.Name):
                if node.targets[0].id == "__all__":
                    exported = _ast.literal_eval(node.value)
                else:
                    try:
                        values[node.targets[0].id] = ("constant", _ast.literal_eval(node.value))
                    except ValueError:
                        pass
            elif isinstance(node, _ast.FunctionDef):
                values[node.name] = ("function", _ast.get_docstring(node) or "")
        found.update({name: values.get(name, ("function", "")) for name in exported})
    return found


_OPS = _public_ops()


def _lazy_op(name: str, doc: str):
    """A stand-in for labops.<name> that builds and imports the ops on its first call.

    It carries the op's docstring up to its examples: doctest would otherwise collect them as
    examples of this module (the stand-in belongs to it), where the names the op's own module
    imports (torch) are missing. The op itself, once loaded, has them all.
    """

    def op(*args, **kwargs):
        return _resolve(name)(*args, **kwargs)

    lines = doc.splitlines()
    examples = next((i for i, line in enumerate(lines) if line.strip().startswith(("Example", ">>>"))), len(lines))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = "\n".join(lines[:examples]).rstrip()
    op.__module__ = __name__
    return op


def _resolve(name):
    ops = _importlib.import_module("labops.ops")  # builds the library the first time
    globals().update({op: getattr(ops, op) for op in ops.__all__})
    return getattr(ops, name)


def __getattr__(name):
    # Loaded on first access (PEP 562), so `labops doctor` can run and report
    # even when the C++ build fails. Whatever is found is stored in this
    # module's globals, so the lookup runs once per name, not on every call of
    # `labops.gelu(...)`.
    if name in _SUBMODULES:
        value = _importlib.import_module(f"labops.{name}")
    elif name in _HELPERS:
        value = getattr(_importlib.import_module(_HELPERS[name]), name)
    elif name in _OPS:
        kind, payload = _OPS[name]
        if "labops.ops" in _sys.modules:
            value = getattr(_sys.modules["labops.ops"], name)
        else:  # constants are literals; functions get a stand-in until the first call
            value = payload if kind == "constant" else _lazy_op(name, payload)
    elif name.startswith("_") and _importlib_util.find_spec(f"labops.{name}") is not None:
        # Private submodules (`from labops import _build` asks here first).
        value = _importlib.import_module(f"labops.{name}")
    else:
        raise AttributeError(f"module 'labops' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    # The ops and what is loaded already; not the submodules, whose import would build
    # the ops (help() lists them under PACKAGE CONTENTS anyway).
    return sorted({n for n in globals() if not n.startswith("_")} | set(_OPS) | set(_HELPERS))


def _load_if_built() -> None:
    """Import the ops now if their library is already built: loading it costs milliseconds."""
    try:
        from labops import _build

        if _build.plan().library.exists():
            _importlib.import_module("labops.ops")
    except Exception:  # never fail `import labops`: the first op call reports build problems
        pass


_load_if_built()
