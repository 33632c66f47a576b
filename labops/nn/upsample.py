import torch

from labops import ops
from labops.reference.upsample import COORDINATE_MODES

__all__ = ["UpsampleBilinear2d"]


class UpsampleBilinear2d(torch.nn.Module):
    """``labops.upsample_bilinear2d`` as a module (parameter-free: updateOutput and updateGradInput only).

    ``UpsampleBilinear2d(scale_factor=2)`` matches ``nn.Upsample(scale_factor=2, mode="bilinear")``;
    ``coordinate_mode="asymmetric"`` reproduces TF1 / TFLite ``resize_bilinear``.

    Args:
        size, scale_factor, align_corners, coordinate_mode: as for ``labops.upsample_bilinear2d``.

    Example:
        >>> UpsampleBilinear2d(scale_factor=2)(torch.zeros(1, 3, 4, 5)).shape
        torch.Size([1, 3, 8, 10])
    """

    def __init__(self, size=None, scale_factor=None, align_corners: bool = False, coordinate_mode=None):
        super().__init__()
        if (size is None) == (scale_factor is None):
            raise ValueError(f"UpsampleBilinear2d: give exactly one of size and scale_factor, got "
                             f"size={size!r}, scale_factor={scale_factor!r}")
        if coordinate_mode is not None and coordinate_mode not in COORDINATE_MODES:
            raise ValueError(f"UpsampleBilinear2d: coordinate_mode must be one of {COORDINATE_MODES} or None, "
                             f"got {coordinate_mode!r}")
        self.size = size
        self.scale_factor = scale_factor
        self.align_corners = align_corners
        self.coordinate_mode = coordinate_mode

    def forward(self, x):
        return ops.upsample_bilinear2d(x, self.size, self.scale_factor, self.align_corners, self.coordinate_mode)

    def extra_repr(self):
        what = f"size={self.size!r}" if self.size is not None else f"scale_factor={self.scale_factor!r}"
        mode = self.coordinate_mode or ("align_corners" if self.align_corners else "half_pixel")
        return f"{what}, coordinate_mode={mode!r}"
