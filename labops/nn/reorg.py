import torch

from labops import ops
from labops._checks import check_module_choice

__all__ = ["Reorg"]


class Reorg(torch.nn.Module):
    """YOLOv2's passthrough: (N, C, H, W) -> (N, C*s*s, H/s, W/s); see labops.reorg for the orders.

    Args:
        stride: s; order: ``"darknet"`` (default), ``"dcr"`` or ``"crd"``.

    Example:
        >>> Reorg(2)(torch.zeros(1, 64, 26, 26)).shape
        torch.Size([1, 256, 13, 13])
    """

    def __init__(self, stride: int = 2, order: str = "darknet"):
        super().__init__()
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
            raise ValueError(f"Reorg: stride must be an int >= 1, got {stride!r}")
        check_module_choice(order, ops.REORG_ORDERS, "Reorg", "order")
        self.stride = stride
        self.order = order

    def forward(self, x):
        return ops.reorg(x, self.stride, self.order)

    def extra_repr(self):
        return f"stride={self.stride}, order={self.order!r}"
