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

import functools

import torch

from .._checks import check_tensor, pair
from ..ladder import ALL_DTYPES, Default, meta_output

__all__ = ["col2im", "conv2d_mm", "im2col"]

# The ops' OpOverloads, looked up once: `torch.ops.labops.im2col(...)` would walk three attributes
# and resolve the overload on every call, a measurable share of a tiny call's host time
# (tools/host_time.py).
_im2col = torch.ops.labops.im2col.default
_col2im = torch.ops.labops.col2im.default
_conv2d_mm = torch.ops.labops.conv2d_mm.default


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
    return _conv2d_mm(x, weight, bias, *_window(op, None, stride, padding, dilation))


def _window(op, kernel_size, stride, padding, dilation):
    """The window arguments as the schema takes them: [h, w] lists (kernel_size left out when None).

    Only normalised here: the op checks their values (csrc/conv2d_mm/entry.h).
    """
    window = [pair(stride, op, "stride"), pair(padding, op, "padding"), pair(dilation, op, "dilation")]
    return window if kernel_size is None else [pair(kernel_size, op, "kernel_size"), *window]


# Fake tensors (torch.compile): no Python fake. The Meta kernels of csrc/conv2d_mm/register.cpp run the
# C++ rules and shapes of csrc/conv2d_mm/entry.h, so a bad argument raises the same error compiled or not.

# Autograd: csrc/conv2d_mm/register.cpp (im2col and col2im build their graph nodes by hand and are each other's gradient;
# conv2d_mm's is conv2d_mm_backward_input and conv2d_mm_backward_weight, accGradParameters into new tensors).


# ---- the ladder: which rung the forward runs when none is forced ----------------------------------------------

# Which rung the forward runs when none is forced (labops.ladder.DEFAULTS reads this): per device, the first
# line whose dtype and condition hold. tests/test_ladder.py holds the kernels to it. One GEMM rung on the CPU,
# whichever library multiplies (forward_ladder in csrc/conv2d_mm/entry.h says why).
LADDER_DEFAULTS = {
    "cpu": (
        Default("im2col_gemm", ALL_DTYPES, "always (the GEMM is oneDNN's for float32 ones of 2^23 multiply-adds "
                "or more where this CPU runs it, else ATen's: Note [oneDNN GEMMs])"),
    ),
    "cuda": (
        Default("wgmma", ("float16", "bfloat16"), "an sm_90 GPU (H100, H200) with labops built for sm_90a, C a "
                "multiple of 8 and the sizes within its 32-bit counts",
                holds=lambda x, weight, *rest: _hopper(x.device)
                and _tensor_cores_take(x, weight, rest, channel_multiple=8)),
        Default("wgmma", ("float32",), "TF32 allowed for convolutions, an sm_90 GPU with labops built for "
                "sm_90a, C a multiple of 4 and the sizes within its 32-bit counts",
                holds=lambda x, weight, *rest: _hopper(x.device) and _tf32_convolutions()
                and _tensor_cores_take(x, weight, rest, channel_multiple=4)),
        Default("tensor_cores", ("float16", "bfloat16"), "C a multiple of 8 and the sizes within its 32-bit counts",
                holds=lambda x, weight, *rest: _tensor_cores_take(x, weight, rest, channel_multiple=8)),
        Default("tensor_cores", ("float32",), "TF32 allowed for convolutions (torch.backends.cudnn.conv."
                "fp32_precision, 'tf32' by default), C a multiple of 4 and the sizes within its 32-bit counts",
                holds=lambda x, weight, *rest: _tf32_convolutions()
                and _tensor_cores_take(x, weight, rest, channel_multiple=4)),
        Default("im2col_gemm", ALL_DTYPES, "otherwise"),
    ),
}


def _tf32_convolutions():
    """Whether torch lets float32 convolutions use TF32: cuDNN's conv setting, or where it is "none" the
    setting it inherits (cuDNN's, then every backend's), as ATen's allowTF32CuDNN resolves it."""
    for setting in (torch.backends.cudnn.conv, torch.backends.cudnn, torch.backends):
        if setting.fp32_precision != "none":
            return setting.fp32_precision == "tf32"
    return False


def _hopper(device):
    """Whether the wgmma rung can run on `device`: a GPU of compute capability 9.0, and labops built for sm_90a."""
    return (device.type == "cuda" and torch.cuda.is_available() and torch.cuda.get_device_capability(device) == (9, 0)
            and _built_for_sm90a())


@functools.cache
def _built_for_sm90a():
    from labops import _build

    return "-DLABOPS_SM90A=1" in _build.cuda_arch_flags()


def _tensor_cores_take(x, weight, rest, channel_multiple):
    """Whether the CUDA tensor_cores rung takes this convolution (TensorCorePlan in csrc/conv2d_mm/cuda.cu):
    C a multiple of `channel_multiple` and every count within 32 bits."""
    padding = rest[2] if len(rest) > 2 else 0  # rest: bias, stride, padding, dilation
    n, c, h, w = x.shape if x.dim() == 4 else (1, *x.shape)
    out = meta_output(conv2d_mm, x, weight, *rest)
    columns = n * out.shape[-2] * out.shape[-1]
    pad_h, pad_w = pair(padding, "conv2d_mm", "padding")
    K = c * weight.shape[2] * weight.shape[3]
    return (c % channel_multiple == 0 and c * h * w < 2**31 and h + 2 * pad_h < 2**31 and w + 2 * pad_w < 2**31
            and K < 2**30 and columns < 2**31 and weight.shape[0] < 2**31)


def ladder_runs_kernel(x, weight, bias=None, stride=1, padding=0, dilation=1) -> bool:
    """Whether a forward call runs a kernel (and records its rung): the output is not empty. x may be empty
    and the output not (no input channels: the output is the bias)."""
    return meta_output(conv2d_mm, x, weight, bias, stride, padding, dilation).numel() > 0
