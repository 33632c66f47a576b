"""im2col, col2im and conv2d_mm (THNN's SpatialConvolutionMM): Python face of
the compiled conv2d_mm ops.

The layer contract maps onto the ops like this:
    updateOutput       -> conv2d_mm(x, weight, bias, ...)
    updateGradInput    -> conv2d_mm_backward_input(grad_output, weight, x.shape, ...)
    accGradParameters  -> conv2d_mm_acc_grad_parameters(grad_output, x, grad_weight, grad_bias, ..., scale)
                          (accumulates into grad_weight / grad_bias, in place)
    autograd's gradient -> conv2d_mm_backward_weight(grad_output, x, weight.shape, ...)
                          (accGradParameters at scale 1 into new tensors: (grad_weight, grad_bias))

The C++ a call reaches: csrc/conv2d_mm/entry.h (``Conv2dMMOps``: argument
checks, the batch chunks, the GEMMs through ATen), csrc/conv2d_mm/conv2d_mm.h (the
im2col / col2im math, one element per call), csrc/conv2d_mm/cpu.cpp and
csrc/conv2d_mm/cuda.cu (the launchers), csrc/common/conv_index.h (the
convolution index math it shares with depthwise); the gradient: csrc/conv2d_mm/register.cpp.
"""

import torch

from .._checks import check_floating, check_like, check_tensor, conv_output_size, pair, shape_str

__all__ = ["col2im", "conv2d_mm", "im2col"]

# The ops' OpOverloads, looked up once: `torch.ops.labops.im2col(...)` would walk three attributes
# and resolve the overload on every call, a measurable share of a tiny call's host time
# (tools/host_time.py).
_im2col = torch.ops.labops.im2col.default
_col2im = torch.ops.labops.col2im.default


def im2col(x, kernel_size, stride=1, padding=0, dilation=1):
    """Unfold every kernel_size window of x into a column, like ``F.unfold``.

    x: (N, C, H, W) or (C, H, W). Returns (N, C*kH*kW, L) (or (C*kH*kW, L)),
    L = out_h * out_w, rows ordered (c, kh, kw). Zero padding gives zeros.

    Args:
        x: (N, C, H, W) or (C, H, W).
        kernel_size, stride, padding, dilation: an int or an (h, w) pair.

    Example:
        >>> import labops
        >>> labops.im2col(torch.arange(9.0).reshape(1, 1, 3, 3), 2)
        tensor([[[0., 1., 3., 4.],
                 [1., 2., 4., 5.],
                 [3., 4., 6., 7.],
                 [4., 5., 7., 8.]]])
    """
    op = "im2col"
    check_tensor(x, op, "x")
    return _im2col(x, *_window(op, kernel_size, stride, padding, dilation))


def col2im(cols, output_size, kernel_size, stride=1, padding=0, dilation=1):
    """The adjoint of im2col, like ``F.fold``: every image pixel gets the SUM
    of the column entries that were copied from it. It is not im2col's
    inverse: a pixel seen by several windows comes back multiplied.

    cols: (N, C*kH*kW, L) or (C*kH*kW, L); returns (N, C, H, W) or (C, H, W)
    with (H, W) = output_size.

    Args:
        cols: (N, C*kH*kW, L) or (C*kH*kW, L).
        output_size: (H, W) of the image.
        kernel_size, stride, padding, dilation: an int or an (h, w) pair, as for im2col.

    Example:
        >>> import labops
        >>> cols = labops.im2col(torch.ones(1, 1, 3, 3), 2)
        >>> labops.col2im(cols, (3, 3), 2)[0, 0]  # times the number of windows covering each pixel
        tensor([[1., 2., 1.],
                [2., 4., 2.],
                [1., 2., 1.]])
    """
    op = "col2im"
    check_tensor(cols, op, "cols")
    return _col2im(cols, pair(output_size, op, "output_size"), *_window(op, kernel_size, stride, padding, dilation))


def conv2d_mm(x, weight, bias=None, stride=1, padding=0, dilation=1):
    """``F.conv2d`` (groups=1) computed as THNN's SpatialConvolutionMM:
    columns = im2col(x), out = weight.view(O, -1) @ columns + bias.

    x: (N, C, H, W) or (C, H, W); weight: (O, C, kH, kW); bias: (O,) or None.

    Returns (N, O, out_h, out_w) (or (O, out_h, out_w)); stride, padding, dilation: an int
    or an (h, w) pair.

    Example:
        >>> import labops
        >>> x, w, b = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
        >>> y = labops.conv2d_mm(x, w, b, padding=1)
        >>> y.shape
        torch.Size([2, 4, 8, 8])
        >>> torch.allclose(y, torch.nn.functional.conv2d(x, w, b, padding=1), atol=1e-4)
        True
    """
    op = "conv2d_mm"
    check_tensor(x, op, "x")
    check_tensor(weight, op, "weight")
    if bias is not None:
        check_tensor(bias, op, "bias")
    return torch.ops.labops.conv2d_mm(x, weight, bias, *_window(op, None, stride, padding, dilation))


