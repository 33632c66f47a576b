import torch

from labops import ops

__all__ = ["GlobalAvgPool2d"]


class GlobalAvgPool2d(torch.nn.Module):
    """(N, C, H, W) -> (N, C, 1, 1), or (C, H, W) -> (C, 1, 1): the mean of each plane.

    Example:
        >>> GlobalAvgPool2d()(torch.ones(2, 3, 7, 7)).shape
        torch.Size([2, 3, 1, 1])
    """

    def forward(self, x):
        return ops.global_avg_pool2d(x)
