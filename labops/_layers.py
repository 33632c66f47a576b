"""The seven layers, and the one way labops.ops, labops.nn and labops.reference gather their names."""

import importlib

LAYERS = ("activation", "upsample", "depthwise", "conv2d_mm", "pooling", "reorg", "softmax")


def export_layers(package: str, namespace: dict) -> list:
    """Import ``package.<layer>`` for every layer, copy each module's ``__all__`` names into
    ``namespace`` (the package's globals) and return the names: the package's ``__all__``.

    What ``from .layer import *`` seven times would do, except that a layer module whose name is
    also one of its functions (``conv2d_mm``) cannot shadow the function.
    """
    names = []
    for layer in LAYERS:
        module = importlib.import_module(f"{package}.{layer}")
        namespace.update({name: getattr(module, name) for name in module.__all__})
        names += module.__all__
    return names
