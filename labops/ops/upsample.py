"""Bilinear upsampling: Python face of the compiled upsample ops.

Three coordinate modes (ONNX Resize's names) decide which source coordinate an
output pixel reads, per dimension (``x`` the output index, ``scale`` the source
step per output step):

* ``"half_pixel"``: ``src = (x + 0.5) * scale - 0.5``, clamped at 0. PyTorch's
  ``align_corners=False``, TF's ``half_pixel_centers=True``, TF2 ``tf.image.resize``.
* ``"align_corners"``: ``src = x * (in - 1) / (out - 1)``. PyTorch and TF1 ``align_corners=True``.
* ``"asymmetric"``: ``src = x * scale``. TF1 / TFLite ``resize_bilinear``'s default, the
  source of the "trained in PyTorch, deployed on TFLite, outputs shifted" mismatch.

``scale`` is ``in / out``, except when the caller gives ``scale_factor``: then, like
``F.interpolate``, the output has ``floor(in * scale_factor)`` pixels and the step is
``1 / scale_factor``.

The C++ a call reaches: csrc/upsample/entry.h (``UpsampleOps``: argument
checks, dtype dispatch), csrc/upsample/upsample.h (``source_taps`` and the
per-element bodies, shared by forward, scatter and gather),
csrc/upsample/cpu.cpp and csrc/upsample/cuda.cu (the launchers); the gradient:
csrc/upsample/register.cpp.
"""

import math
import numbers

import torch

from .._checks import check_choice, check_floating, check_tensor, shape_str
from ..ladder import ALL_DTYPES, Default
from ..reference.upsample import COORDINATE_MODES  # the three modes, named once

__all__ = ["upsample_bilinear2d", "upsample_bilinear2d_output_size"]

_OP = "upsample_bilinear2d"

# The ops' OpOverloads, looked up once: `torch.ops.labops.upsample_bilinear2d(...)` would walk three attributes
# and resolve the overload on every call, a measurable share of a tiny call's host time
# (tools/host_time.py).
_upsample_bilinear2d = torch.ops.labops.upsample_bilinear2d.default


def _check_x(t, op, arg):
    """x is a floating 4-D tensor: the op's rule (check_4d in csrc/upsample/entry.h), checked here before
    resolve_arguments reads x's height and width."""
    check_floating(t, op, arg)
    if t.dim() != 4:
        raise ValueError(f"labops.{op}: {arg} must be a 4-D (N, C, H, W) tensor, got {t.dim()}-D with shape "
                         f"{shape_str(t.shape)}")


def _positive_pair(value, arg, kind):
    """``size`` (kind int) or ``scale_factor`` (kind float), a number or a pair -> a 2-tuple of numbers > 0.

    Not ``labops._checks.pair``: these are F.interpolate's arguments, not the op's, and a scale factor
    may be a float.
    """
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2 or not (_is_number(items[0], kind) and _is_number(items[1], kind)):
        what = "an int or a pair of ints" if kind is int else "a number or a pair of numbers"
        raise ValueError(f"labops.{_OP}: {arg} must be {what}, got {value!r}")
    h, w = items
    if not (h > 0 and w > 0 and math.isfinite(h) and math.isfinite(w)):
        raise ValueError(f"labops.{_OP}: {arg} must be positive, got {value!r}")
    return kind(h), kind(w)


def _is_number(v, kind):
    """An int (kind int) or a real number (kind float), bool excluded."""
    if type(v) is int or (kind is float and type(v) is float):  # the common cases, without an ABC's isinstance
        return True
    return isinstance(v, numbers.Integral if kind is int else numbers.Real) and not isinstance(v, bool)


def resolve_arguments(x, size=None, scale_factor=None, align_corners=False, coordinate_mode=None):
    """The compiled op's arguments for :func:`upsample_bilinear2d`'s: ``(output_size, coordinate_mode,
    scale_h, scale_w)``.

    ``size`` or ``scale_factor`` (exactly one) becomes the output size, F.interpolate's way
    (``floor(in * scale_factor)``); the scales are the caller's scale factors (None with ``size``);
    ``coordinate_mode`` None becomes ``"align_corners"`` or ``"half_pixel"`` from ``align_corners``.
    ``labops.torch7.SpatialUpSamplingBilinear`` calls the ops with these.

    Example:
        >>> resolve_arguments(torch.zeros(1, 1, 5, 7), scale_factor=1.5)
        ([7, 10], 'half_pixel', 1.5, 1.5)
    """
    check_tensor(x, _OP, "x")
    _check_x(x, _OP, "x")
    shape = x.shape
    if shape[2] == 0 or shape[3] == 0:
        raise ValueError(f"labops.{_OP}: x's height and width must be between 1 and 2^24, got {tuple(x.shape)}")
    if (size is None) == (scale_factor is None):
        raise ValueError(f"labops.{_OP}: give exactly one of size and scale_factor, got "
                         f"size={size!r}, scale_factor={scale_factor!r}")
    if coordinate_mode is None:
        coordinate_mode = "align_corners" if align_corners else "half_pixel"
    check_choice(coordinate_mode, COORDINATE_MODES, _OP, "coordinate_mode")
    if size is not None:
        return list(_positive_pair(size, "size", int)), coordinate_mode, None, None
    scales = _positive_pair(scale_factor, "scale_factor", float)
    # F.interpolate's rule: floor(in * scale_factor), computed in double.
    out = [math.floor(float(shape[2]) * scales[0]), math.floor(float(shape[3]) * scales[1])]
    if min(out) < 1:
        raise ValueError(f"labops.{_OP}: scale_factor {scale_factor!r} must leave at least one output pixel, "
                         f"got output size {tuple(out)} from input size {tuple(x.shape[2:])}")
    return out, coordinate_mode, scales[0], scales[1]


