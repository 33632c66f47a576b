"""The layers, and the one way labops.ops, labops.nn and labops.reference gather their names.

A layer is a folder of csrc/ (its C++ and CUDA) and a module of the same name in each of labops.ops,
labops.nn, labops.reference and labops.bench. The list is read from labops/ops/, never written out:
adding a layer's files adds it everywhere (tests/test_layout.py holds csrc/ and the Python side to
the same names).
"""

import importlib
from pathlib import Path

LAYERS = tuple(sorted(path.stem for path in (Path(__file__).parent / "ops").glob("[!_]*.py")))


def export_layers(package: str, namespace: dict) -> list:
    """Import ``package.<layer>`` for every layer that has a module there, copy each module's ``__all__``
    names into ``namespace`` (the package's globals) and return the names: the package's ``__all__``.

    What ``from .layer import *`` once per layer would do, except that a layer module whose name is
    also one of its functions (``conv2d_mm``) cannot shadow the function.
    """
    names = []
    for layer in LAYERS:
        if importlib.util.find_spec(f"{package}.{layer}") is None:
            continue
        module = importlib.import_module(f"{package}.{layer}")
        namespace.update({name: getattr(module, name) for name in module.__all__})
        names += module.__all__
    return names