def _window(op, kernel_size, stride, padding, dilation):
    """The window arguments as the schema takes them: [h, w] lists (kernel_size left out when None).

    Only normalised here: the op checks their values (csrc/conv2d_mm/entry.h, and _params below).
    """
    window = [pair(stride, op, "stride"), pair(padding, op, "padding"), pair(dilation, op, "dilation")]
    return window if kernel_size is None else [pair(kernel_size, op, "kernel_size"), *window]


# ---- the rules of csrc/conv2d_mm/entry.h, in its words, for the fakes (torch.compile) ----

def _params(op, kernel_size, stride, padding, dilation):
    """make_params: each argument two entries, then kernel_size, stride, dilation >= 1 and padding >= 0."""
    for value, arg in ((kernel_size, "kernel_size"), (stride, "stride"), (padding, "padding"),
                       (dilation, "dilation")):
        pair(value, op, arg)
    for value, arg, least in ((kernel_size, "kernel_size", 1), (stride, "stride", 1), (dilation, "dilation", 1),
                              (padding, "padding", 0)):
        pair(value, op, arg, min=least)


def _out_size(op, kernel_arg, size, k, s, p, d):
    """make_shape: (out_h, out_w) of a window sliding over `size` = (H, W); the kernel must fit."""
    extent = [d[i] * (k[i] - 1) + 1 for i in range(2)]
    padded = [size[i] + 2 * p[i] for i in range(2)]
    if extent[0] > padded[0] or extent[1] > padded[1]:
        raise ValueError(
            f"labops.{op}: {kernel_arg} ({k[0]}, {k[1]}) with dilation ({d[0]}, {d[1]}) spans "
            f"({extent[0]}, {extent[1]}) pixels: must not be larger than the padded input "
            f"({padded[0]}, {padded[1]})"
        )
    return [conv_output_size(size[i], k[i], s[i], p[i], d[i]) for i in range(2)]


def _check_image(x, op, arg):
    check_floating(x, op, arg)
    if x.dim() not in (3, 4):
        raise ValueError(f"labops.{op}: {arg} must be 3-D (C, H, W) or 4-D (N, C, H, W), got {x.dim()}-D "
                         f"of shape {shape_str(x.shape)}")


def _conv_out(op, input_size, weight_size, s, p, d, weight_arg="weight"):
    """conv_shape: the output shape ([N,] O, out_h, out_w) of `input_size` convolved with a weight of
    `weight_size` (the op's argument `weight_arg`, a tensor's shape or a list)."""
    weight_size = list(weight_size)
    if len(weight_size) != 4:
        raise ValueError(f"labops.{op}: {weight_arg} must be 4-D (out_channels, in_channels, kH, kW), "
                         f"got {len(weight_size)}-D of shape {shape_str(weight_size)}")
    c, h, w = input_size[-3:]
    if weight_size[1] != c:
        raise ValueError(f"labops.{op}: {weight_arg}.size(1) (in_channels) must equal the input's channels "
                         f"{c}, got {weight_arg} of shape {shape_str(weight_size)} for input of shape "
                         f"{shape_str(input_size)}")
    k = weight_size[2:]
    if k[0] < 1 or k[1] < 1:
        raise ValueError(f"labops.{op}: {weight_arg} must have a kernel of at least 1x1, got shape "
                         f"{shape_str(weight_size)}")
    _params(op, k, s, p, d)
    return [*input_size[:-3], weight_size[0], *_out_size(op, weight_arg, (h, w), k, s, p, d)]


def _check_grad_output(grad_output, expected, op):
    if list(grad_output.shape) != list(expected):
        raise ValueError(f"labops.{op}: grad_output must have the output's shape {shape_str(expected)}, got "
                         f"{shape_str(grad_output.shape)}")


def _check_bias(bias, ref, out_channels, op, arg, rule):
    if bias is None:
        return
    check_like(bias, ref, op, arg, "x")
    if bias.dim() != 1 or bias.shape[0] != out_channels:
        raise ValueError(f"labops.{op}: {arg} must have shape ({out_channels},) ({rule}), "
                         f"got {shape_str(bias.shape)}")


