"""Reorg (YOLOv2 passthrough, stride 2), every order, vs F.pixel_unshuffle(x, 2).contiguous().

All orders move the same bytes (each element read once and written once), so
pixel_unshuffle + contiguous is the native yardstick for each of them.
"""

import torch
import torch.nn.functional as F

import labops
from labops.bench import Case, fwd_bwd

ORDERS = ("darknet", "dcr", "crd")


def _native(x, s):
    return F.pixel_unshuffle(x, s).contiguous()


def _space_to_depth(x, s):
    """TensorFlow's order: channel (dy*s + dx)*C + c."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // s, s, w // s, s).permute(0, 3, 5, 1, 2, 4).reshape(n, c * s * s, h // s, w // s)


def doctor_cases(randn, generator):
    """(name, labops op, native PyTorch, float64 inputs): what `labops doctor` compares, forward and backward."""
    x = randn(2, 8, 6, 6)
    return [
        ("reorg(crd)", lambda t: labops.reorg(t, 2, "crd"), lambda t: F.pixel_unshuffle(t, 2), [x]),
        ("reorg(dcr)", lambda t: labops.reorg(t, 2, "dcr"), lambda t: _space_to_depth(t, 2), [x]),
        ("reorg(darknet)", lambda t: labops.reorg(t, 2, "darknet"),
         lambda t: _space_to_depth(t.reshape(2, 2, 12, 12), 2).reshape(2, 32, 3, 3), [x]),
    ]


def cases(device, size=None):
    # YOLOv2's passthrough is 64 x 26 x 26 per image at 416 px; a 104 x 104
    # map and a batch of 32 make it memory-bound on a GPU (88 MB in fp32).
    shape = (32, 64, 104, 104) if device == "cuda" else (8, 64, 52, 52)
    s = 2
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        x = torch.randn(shape, device=device, dtype=dtype)
        xg = x.detach().requires_grad_()
        g = torch.randn(shape[0], shape[1] * s * s, shape[2] // s, shape[3] // s, device=device, dtype=dtype)
        nbytes = 2 * x.numel() * x.element_size()  # read once, write once
        label = "x".join(map(str, shape)) + f" s={s}"
        for order in ORDERS:
            mine = (lambda t, o=order: labops.reorg(t, s, o))
            native = (lambda t: _native(t, s))
            yield Case(f"reorg({order}) fwd", label, dtype, nbytes, lambda m=mine: m(x), lambda: native(x),
                       "pixel_unshuffle().contiguous()")
            yield Case(f"reorg({order}) fwd+bwd", label, dtype, 2 * nbytes, fwd_bwd(mine, (xg,), g),
                       fwd_bwd(native, (xg,), g), "pixel_unshuffle().contiguous()")


# The ladder (labops.ladder, `labops bench --ladder reorg`): every rung of the forward, each order, on the
# suite's passthrough map at stride 2. On the CPU float32 only; on CUDA float32 and float16.
def ladder_cases(device):
    shape = (32, 64, 104, 104) if device == "cuda" else (8, 64, 52, 52)
    s = 2
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        x = torch.randn(shape, device=device, dtype=dtype)
        label = "x".join(map(str, shape)) + f" s={s}"
        for order in ORDERS:
            yield Case(f"reorg({order}) fwd", label, dtype, 2 * x.numel() * x.element_size(),
                       lambda o=order: labops.reorg(x, s, o), lambda: _native(x, s), "pixel_unshuffle().contiguous()")
