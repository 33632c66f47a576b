"""Bilinear upsampling: Python face of the compiled ops in csrc/ops/upsample.h.

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
"""

import math
import numbers

import torch

from .._checks import check_choice, check_floating

__all__ = ["COORDINATE_MODES", "upsample_bilinear2d", "upsample_bilinear2d_output_size"]

COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric")

_OP = "upsample_bilinear2d"


def _pair(value, arg, kind):
    """int/float or a pair of them -> a 2-tuple; `kind` is int or float."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    ok_type = numbers.Integral if kind is int else numbers.Real
    if len(items) != 2 or not all(isinstance(v, ok_type) and not isinstance(v, bool) for v in items):
        what = "an int or a pair of ints" if kind is int else "a number or a pair of numbers"
        raise ValueError(f"labops.{_OP}: {arg} must be {what}, got {value!r}")
    if not all(v > 0 and math.isfinite(v) for v in items):
        raise ValueError(f"labops.{_OP}: {arg} must be positive, got {value!r}")
    return tuple(kind(v) for v in items)


def _check_x(x, op=_OP, arg="x"):
    check_floating(x, op, arg)
    if x.dim() != 4:
        raise ValueError(f"labops.{op}: {arg} must be a 4-D (N, C, H, W) tensor, got {x.dim()}-D with shape "
                         f"{tuple(x.shape)}")
    if x.shape[2] == 0 or x.shape[3] == 0:
        raise ValueError(f"labops.{op}: {arg}'s height and width must be between 1 and 2^24, got {tuple(x.shape)}")


def _resolve(x, size, scale_factor, align_corners, coordinate_mode):
    """The arguments of the compiled op: (output_size, coordinate_mode, scale_h, scale_w)."""
    _check_x(x)
    if (size is None) == (scale_factor is None):
        raise ValueError(f"labops.{_OP}: give exactly one of size and scale_factor, got "
                         f"size={size!r}, scale_factor={scale_factor!r}")
    if coordinate_mode is None:
        coordinate_mode = "align_corners" if align_corners else "half_pixel"
    check_choice(coordinate_mode, COORDINATE_MODES, _OP, "coordinate_mode")
    if size is not None:
        return _pair(size, "size", int), coordinate_mode, None, None
    scales = _pair(scale_factor, "scale_factor", float)
    # F.interpolate's rule: floor(in * scale_factor), computed in double.
    out = tuple(math.floor(float(x.shape[2 + i]) * scales[i]) for i in range(2))
    if min(out) < 1:
        raise ValueError(f"labops.{_OP}: scale_factor {scale_factor!r} must leave at least one output pixel, "
                         f"got output size {out} from input size {tuple(x.shape[2:])}")
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
    return _resolve(x, size, scale_factor, False, None)[0]


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
    output_size, mode, scale_h, scale_w = _resolve(x, size, scale_factor, align_corners, coordinate_mode)
    return torch.ops.labops.upsample_bilinear2d(x, list(output_size), mode, scale_h, scale_w)


# ---- shapes for torch.compile ----

def _check_scale(scale, op, arg):
    if scale is not None and not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"labops.{op}: {arg} must be a positive finite number or None, got {scale}")


@torch.library.register_fake("labops::upsample_bilinear2d")
def _upsample_fake(x, output_size, coordinate_mode, scale_h, scale_w):
    _check_x(x)
    if len(output_size) != 2 or not all(s > 0 for s in output_size):
        raise ValueError(f"labops.{_OP}: output_size must be two positive integers (out_h, out_w), "
                         f"got {list(output_size)}")
    check_choice(coordinate_mode, COORDINATE_MODES, _OP, "coordinate_mode")
    _check_scale(scale_h, _OP, "scale_h")
    _check_scale(scale_w, _OP, "scale_w")
    return x.new_empty((x.shape[0], x.shape[1], *output_size))


@torch.library.register_fake("labops::upsample_bilinear2d_backward")
def _upsample_backward_fake(grad_output, input_size, coordinate_mode, scale_h, scale_w, deterministic=True):
    op = "upsample_bilinear2d_backward"
    _check_x(grad_output, op, "grad_output")
    if len(input_size) != 4:
        raise ValueError(f"labops.{op}: input_size must have 4 entries (N, C, H, W), got {list(input_size)}")
    check_choice(coordinate_mode, COORDINATE_MODES, op, "coordinate_mode")
    _check_scale(scale_h, op, "scale_h")
    _check_scale(scale_w, op, "scale_w")
    return grad_output.new_empty(tuple(input_size))


# Autograd: a torch::autograd::Function in csrc/autograd.cpp (the backward is the compiled deterministic
# gather; the backward op's own gradient is the forward, so double backward works).
