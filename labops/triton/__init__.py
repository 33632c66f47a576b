"""labops.triton: the layers again, written in Triton (issue #34).

One file per layer, read top to bottom like Triton's tutorials: the kernels, the launcher, the op's
registration with autograd. ``labops.triton.gelu``, ``softmax`` and ``conv2d`` take the same
arguments as ``F.gelu``, ``torch.softmax(x, -1)`` and ``F.conv2d``.

The same kernels run on both devices: compiled on a CUDA tensor, run by Triton's interpreter (NumPy,
one program after another) on a CPU tensor, chosen per call by the tensor's device; no
``TRITON_INTERPRET=1`` is needed (``_launch.py`` says how).

``import labops`` does not import this package: Triton is an extra (``pip install -e ".[triton]"``).
"""

try:
    import triton  # noqa: F401  (an absolute import: the real Triton, never this package)
except ImportError as error:  # Triton ships for Linux only
    raise ImportError(
        'labops.triton needs Triton: pip install -e ".[triton]" (Triton ships for Linux only)') from error

from .conv2d import conv2d
from .gelu import gelu
from .softmax import softmax

__all__ = ["conv2d", "gelu", "softmax"]
