"""Depthwise 2-D convolution: Python face of the compiled depthwise ops.

``depthwise_conv2d(x, weight, bias, stride, padding, dilation)`` is exactly
``F.conv2d(x, weight, bias, stride, padding, dilation, groups=x.shape[1])``:
each input channel is convolved with its own ``m`` filters (the channel
multiplier, ``m = weight.shape[0] // x.shape[1]``); output channel ``oc``
reads input channel ``oc // m``.

Its gradient is three compiled ops (the layer's updateGradInput and
accGradParameters): ``depthwise_conv2d_backward_input`` (a gather),
``depthwise_conv2d_backward_weight`` and ``depthwise_conv2d_backward_bias``
(reductions over N * outH * outW).

The C++ a call reaches: csrc/depthwise/entry.h (``DepthwiseOps``: argument
checks, allocation, dtype dispatch), csrc/depthwise/depthwise.h (the math, one output
element per call), csrc/depthwise/cpu.cpp and csrc/depthwise/cuda.cu (the
launchers), csrc/common/conv_index.h (the convolution index math it shares with
conv2d_mm); the gradient: csrc/depthwise/register.cpp.
"""

import torch

from .._checks import check_floating, check_like, check_tensor, conv_output_size, pair, shape_str

__all__ = ["depthwise_conv2d"]

_OP = "depthwise_conv2d"


def depthwise_conv2d(x: torch.Tensor, weight: torch.Tensor, bias=None, stride=1, padding=0,
                     dilation=1) -> torch.Tensor:
    """Depthwise convolution, ``F.conv2d(x, weight, bias, stride, padding, dilation, groups=C_in)``.

    x: (N, C_in, H, W); weight: (C_in * m, 1, kH, kW) for a channel multiplier m >= 1;
    bias: (C_in * m,) or None; stride, padding, dilation: an int or an (h, w) pair.
    Returns (N, C_in * m, outH, outW) with
    ``outH = (H + 2 * padding_h - dilation_h * (kH - 1) - 1) // stride_h + 1`` (and the same for W).
    A channels_last x gives a channels_last result, as ``F.conv2d`` does; its gradients keep the layout too.

    Example:
        >>> import labops
        >>> x, w = torch.randn(2, 3, 8, 8), torch.randn(6, 1, 3, 3)  # channel multiplier 2
        >>> y = labops.depthwise_conv2d(x, w, stride=2, padding=1)
        >>> y.shape
        torch.Size([2, 6, 4, 4])
        >>> torch.allclose(y, torch.nn.functional.conv2d(x, w, stride=2, padding=1, groups=3), atol=1e-5)
        True
    """
    check_tensor(x, _OP, "x")
    check_tensor(weight, _OP, "weight")
    if bias is not None:
        check_tensor(bias, _OP, "bias")
    # The op checks the rest (csrc/depthwise/entry.h), in eager mode and, through the fakes below,
    # under torch.compile.
    return torch.ops.labops.depthwise_conv2d(x, weight, bias, pair(stride, _OP, "stride"),
                                             pair(padding, _OP, "padding"), pair(dilation, _OP, "dilation"))


# ---- the rules of csrc/depthwise/entry.h, in its words, for the fakes (torch.compile) ----

def _geometry(op, x_size, x_arg, w_size, w_arg, stride, padding, dilation):
    """make_geometry: every size rule, in the C++ order. Returns the output shape [N, C_out, outH, outW]."""
    x_size, w_size = list(x_size), list(w_size)
    if len(x_size) != 4:
        raise ValueError(f"labops.{op}: {x_arg} must be 4-D (N, C_in, H, W), got {len(x_size)}-D")
    if len(w_size) != 4:
        raise ValueError(f"labops.{op}: {w_arg} must be 4-D (C_out, 1, kH, kW), got {len(w_size)}-D")
    for arg, value in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        pair(value, op, arg)
    if any(v < 0 for v in x_size):
        raise ValueError(f"labops.{op}: {x_arg} sizes must be non-negative, got {shape_str(x_size)}")
    n, c_in, h, w = x_size
    c_out, one, kh, kw = w_size
    if c_in < 1:
        raise ValueError(f"labops.{op}: {x_arg} must have at least one channel, got {shape_str(x_size)}")
    if one != 1:
        raise ValueError(f"labops.{op}: {w_arg}.size(1) must be 1 (one input channel per group), got {one}")
    if c_out < 1 or c_out % c_in != 0:
        raise ValueError(f"labops.{op}: {w_arg}.size(0) (C_out) must be a positive multiple of C_in = {c_in}, "
                         f"got {c_out}")
    if kh < 1 or kw < 1:
        raise ValueError(f"labops.{op}: {w_arg} must have a kernel of at least 1x1, got {kh}x{kw}")
    pair(stride, op, "stride", min=1)
    pair(padding, op, "padding", min=0)
    pair(dilation, op, "dilation", min=1)
    out_h = conv_output_size(h, kh, stride[0], padding[0], dilation[0])
    out_w = conv_output_size(w, kw, stride[1], padding[1], dilation[1])
    if out_h < 1 or out_w < 1:
        raise ValueError(
            f"labops.{op}: the dilated kernel must fit in the padded input: kernel {kh}x{kw}, "
            f"dilation {shape_str(dilation)}, input {h}x{w}, padding {shape_str(padding)} give an output of "
            f"{out_h}x{out_w}")
    return [n, c_out, out_h, out_w]