@torch.library.register_fake("labops::im2col")
def _im2col_fake(x, kernel_size, stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    _check_image(x, "im2col", "x")
    _params("im2col", kernel_size, stride, padding, dilation)
    oh, ow = _out_size("im2col", "kernel_size", x.shape[-2:], kernel_size, stride, padding, dilation)
    return x.new_empty((*x.shape[:-3], x.shape[-3] * kernel_size[0] * kernel_size[1], oh * ow))


@torch.library.register_fake("labops::col2im")
def _col2im_fake(cols, output_size, kernel_size, stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    op = "col2im"
    check_floating(cols, op, "cols")
    if cols.dim() not in (2, 3):
        raise ValueError(f"labops.col2im: cols must be 2-D (C*kH*kW, L) or 3-D (N, C*kH*kW, L), got "
                         f"{cols.dim()}-D of shape {shape_str(cols.shape)}")
    _params(op, kernel_size, stride, padding, dilation)
    pair(output_size, op, "output_size")
    if min(output_size) < 1:
        raise ValueError(f"labops.col2im: output_size must be >= 1, got {shape_str(output_size)}")
    rows_dim = cols.dim() - 2
    area = kernel_size[0] * kernel_size[1]
    if cols.shape[rows_dim] % area != 0:
        raise ValueError(f"labops.col2im: cols.size({rows_dim}) must be divisible by kernel_h * kernel_w = "
                         f"{area}, got {cols.shape[rows_dim]}")
    oh, ow = _out_size(op, "kernel_size", output_size, kernel_size, stride, padding, dilation)
    if cols.shape[-1] != oh * ow:
        raise ValueError(f"labops.col2im: cols.size({rows_dim + 1}) must equal the number of blocks {oh} x {ow} = "
                         f"{oh * ow} that output_size {shape_str(output_size)} gives, got {cols.shape[-1]}")
    return cols.new_empty((*cols.shape[:-2], cols.shape[-2] // area, *output_size))


@torch.library.register_fake("labops::conv2d_mm")
def _conv2d_mm_fake(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    op = "conv2d_mm"
    _check_image(x, op, "x")
    check_floating(weight, op, "weight")
    out_shape = _conv_out(op, list(x.shape), weight.shape, stride, padding, dilation)
    check_like(weight, x, op, "weight", "x")
    _check_bias(bias, x, weight.shape[0], op, "bias", "out_channels = weight.size(0)")
    return x.new_empty(out_shape)


@torch.library.register_fake("labops::conv2d_mm_backward_input")
def _conv2d_mm_backward_input_fake(grad_output, weight, input_size, stride, padding, dilation):
    op = "conv2d_mm_backward_input"
    check_floating(grad_output, op, "grad_output")
    if len(input_size) not in (3, 4):
        raise ValueError(f"labops.{op}: input_size must have 3 (C, H, W) or 4 (N, C, H, W) values, got "
                         f"{shape_str(input_size)}")
    if any(v < 0 for v in input_size):
        raise ValueError(f"labops.{op}: input_size must be >= 0, got {shape_str(input_size)}")
    check_floating(weight, op, "weight")
    expected = _conv_out(op, list(input_size), weight.shape, stride, padding, dilation)
    check_like(weight, grad_output, op, "weight", "grad_output")
    _check_grad_output(grad_output, expected, op)
    return grad_output.new_empty(list(input_size))


@torch.library.register_fake("labops::conv2d_mm_acc_grad_parameters")
def _conv2d_mm_acc_grad_parameters_fake(grad_output, x, grad_weight, grad_bias, stride, padding, dilation,
                                        scale=1.0):
    op = "conv2d_mm_acc_grad_parameters"
    _check_image(x, op, "x")
    check_floating(grad_output, op, "grad_output")
    check_like(grad_output, x, op, "grad_output", "x")
    check_like(grad_weight, x, op, "grad_weight", "x")
    expected = _conv_out(op, list(x.shape), grad_weight.shape, stride, padding, dilation, "grad_weight")
    _check_grad_output(grad_output, expected, op)
    _check_bias(grad_bias, x, grad_weight.shape[0], op, "grad_bias", "grad_weight.size(0)")
    return None


@torch.library.register_fake("labops::conv2d_mm_backward_weight")
def _conv2d_mm_backward_weight_fake(grad_output, x, weight_size, stride, padding, dilation):
    op = "conv2d_mm_backward_weight"
    _check_image(x, op, "x")
    check_floating(grad_output, op, "grad_output")
    check_like(grad_output, x, op, "grad_output", "x")
    if any(v < 0 for v in weight_size):
        raise ValueError(f"labops.{op}: weight_size must be >= 0, got {shape_str(weight_size)}")
    expected = _conv_out(op, list(x.shape), weight_size, stride, padding, dilation, "weight_size")
    _check_grad_output(grad_output, expected, op)
    return grad_output.new_empty(list(weight_size)), grad_output.new_empty((weight_size[0],))


# Autograd: csrc/conv2d_mm/register.cpp (im2col and col2im build their graph nodes by hand and are each other's gradient;
# conv2d_mm's is conv2d_mm_backward_input and conv2d_mm_backward_weight, accGradParameters into new tensors).