def upsample_bilinear2d_output_size(x, size=None, scale_factor=None):
    """(out_h, out_w) that :func:`upsample_bilinear2d` produces for these arguments.

    Args:
        x: (N, C, H, W); size, scale_factor: as for :func:`upsample_bilinear2d`.

    Returns:
        (out_h, out_w) as a tuple of ints.

    Example:
        >>> upsample_bilinear2d_output_size(torch.zeros(1, 1, 5, 7), scale_factor=1.5)
        (7, 10)
    """
    return tuple(resolve_arguments(x, size, scale_factor)[0])


def upsample_bilinear2d(x: torch.Tensor, size=None, scale_factor=None, align_corners: bool = False,
                        coordinate_mode: str | None = None) -> torch.Tensor:
    """Bilinear resize of a 4-D (N, C, H, W) tensor.

    Give exactly one of ``size`` (int or (out_h, out_w)) and ``scale_factor`` (number or
    pair). ``coordinate_mode`` ("half_pixel", "align_corners", "asymmetric") overrides
    ``align_corners`` (False -> "half_pixel", True -> "align_corners"). With the first two
    modes the result equals ``F.interpolate(x, size, scale_factor, mode="bilinear",
    align_corners=...)``. The backward is a deterministic gather (the same bits on every run).

    Args:
        x: floating tensor (N, C, H, W).
        size: int or (out_h, out_w); or None when scale_factor is given.
        scale_factor: number or (h, w) pair; or None when size is given.
        align_corners: False -> ``"half_pixel"``, True -> ``"align_corners"``.
        coordinate_mode: ``"half_pixel"``, ``"align_corners"`` or ``"asymmetric"`` (TF1's default).

    Returns:
        (N, C, out_h, out_w), x's dtype.

    Example:
        >>> import labops
        >>> x = torch.tensor([[[[0.0, 1.0]]]])
        >>> labops.upsample_bilinear2d(x, size=(1, 4))
        tensor([[[[0.0000, 0.2500, 0.7500, 1.0000]]]])
        >>> labops.upsample_bilinear2d(x, size=(1, 4), coordinate_mode="asymmetric")
        tensor([[[[0.0000, 0.5000, 1.0000, 1.0000]]]])
    """
    return _upsample_bilinear2d(x, *resolve_arguments(x, size, scale_factor, align_corners, coordinate_mode))


# Fake tensors (torch.compile): no Python fake. The Meta kernels of csrc/upsample/register.cpp run the
# C++ rules and shapes of csrc/upsample/entry.h, so a bad argument raises the same error compiled or not.

# Autograd: a graph node built in csrc/upsample/register.cpp (the backward is the compiled deterministic
# gather; the backward op's own gradient is the forward, so double backward works).


# ---- the ladder's defaults ----

def _columns_per_thread(x):
    """V, the output columns a thread of CUDA's rungs 2 and 3 owns (forward_pack in csrc/upsample/cuda.cu)."""
    return 2 if x.dtype == torch.float64 else 4


def _shrinks(n_in, n_out, mode, scale_factor):
    """Whether make_axis's scale (csrc/upsample/upsample.h), the source step per output step, is over 1."""
    if mode == "align_corners":
        return n_out > 1 and (n_in - 1) / (n_out - 1) > 1
    return (1.0 / scale_factor if scale_factor is not None else n_in / n_out) > 1


def _column_rows(x, size=None, scale_factor=None, align_corners=False, coordinate_mode=None):
    out, _, _, _ = resolve_arguments(x, size, scale_factor, align_corners, coordinate_mode)
    return out[1] % _columns_per_thread(x) == 0


def _staged_rows(x, size=None, scale_factor=None, align_corners=False, coordinate_mode=None):
    """plan_stage in csrc/upsample/cuda.cu: whole packs of columns, no axis shrinks, and the input rows one output
    row reads (up to 3, in the arithmetic type: float64 for float64, else float32) fit in 48 KiB of shared memory."""
    out, mode, scale_h, scale_w = resolve_arguments(x, size, scale_factor, align_corners, coordinate_mode)
    in_h, in_w = x.shape[2:]
    arithmetic_bytes = 8 if x.dtype == torch.float64 else 4
    return (out[1] % _columns_per_thread(x) == 0 and not _shrinks(in_h, out[0], mode, scale_h)
            and not _shrinks(in_w, out[1], mode, scale_w) and min(in_h, 3) * in_w * arithmetic_bytes <= 48 * 1024)


# Which rung the forward runs when none is forced (labops.ladder.DEFAULTS reads this): per device, the first line
# whose dtype and condition hold. tests/test_ladder.py holds the kernels to it. (The inputs are
# upsample_bilinear2d's own arguments.)
LADDER_DEFAULTS = {
    "cpu": (
        Default("row_taps", ALL_DTYPES, "always"),
    ),
    "cuda": (
        Default("staged_rows", ALL_DTYPES, "output width a multiple of V (2 float64 columns, else 4), neither axis "
                "shrinks, and min(H, 3) input rows fit in 48 KiB of shared memory (in float32, or float64 for "
                "float64)", _staged_rows),
        Default("column_rows", ALL_DTYPES, "output width a multiple of V, otherwise", _column_rows),
        Default("textbook", ALL_DTYPES, "output width not a multiple of V"),
    ),
}
