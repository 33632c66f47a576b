"""im2col, col2im and conv2d_mm (THNN's SpatialConvolutionMM): Python face of
the compiled ops in csrc/ops/im2col.h and csrc/ops/conv2d_mm_ops.h.

The layer contract maps onto the ops like this:
    updateOutput       -> conv2d_mm(x, weight, bias, ...)
    updateGradInput    -> conv2d_mm_backward_input(grad_output, weight, x.shape, ...)
    accGradParameters  -> conv2d_mm_acc_grad_parameters(grad_output, x, grad_weight, grad_bias, ..., scale)
                          (accumulates into grad_weight / grad_bias, in place)
"""

import torch

from .._checks import check_floating

__all__ = ["col2im", "conv2d_mm", "im2col"]


def _is_int(v):
    # torch.SymInt: sizes under torch.compile's dynamic shapes.
    return isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool)


def _pair(value, op, arg):
    if _is_int(value):
        return (value, value)
    try:
        pair = tuple(value)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(_is_int(v) for v in pair):
        raise ValueError(f"labops.{op}: {arg} must be an int or a pair of ints, got {value!r}")
    return pair


def _params(op, kernel_size, stride, padding, dilation):
    """Normalize to pairs and check the rules the C++ ops check."""
    k = _pair(kernel_size, op, "kernel_size")
    s, p, d = _pair(stride, op, "stride"), _pair(padding, op, "padding"), _pair(dilation, op, "dilation")
    if min(k) < 1:
        raise ValueError(f"labops.{op}: kernel_size must be >= 1, got {list(k)}")
    if min(s) < 1:
        raise ValueError(f"labops.{op}: stride must be >= 1, got {list(s)}")
    if min(d) < 1:
        raise ValueError(f"labops.{op}: dilation must be >= 1, got {list(d)}")
    if min(p) < 0:
        raise ValueError(f"labops.{op}: padding must be >= 0, got {list(p)}")
    return k, s, p, d


