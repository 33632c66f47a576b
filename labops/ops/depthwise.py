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

from .._checks import check_tensor, pair
from ..ladder import ALL_DTYPES, Default, kernel_address, meta_output

__all__ = ["depthwise_conv2d"]

# The op's OpOverload, looked up once (as in activation.py: a share of a tiny call's host time).
_depthwise_conv2d = torch.ops.labops.depthwise_conv2d.default

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
    # The op checks the rest (csrc/depthwise/entry.h), in eager mode and, through its Meta kernels,
    # under torch.compile.
    return _depthwise_conv2d(x, weight, bias, pair(stride, _OP, "stride"),
                             pair(padding, _OP, "padding"), pair(dilation, _OP, "dilation"))


# The rules and the output shapes for fake tensors (torch.compile): the Meta kernels of
# csrc/depthwise/register.cpp (entry.h's rule functions, the ones every eager call runs first).


# Autograd: a graph node in csrc/depthwise/register.cpp (the gradient is the three compiled backward
# ops, each only when needed).


# Which rung the forward runs when none is forced (csrc/depthwise/entry.h names the rungs; labops.ladder.DEFAULTS
# gathers this table): per device, the first line whose dtype and condition hold, on the op's arguments
# (x, weight, bias, stride, padding, dilation). tests/test_ladder.py holds the kernels to it.
def _tiled(x, weight, bias=None, stride=1, padding=0, dilation=1):
    """dispatch_tiled (csrc/depthwise/cuda.cu): 3x3 or 5x5, the same stride 1 or 2 on both axes, dilation 1."""
    kh, kw = weight.shape[2:]
    sh, sw = pair(stride, _OP, "stride")
    return kh == kw and kh in (3, 5) and sh == sw and sh in (1, 2) and pair(dilation, _OP, "dilation") == [1, 1]


def _nhwc_in_place(x, weight, bias=None, stride=1, padding=0, dilation=1):
    """Whether the CUDA forward reads a channels_last x in place (DepthwiseLauncher::has_nhwc_kernels)."""
    if not (x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()):
        return False
    pack = min(4, 16 // x.element_size())
    return (weight.shape[0] == x.shape[1] and weight.shape[0] % pack == 0
            and _tiled(x, weight, bias, stride, padding, dilation) and x.data_ptr() % (pack * x.element_size()) == 0)


def _vector_rows(x, weight, bias=None, stride=1, padding=0, dilation=1):
    """row_vector > 1 (Note [vector row loads]): NCHW as read, 'same' padding in W, even widths, x aligned."""
    if not _tiled(x, weight, bias, stride, padding, dilation) or _nhwc_in_place(x, weight, bias, stride, padding,
                                                                                 dilation):
        return False
    kw, pw = weight.shape[3], pair(padding, _OP, "padding")[1]
    out_w = meta_output(depthwise_conv2d, x, weight, bias, stride, padding, dilation).shape[3]
    return pw == kw // 2 and x.shape[3] % 2 == 0 and out_w % 2 == 0 and kernel_address(x) % (2 * x.element_size()) == 0


def ladder_runs_kernel(x, weight, bias=None, stride=1, padding=0, dilation=1) -> bool:
    """Whether the forward launches a kernel: not when its output is empty."""
    return meta_output(depthwise_conv2d, x, weight, bias, stride, padding, dilation).numel() > 0


LADDER_DEFAULTS = {
    "cpu": (
        Default("bordered_simd", ALL_DTYPES, "always (channels_last is computed through NCHW copies)"),
    ),
    "cuda": (
        Default("tiled_vector_rows", ALL_DTYPES,
                "3x3 or 5x5 kernel, stride 1 or 2 (both axes), dilation 1; read as NCHW; padding_w = kW // 2; "
                "input and output widths even; x aligned to two elements", _vector_rows),
        Default("tiled", ALL_DTYPES, "3x3 or 5x5 kernel, stride 1 or 2 (both axes), dilation 1, otherwise "
                "(channels_last with multiplier 1 and whole packs of channels read in place); tensors under 2^31 "
                "elements", _tiled),
        Default("textbook", ALL_DTYPES, "any other kernel size, stride or dilation"),
    ),
}
