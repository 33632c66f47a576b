import math

import torch

from labops import ops
from labops._checks import pair

__all__ = ["Conv2dMM"]


class Conv2dMM(torch.nn.Module):
    """A 2-D convolution (groups=1) computed by im2col + GEMM, like Torch7's
    nn.SpatialConvolutionMM; initialised like torch.nn.Conv2d.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, bias: as for
        ``torch.nn.Conv2d``; input (N, C_in, H, W), output (N, C_out, out_h, out_w).

    Example:
        >>> Conv2dMM(3, 8, 3, padding=1)(torch.zeros(2, 3, 10, 10)).shape
        torch.Size([2, 8, 10, 10])
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, bias=True,
                 device=None, dtype=None):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding, self.dilation = (
            tuple(pair(v, "Conv2dMM", name)) for name, v in
            (("kernel_size", kernel_size), ("stride", stride), ("padding", padding), ("dilation", dilation)))
        if in_channels < 1 or out_channels < 1:
            raise ValueError(f"Conv2dMM: in_channels and out_channels must be >= 1, got {in_channels}, {out_channels}")
        factory = {"device": device, "dtype": dtype}
        self.weight = torch.nn.Parameter(torch.empty(out_channels, in_channels, *self.kernel_size, **factory))
        self.bias = torch.nn.Parameter(torch.empty(out_channels, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        # torch.nn.Conv2d's initialisation: kaiming_uniform(a=sqrt(5)) and a fan-in bound for the bias.
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight[0].numel()
            bound = 1 / math.sqrt(fan_in)
            torch.nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return ops.conv2d_mm(x, self.weight, self.bias, self.stride, self.padding, self.dilation)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, bias={self.bias is not None}")