def _out_size(op, kernel_arg, size, k, s, p, d):
    """(out_h, out_w) of a window sliding over (H, W); the kernel must fit the padded input."""
    extent = [d[i] * (k[i] - 1) + 1 for i in range(2)]
    padded = [size[i] + 2 * p[i] for i in range(2)]
    if extent[0] > padded[0] or extent[1] > padded[1]:
        raise ValueError(
            f"labops.{op}: {kernel_arg} ({k[0]}, {k[1]}) with dilation ({d[0]}, {d[1]}) spans "
            f"({extent[0]}, {extent[1]}) pixels: must not be larger than the padded input "
            f"({padded[0]}, {padded[1]})"
        )
    return tuple((padded[i] - extent[i]) // s[i] + 1 for i in range(2))


def _check_image(x, op, arg):
    check_floating(x, op, arg)
    if x.dim() not in (3, 4):
        raise ValueError(f"labops.{op}: {arg} must be 3-D (C, H, W) or 4-D (N, C, H, W), got {x.dim()}-D "
                         f"of shape {tuple(x.shape)}")


def _check_like(t, ref, op, arg, ref_arg):
    if t.dtype != ref.dtype:
        raise ValueError(f"labops.{op}: {arg} must have the dtype of {ref_arg} ({ref.dtype}), got {t.dtype}")
    if t.device != ref.device:
        raise ValueError(f"labops.{op}: {arg} must be on the device of {ref_arg} ({ref.device}), got {t.device}")


def _conv_out(op, input_size, weight, s, p, d, weight_arg="weight"):
    """Output (N?, O, out_h, out_w) of a convolution of `input_size` with `weight`."""
    check_floating(weight, op, weight_arg)
    if weight.dim() != 4:
        raise ValueError(f"labops.{op}: {weight_arg} must be 4-D (out_channels, in_channels, kH, kW), "
                         f"got {weight.dim()}-D of shape {tuple(weight.shape)}")
    c, h, w = input_size[-3:]
    if weight.shape[1] != c:
        raise ValueError(f"labops.{op}: {weight_arg}.size(1) (in_channels) must equal the input's channels "
                         f"{c}, got {weight_arg} of shape {tuple(weight.shape)} for input of shape "
                         f"{tuple(input_size)}")
    k = (weight.shape[2], weight.shape[3])
    _params(op, k, s, p, d)
    oh, ow = _out_size(op, weight_arg, (h, w), k, s, p, d)
    return (*input_size[:-3], weight.shape[0], oh, ow)


def _check_bias(bias, x, out_channels, op, arg="bias"):
    if bias is None:
        return
    check_floating(bias, op, arg)
    _check_like(bias, x, op, arg, "x")
    if bias.dim() != 1 or bias.shape[0] != out_channels:
        raise ValueError(f"labops.{op}: {arg} must have shape ({out_channels},) (out_channels = weight.size(0)), "
                         f"got {tuple(bias.shape)}")


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
    _check_image(x, "im2col", "x")
    k, s, p, d = _params("im2col", kernel_size, stride, padding, dilation)
    _out_size("im2col", "kernel_size", x.shape[-2:], k, s, p, d)
    return torch.ops.labops.im2col(x, k, s, p, d)


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
    _check_col2im(cols, output_size, kernel_size, stride, padding, dilation)
    o = _pair(output_size, "col2im", "output_size")
    k, s, p, d = _params("col2im", kernel_size, stride, padding, dilation)
    return torch.ops.labops.col2im(cols, o, k, s, p, d)


def _check_col2im(cols, output_size, kernel_size, stride, padding, dilation):
    check_floating(cols, "col2im", "cols")
    if cols.dim() not in (2, 3):
        raise ValueError(f"labops.col2im: cols must be 2-D (C*kH*kW, L) or 3-D (N, C*kH*kW, L), got "
                         f"{cols.dim()}-D of shape {tuple(cols.shape)}")
    o = _pair(output_size, "col2im", "output_size")
    k, s, p, d = _params("col2im", kernel_size, stride, padding, dilation)
    if min(o) < 1:
        raise ValueError(f"labops.col2im: output_size must be >= 1, got {list(o)}")
    rows_dim = cols.dim() - 2
    area = k[0] * k[1]
    if cols.shape[rows_dim] % area != 0:
        raise ValueError(f"labops.col2im: cols.size({rows_dim}) must be divisible by kernel_h * kernel_w = "
                         f"{area}, got {cols.shape[rows_dim]}")
    oh, ow = _out_size("col2im", "kernel_size", o, k, s, p, d)
    if cols.shape[-1] != oh * ow:
        raise ValueError(f"labops.col2im: cols.size({rows_dim + 1}) must equal the number of blocks {oh} x {ow} = "
                         f"{oh * ow} that output_size {list(o)} gives, got {cols.shape[-1]}")
    return o


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
    _check_image(x, "conv2d_mm", "x")
    s, p, d = (_pair(v, "conv2d_mm", a) for v, a in ((stride, "stride"), (padding, "padding"), (dilation, "dilation")))
    _conv_out("conv2d_mm", tuple(x.shape), weight, s, p, d)
    _check_like(weight, x, "conv2d_mm", "weight", "x")
    _check_bias(bias, x, weight.shape[0], "conv2d_mm")
    return torch.ops.labops.conv2d_mm(x, weight, bias, s, p, d)


# ---- shapes for torch.compile (the same checks, no data) ----

@torch.library.register_fake("labops::im2col")
def _im2col_fake(x, kernel_size, stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    _check_image(x, "im2col", "x")
    k, s, p, d = _params("im2col", kernel_size, stride, padding, dilation)
    oh, ow = _out_size("im2col", "kernel_size", x.shape[-2:], k, s, p, d)
    return x.new_empty((*x.shape[:-3], x.shape[-3] * k[0] * k[1], oh * ow))


@torch.library.register_fake("labops::col2im")
def _col2im_fake(cols, output_size, kernel_size, stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    o = _check_col2im(cols, output_size, kernel_size, stride, padding, dilation)
    rows = cols.shape[-2] // (kernel_size[0] * kernel_size[1])
    return cols.new_empty((*cols.shape[:-2], rows, o[0], o[1]))


@torch.library.register_fake("labops::conv2d_mm")
def _conv2d_mm_fake(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    _check_image(x, "conv2d_mm", "x")
    out_shape = _conv_out("conv2d_mm", tuple(x.shape), weight, stride, padding, dilation)
    _check_like(weight, x, "conv2d_mm", "weight", "x")
    _check_bias(bias, x, weight.shape[0], "conv2d_mm")
    return x.new_empty(out_shape)


@torch.library.register_fake("labops::conv2d_mm_backward_input")
def _conv2d_mm_backward_input_fake(grad_output, weight, input_size, stride, padding, dilation):
    op = "conv2d_mm_backward_input"
    check_floating(grad_output, op, "grad_output")
    if len(input_size) not in (3, 4):
        raise ValueError(f"labops.{op}: input_size must have 3 (C, H, W) or 4 (N, C, H, W) values, got "
                         f"{list(input_size)}")
    expected = _conv_out(op, tuple(input_size), weight, stride, padding, dilation)
    _check_like(weight, grad_output, op, "weight", "grad_output")
    if tuple(grad_output.shape) != tuple(expected):
        raise ValueError(f"labops.{op}: grad_output must have the output's shape {list(expected)}, got "
                         f"{list(grad_output.shape)}")
    return grad_output.new_empty(tuple(input_size))


@torch.library.register_fake("labops::conv2d_mm_acc_grad_parameters")
def _conv2d_mm_acc_grad_parameters_fake(grad_output, x, grad_weight, grad_bias, stride, padding, dilation,
                                        scale=1.0):
    op = "conv2d_mm_acc_grad_parameters"
    _check_image(x, op, "x")
    check_floating(grad_output, op, "grad_output")
    _check_like(grad_output, x, op, "grad_output", "x")
    _check_like(grad_weight, x, op, "grad_weight", "x")
    expected = _conv_out(op, tuple(x.shape), grad_weight, stride, padding, dilation, "grad_weight")
    if tuple(grad_output.shape) != tuple(expected):
        raise ValueError(f"labops.{op}: grad_output must have the output's shape {list(expected)}, got "
                         f"{list(grad_output.shape)}")
    if grad_bias is not None:
        _check_like(grad_bias, x, op, "grad_bias", "x")
        if grad_bias.dim() != 1 or grad_bias.shape[0] != grad_weight.shape[0]:
            raise ValueError(f"labops.{op}: grad_bias must have shape ({grad_weight.shape[0]},) "
                             f"(grad_weight.size(0)), got {tuple(grad_bias.shape)}")
    return None


# Autograd: a torch::autograd::Function in csrc/autograd.cpp (im2col and col2im are each other's gradient;
# conv2d_mm's is conv2d_mm_backward_input and conv2d_mm_acc_grad_parameters into zeroed buffers).
