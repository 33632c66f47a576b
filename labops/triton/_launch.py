"""How a labops.triton kernel runs: compiled on a CUDA tensor, interpreted on a CPU tensor.

``@kernel`` stands where Triton's tutorials write ``@triton.jit``. It keeps two versions of the
function: ``triton.jit(fn)``, which compiles it for the GPU, and Triton's own interpreter,
``InterpretedFunction(fn)`` (what ``triton.jit`` returns when ``TRITON_INTERPRET=1`` is set before
Triton is imported), which runs every program of the grid one after another with NumPy. A launch,
``gelu_kernel[grid](x, ...)``, takes the compiled one when its first tensor argument is on CUDA and
the interpreted one otherwise. No environment variable, and a process can use both.

One thing ``TRITON_INTERPRET=1`` does that this does not: it also makes Triton's own library of
``@triton.jit`` functions (``tl.max``, ``tl.sum``, ``tl.sigmoid``, ``tl.zeros``) interpreted ones,
since they are decorated when ``triton.language`` is imported. Without it, such a function called
from an interpreted kernel raises "Cannot call @triton.jit'd outside of the scope of a kernel"
(triton/runtime/jit.py, ``JITFunction.__call__``: a compiled kernel never calls it, the compiler
inlines the function instead). So while an interpreted launch runs, ``_interpreting`` lets
that call run the function through the interpreter, as ``InterpretedFunction.__call__``
(triton/runtime/interpreter.py) would, and puts ``JITFunction.__call__`` back afterwards. Our own
device functions (``columns_tile`` in conv2d.py) are plain ``@triton.jit`` ones and run the same way.

And one fix: Triton 3.6's interpreter turns a loop bound known only at run time
(``for k in range(0, K, BLOCK_K)``) into an int with ``int(array of shape (1,))``, which NumPy 2.4
refuses ("only 0-dimensional arrays can be converted to Python scalars"; triton-lang/triton#9171,
fixed upstream after 3.6). ``_interpreting`` applies the upstream fix (``labops/_triton_fix.py``, shared with
the Triton exercises) for the launch's duration.
"""

import contextlib

import numpy as np
import torch
import triton
from triton.runtime import interpreter
from triton.runtime.interpreter import InterpretedFunction, _patch_lang
from triton.runtime.jit import JITFunction

from .._triton_fix import with_index_fix

__all__ = ["kernel"]


class Kernel:
    """A Triton kernel with a compiled version (CUDA tensors) and an interpreted one (CPU tensors)."""

    def __init__(self, fn):
        self.fn = fn
        self.compiled = triton.jit(fn)  # an InterpretedFunction too when TRITON_INTERPRET=1 was set
        self.interpreted = InterpretedFunction(fn)
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __getitem__(self, grid):
        """``kernel[grid](*args)``, as for a ``triton.jit`` function."""

        def launch(*args, **kwargs):
            device = next(a.device for a in args if isinstance(a, torch.Tensor))
            if device.type == "cuda":
                with torch.cuda.device(device):  # Triton launches on the current device's current stream
                    return self.compiled[grid](*args, **kwargs)
            with _interpreting():
                return self.interpreted[grid](*args, **kwargs)

        return launch

    def __repr__(self):
        return f"Kernel({self.fn.__module__}.{self.fn.__qualname__})"


def kernel(fn) -> Kernel:
    """The decorator: ``@kernel`` where Triton's tutorials write ``@triton.jit``."""
    return Kernel(fn)


_INTERPRETED = {}  # a library function -> its InterpretedFunction, made once


def _call_interpreted(jit_function, *args, **kwargs):
    """A ``@triton.jit`` library function (``tl.max``) called from inside an interpreted kernel."""
    interpreted = _INTERPRETED.get(jit_function.fn)
    if interpreted is None:
        interpreted = _INTERPRETED[jit_function.fn] = InterpretedFunction(jit_function.fn)
    patched = _patch_lang(jit_function.fn)  # the tl builtins its module sees, as the interpreter's
    try:
        return interpreted.rewrite()(*args, **kwargs)
    finally:
        patched.restore()  # InterpretedFunction.__call__ leaves them patched: a later compile would see them


_patch_lang_tensor_fixed = with_index_fix(interpreter._patch_lang_tensor)  # triton-lang/triton#9171


@contextlib.contextmanager
def _interpreting():
    """For one interpreted launch: library functions run interpreted, loop bounds convert, and NumPy does not
    warn where a GPU silently gives inf (exp(-2u) of a large u in gelu.py, a step the kernel means)."""
    call, patch_lang_tensor = JITFunction.__call__, interpreter._patch_lang_tensor
    JITFunction.__call__ = _call_interpreted
    interpreter._patch_lang_tensor = _patch_lang_tensor_fixed
    try:
        with np.errstate(over="ignore", under="ignore"):
            yield
    finally:
        JITFunction.__call__, interpreter._patch_lang_tensor = call, patch_lang_tensor
