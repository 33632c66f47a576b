import math

import torch

from labops import ops
from labops._checks import pair


__all__ = ["DepthwiseConv2d"]


class DepthwiseConv2d(torch.nn.Module):
    """``nn.Conv2d(in_channels, in_channels * multiplier, kernel_size, groups=in_channels)``
    computed by ``labops.depthwise_conv2d``.

    weight: (in_channels * multiplier, 1, kH, kW); bias: (in_channels * multiplier,) or None.
    Initialized as nn.Conv2d does (Kaiming-uniform with a = sqrt(5), bias uniform in
    +-1/sqrt(fan_in), fan_in = kH * kW).

    Args:
        in_channels, kernel_size, stride, padding, dilation, bias, multiplier: as for ``nn.Conv2d``
        with ``groups=in_channels`` and ``out_channels = in_channels * multiplier``.

    Example:
        >>> DepthwiseConv2d(8, 3, padding=1)(torch.zeros(2, 8, 16, 16)).shape
        torch.Size([2, 8, 16, 16])
    """

    def __init__(self, in_channels, kernel_size, stride=1, padding=0, dilation=1, multiplier=1,
                 bias=True, device=None, dtype=None):
        super().__init__()
        if in_channels < 1:
            raise ValueError(f"DepthwiseConv2d: in_channels must be >= 1, got {in_channels}")
        if multiplier < 1:
            raise ValueError(f"DepthwiseConv2d: multiplier must be >= 1, got {multiplier}")
        self.in_channels = in_channels
        self.out_channels = in_channels * multiplier
        self.kernel_size, self.stride, self.padding, self.dilation = (
            tuple(pair(v, "DepthwiseConv2d", name)) for name, v in
            (("kernel_size", kernel_size), ("stride", stride), ("padding", padding), ("dilation", dilation)))
        factory = {"device": device, "dtype": dtype}
        self.weight = torch.nn.Parameter(torch.empty(self.out_channels, 1, *self.kernel_size, **factory))
        self.bias = torch.nn.Parameter(torch.empty(self.out_channels, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.kernel_size[0] * self.kernel_size[1])
            torch.nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return ops.depthwise_conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation)

    def extra_repr(self):
        return (f"{self.in_channels}, multiplier={self.out_channels // self.in_channels}, "
                f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, bias={self.bias is not None}")
