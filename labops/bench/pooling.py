"""Global average pooling on ResNet / MobileNet head shapes, vs x.mean((-2, -1), keepdim=True)."""

import torch

import labops
from labops.bench import Case, compiled, fwd_bwd

SHAPES_CUDA = [(256, 512, 14, 14), (64, 2048, 7, 7), (32, 256, 56, 56)]
SHAPES_CPU = [(32, 512, 14, 14), (16, 2048, 7, 7), (4, 256, 56, 56)]


def _native(x):
    return x.mean((-2, -1), keepdim=True)


def doctor_cases(randn, generator):
    """(name, labops op, native PyTorch, float64 inputs): what `labops doctor` compares, forward and backward."""
    return [("global_avg_pool2d", labops.global_avg_pool2d, _native, [randn(2, 8, 6, 6)])]


def cases(device, size=None):
    shapes = SHAPES_CUDA if device == "cuda" else SHAPES_CPU
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        for shape in shapes:
            x = torch.randn(shape, device=device, dtype=dtype)
            xg = x.detach().requires_grad_()
            g = torch.randn(*shape[:2], 1, 1, device=device, dtype=dtype)
            e = x.element_size()
            n, planes = x.numel(), shape[0] * shape[1]
            fwd_bytes = (n + planes) * e  # read x, write y
            bwd_bytes = (planes + n) * e  # read grad_output, write grad_input
            name = "x.mean((-2,-1), keepdim=True)"
            label = "x".join(map(str, shape))
            # forward: an add per element (and a divide per plane); backward: a multiply per element
            yield Case("global_avg_pool2d fwd", label, dtype, fwd_bytes,
                       lambda x=x: labops.global_avg_pool2d(x), lambda x=x: _native(x), name, n + planes,
                       {"torch.compile": lambda x=x, f=compiled(_native): f(x)})
            yield Case("global_avg_pool2d fwd+bwd", label, dtype, fwd_bytes + bwd_bytes,
                       fwd_bwd(labops.global_avg_pool2d, (xg,), g), fwd_bwd(_native, (xg,), g), name, 2 * n + planes,
                       {"torch.compile": fwd_bwd(compiled(_native), (xg,), g)})


# The ladder (labops.ladder, `labops bench --ladder pooling`): every rung of the forward on the same head
# shapes. On the CPU float32 only: float16 has one CPU rung (the textbook); on CUDA both dtypes.
def ladder_cases(device):
    shapes = SHAPES_CUDA if device == "cuda" else SHAPES_CPU
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        for shape in shapes:
            x = torch.randn(shape, device=device, dtype=dtype)
            n, planes = x.numel(), shape[0] * shape[1]
            yield Case("global_avg_pool2d fwd", "x".join(map(str, shape)), dtype, (n + planes) * x.element_size(),
                       lambda x=x: labops.global_avg_pool2d(x), lambda x=x: _native(x),
                       "x.mean((-2,-1), keepdim=True)", n + planes)