def _is_channels_last(t):
    """is_channels_last: stored channels_last and not also NCHW-contiguous (Note [channels_last])."""
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


def _empty(shape, like, channels_last):
    """A result of `like`'s dtype and device, channels_last when the op keeps that layout."""
    return torch.empty(shape, dtype=like.dtype, device=like.device,
                       memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def _check_grad_output(grad_output, out_shape, op):
    if list(grad_output.shape) != out_shape:
        raise ValueError(f"labops.{op}: grad_output must have the forward output's shape {shape_str(out_shape)}, "
                         f"got {shape_str(grad_output.shape)}")


@torch.library.register_fake("labops::depthwise_conv2d")
def _forward_fake(x, weight, bias, stride, padding, dilation):
    check_floating(x, _OP, "x")
    check_like(weight, x, _OP, "weight", "x")
    out_shape = _geometry(_OP, x.shape, "x", weight.shape, "weight", stride, padding, dilation)
    if bias is not None:
        check_like(bias, x, _OP, "bias", "x")
        if bias.dim() != 1 or bias.shape[0] != out_shape[1]:
            raise ValueError(f"labops.{_OP}: bias must have shape (C_out,) = ({out_shape[1]},), "
                             f"got {shape_str(bias.shape)}")
    return _empty(out_shape, x, _is_channels_last(x))


@torch.library.register_fake("labops::depthwise_conv2d_backward_input")
def _backward_input_fake(grad_output, weight, input_size, stride, padding, dilation):
    op = "depthwise_conv2d_backward_input"
    check_floating(grad_output, op, "grad_output")
    check_like(weight, grad_output, op, "weight", "grad_output")
    out_shape = _geometry(op, input_size, "input_size", weight.shape, "weight", stride, padding, dilation)
    _check_grad_output(grad_output, out_shape, op)
    return _empty(list(input_size), grad_output, _is_channels_last(grad_output))


@torch.library.register_fake("labops::depthwise_conv2d_backward_weight")
def _backward_weight_fake(grad_output, x, weight_size, stride, padding, dilation):
    op = "depthwise_conv2d_backward_weight"
    check_floating(grad_output, op, "grad_output")
    check_like(x, grad_output, op, "x", "grad_output")
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


@torch.library.register_fake("labops::depthwise_conv2d_acc_grad_parameters")
def _acc_grad_parameters_fake(grad_output, x, grad_weight, grad_bias, stride, padding, dilation, scale=1.0):
    op = "depthwise_conv2d_acc_grad_parameters"
    check_like(grad_weight, x, op, "grad_weight", "x")
    check_floating(grad_output, op, "grad_output")
    check_like(x, grad_output, op, "x", "grad_output")
    out_shape = _geometry(op, x.shape, "x", grad_weight.shape, "weight_size", stride, padding, dilation)
    _check_grad_output(grad_output, out_shape, op)
    if grad_bias is not None:
        check_like(grad_bias, x, op, "grad_bias", "x")
        if grad_bias.dim() != 1 or grad_bias.shape[0] != grad_weight.shape[0]:
            raise ValueError(f"labops.{op}: grad_bias must have shape ({grad_weight.shape[0]},) (grad_weight.size(0)), "
                             f"got {shape_str(grad_bias.shape)}")
    return None


# Autograd: a graph node in csrc/depthwise/register.cpp (the gradient is the three compiled backward
# ops, each only when needed).
