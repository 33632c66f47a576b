"""Depthwise 2-D convolution: Python face of the compiled ops in csrc/ops/depthwise.h.

``depthwise_conv2d(x, weight, bias, stride, padding, dilation)`` is exactly
``F.conv2d(x, weight, bias, stride, padding, dilation, groups=x.shape[1])``:
each input channel is convolved with its own ``m`` filters (the channel
multiplier, ``m = weight.shape[0] // x.shape[1]``); output channel ``oc``
reads input channel ``oc // m``.

Its gradient is three compiled ops (the layer's updateGradInput and
accGradParameters): ``depthwise_conv2d_backward_input`` (a gather),
``depthwise_conv2d_backward_weight`` and ``depthwise_conv2d_backward_bias``
(reductions over N * outH * outW).
"""

import torch

from .._checks import check_floating

__all__ = ["depthwise_conv2d"]

_OP = "depthwise_conv2d"


def _pair(value, op, arg):
    """int or pair of ints -> [a, b] (a list: what an ``int[2]`` schema argument takes)."""
    if isinstance(value, bool):
        raise TypeError(f"labops.{op}: {arg} must be an int or a pair of ints, got {value!r}")
    if isinstance(value, int):
        return [value, value]
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"labops.{op}: {arg} must be an int or a pair of ints, got {value!r}") from None
    if len(items) != 2:
        raise ValueError(f"labops.{op}: {arg} must have 2 entries (h, w), got {len(items)}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise TypeError(f"labops.{op}: {arg} must be an int or a pair of ints, got {value!r}")
    return items


def _output_size(size, k, s, p, d):
    room = size + 2 * p - d * (k - 1) - 1
    return 0 if room < 0 else room // s + 1


def _geometry(op, x_size, x_arg, w_size, w_arg, stride, padding, dilation):
    """The same rules, in the same words, as make_geometry in csrc/ops/depthwise_ops.h.

    Returns the output shape (N, C_out, outH, outW).
    """
    x_size, w_size = list(x_size), list(w_size)
    if len(x_size) != 4:
        raise ValueError(f"labops.{op}: {x_arg} must be 4-D (N, C_in, H, W), got {len(x_size)}-D")
    if len(w_size) != 4:
        raise ValueError(f"labops.{op}: {w_arg} must be 4-D (C_out, 1, kH, kW), got {len(w_size)}-D")
    for name, v in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        if len(v) != 2:
            raise ValueError(f"labops.{op}: {name} must have 2 entries (h, w), got {len(v)}")
    if any(v < 0 for v in x_size):
        raise ValueError(f"labops.{op}: {x_arg} sizes must be non-negative, got {x_size}")
    n, c_in, h, w = x_size
    c_out, one, kh, kw = w_size
    if c_in < 1:
        raise ValueError(f"labops.{op}: {x_arg} must have at least one channel, got {x_size}")
    if one != 1:
        raise ValueError(f"labops.{op}: {w_arg}.size(1) must be 1 (one input channel per group), got {one}")
    if c_out < 1 or c_out % c_in != 0:
        raise ValueError(f"labops.{op}: {w_arg}.size(0) (C_out) must be a positive multiple of C_in = {c_in}, "
                         f"got {c_out}")
    if kh < 1 or kw < 1:
        raise ValueError(f"labops.{op}: {w_arg} must have a kernel of at least 1x1, got {kh}x{kw}")
    if min(stride) < 1:
        raise ValueError(f"labops.{op}: stride must be positive, got {list(stride)}")
    if min(padding) < 0:
        raise ValueError(f"labops.{op}: padding must be non-negative, got {list(padding)}")
    if min(dilation) < 1:
        raise ValueError(f"labops.{op}: dilation must be >= 1, got {list(dilation)}")
    out_h = _output_size(h, kh, stride[0], padding[0], dilation[0])
    out_w = _output_size(w, kw, stride[1], padding[1], dilation[1])
    if out_h < 1 or out_w < 1:
        raise ValueError(
            f"labops.{op}: the dilated kernel must fit in the padded input: kernel {kh}x{kw}, "
            f"dilation {list(dilation)}, input {h}x{w}, padding {list(padding)} give an output of "
            f"{out_h}x{out_w}")
    return [n, c_out, out_h, out_w]


def _check_like(t, ref, op, arg, ref_arg):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"labops.{op}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != ref.dtype:
        raise ValueError(f"labops.{op}: {arg} must have the dtype of {ref_arg} ({ref.dtype}), got {t.dtype}")
    if t.device != ref.device:
        raise ValueError(f"labops.{op}: {arg} must be on the device of {ref_arg} ({ref.device}), got {t.device}")


def _check_forward(x, weight, bias, stride, padding, dilation):
    check_floating(x, _OP, "x")
    _check_like(weight, x, _OP, "weight", "x")
    out_shape = _geometry(_OP, x.shape, "x", weight.shape, "weight", stride, padding, dilation)
    if bias is not None:
        _check_like(bias, x, _OP, "bias", "x")
        if bias.dim() != 1 or bias.shape[0] != out_shape[1]:
            raise ValueError(f"labops.{_OP}: bias must have shape (C_out,) = ({out_shape[1]},), "
                             f"got {list(bias.shape)}")
    return out_shape


def _check_grad_output(grad_output, out_shape, op):
    if list(grad_output.shape) != out_shape:
        raise ValueError(f"labops.{op}: grad_output must have the forward output's shape {out_shape}, "
                         f"got {list(grad_output.shape)}")


def depthwise_conv2d(x: torch.Tensor, weight: torch.Tensor, bias=None, stride=1, padding=0,
                     dilation=1) -> torch.Tensor:
    """Depthwise convolution, ``F.conv2d(x, weight, bias, stride, padding, dilation, groups=C_in)``.

    x: (N, C_in, H, W); weight: (C_in * m, 1, kH, kW) for a channel multiplier m >= 1;
    bias: (C_in * m,) or None; stride, padding, dilation: an int or an (h, w) pair.
    Returns (N, C_in * m, outH, outW) with
    ``outH = (H + 2 * padding_h - dilation_h * (kH - 1) - 1) // stride_h + 1`` (and the same for W).

    Example:
        >>> import labops
        >>> x, w = torch.randn(2, 3, 8, 8), torch.randn(6, 1, 3, 3)  # channel multiplier 2
        >>> y = labops.depthwise_conv2d(x, w, stride=2, padding=1)
        >>> y.shape
        torch.Size([2, 6, 4, 4])
        >>> torch.allclose(y, torch.nn.functional.conv2d(x, w, stride=2, padding=1, groups=3), atol=1e-5)
        True
    """
    stride = _pair(stride, _OP, "stride")
    padding = _pair(padding, _OP, "padding")
    dilation = _pair(dilation, _OP, "dilation")
    _check_forward(x, weight, bias, stride, padding, dilation)
    return torch.ops.labops.depthwise_conv2d(x, weight, bias, stride, padding, dilation)


# ---- shapes for torch.compile (the same checks as the kernels, no computation) ----

@torch.library.register_fake("labops::depthwise_conv2d")
def _forward_fake(x, weight, bias, stride, padding, dilation):
    out_shape = _check_forward(x, weight, bias, stride, padding, dilation)
    return x.new_empty(out_shape)


@torch.library.register_fake("labops::depthwise_conv2d_backward_input")
def _backward_input_fake(grad_output, weight, input_size, stride, padding, dilation):
    op = "depthwise_conv2d_backward_input"
    check_floating(grad_output, op, "grad_output")
    _check_like(weight, grad_output, op, "weight", "grad_output")
    out_shape = _geometry(op, input_size, "input_size", weight.shape, "weight", stride, padding, dilation)
    _check_grad_output(grad_output, out_shape, op)
    return grad_output.new_empty(list(input_size))


@torch.library.register_fake("labops::depthwise_conv2d_backward_weight")
def _backward_weight_fake(grad_output, x, weight_size, stride, padding, dilation):
    op = "depthwise_conv2d_backward_weight"
    check_floating(grad_output, op, "grad_output")
    _check_like(x, grad_output, op, "x", "grad_output")
    out_shape = _geometry(op, x.shape, "x", weight_size, "weight_size", stride, padding, dilation)
    _check_grad_output(grad_output, out_shape, op)
    return grad_output.new_empty(list(weight_size))


@torch.library.register_fake("labops::depthwise_conv2d_backward_bias")
def _backward_bias_fake(grad_output):
    op = "depthwise_conv2d_backward_bias"
    check_floating(grad_output, op, "grad_output")
    if grad_output.dim() != 4:
        raise ValueError(f"labops.{op}: grad_output must be 4-D (N, C_out, outH, outW), got {grad_output.dim()}-D")
    return grad_output.new_empty([grad_output.shape[1]])


# Autograd: a torch::autograd::Function in csrc/autograd.cpp (the gradient is the three compiled backward
# ops, each only when needed).
