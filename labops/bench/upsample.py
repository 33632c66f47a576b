"""Bilinear x2 upsampling (half_pixel, i.e. align_corners=False), two shapes.

Rows: forward; backward alone (labops's deterministic gather, and the atomic
scatter of the lesson, each against ATen's upsample_bilinear2d_backward);
forward+backward through autograd. On the GPU: 16x64x128x128 and
8x256x64x64 in float32 and float16; on the CPU smaller shapes in float32.
"""

import torch
import torch.nn.functional as F

import labops
import labops.ops  # noqa: F401  (loads the compiled library, so torch.ops.labops.* exist)
from labops.bench import Case, compiled, fwd_bwd

GPU_SHAPES = [(16, 64, 128, 128), (8, 256, 64, 64)]
CPU_SHAPES = [(4, 16, 64, 64), (2, 64, 32, 32)]


def doctor_cases(randn, generator):
    """(name, labops op, native PyTorch, float64 inputs): what `labops doctor` compares, forward and backward."""
    x = randn(2, 8, 6, 6)
    return [(f"upsample(align_corners={corners})",
             lambda t, c=corners: labops.upsample_bilinear2d(t, scale_factor=2, align_corners=c),
             lambda t, c=corners: F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=c),
             [x]) for corners in (False, True)]


def cases(device, size=None):
    shapes = GPU_SHAPES if device == "cuda" else CPU_SHAPES
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    labops_bwd = torch.ops.labops.upsample_bilinear2d_backward
    aten_bwd = torch.ops.aten.upsample_bilinear2d_backward
    for dtype in dtypes:
        for n, c, h, w in shapes:
            x = torch.randn(n, c, h, w, device=device, dtype=dtype)
            g = torch.randn(n, c, 2 * h, 2 * w, device=device, dtype=dtype)
            xg = x.detach().requires_grad_()
            in_bytes, out_bytes = x.numel() * x.element_size(), g.numel() * g.element_size()
            shape = f"{n}x{c}x{h}x{w} x2"

            def ours(t):
                return labops.upsample_bilinear2d(t, scale_factor=2)

            def native(t):
                return F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False)

            native_bwd = lambda: aten_bwd(g, [2 * h, 2 * w], [n, c, h, w], False, 2.0, 2.0)  # noqa: E731
            # forward reads x and writes y; backward reads g and writes grad_x
            # Per output pixel: three lerps (subtract, multiply, add) forward; four weights times g, added, backward.
            outputs = g.numel()
            yield Case("bilinear fwd", shape, dtype, in_bytes + out_bytes, lambda: ours(x), lambda: native(x),
                       "F.interpolate", 9 * outputs, {"torch.compile": lambda f=compiled(native): f(x)})
            yield Case("bilinear bwd (gather)", shape, dtype, in_bytes + out_bytes,
                       lambda: labops_bwd(g, [n, c, h, w], "half_pixel", 2.0, 2.0, True), native_bwd,
                       "aten backward (atomics)", 8 * outputs)
            yield Case("bilinear bwd (scatter)", shape, dtype, in_bytes + out_bytes,
                       lambda: labops_bwd(g, [n, c, h, w], "half_pixel", 2.0, 2.0, False), native_bwd,
                       "aten backward (atomics)", 8 * outputs)
            yield Case("bilinear fwd+bwd", shape, dtype, 2 * (in_bytes + out_bytes),
                       fwd_bwd(ours, (xg,), g), fwd_bwd(native, (xg,), g), "F.interpolate autograd", 17 * outputs,
                       {"torch.compile": fwd_bwd(compiled(native), (xg,), g)})


# The ladder (labops.ladder, `labops bench --ladder upsample`): every rung of the forward on the suite's x2
# shapes. On the CPU float32 only; on CUDA float32 and float16.
def ladder_cases(device):
    shapes = GPU_SHAPES if device == "cuda" else CPU_SHAPES
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        for n, c, h, w in shapes:
            x = torch.randn(n, c, h, w, device=device, dtype=dtype)
            outputs = n * c * 4 * h * w
            yield Case("bilinear fwd", f"{n}x{c}x{h}x{w} x2", dtype, (x.numel() + outputs) * x.element_size(),
                       lambda x=x: labops.upsample_bilinear2d(x, scale_factor=2),
                       lambda x=x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
                       "F.interpolate", 9 * outputs)
