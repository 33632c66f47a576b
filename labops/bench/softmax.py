"""Softmax and fused cross-entropy on the goal shapes: 65536x1000, 4096x32768,
262144x128 on a GPU (fp32 and fp16); 8x smaller on the CPU (fp32).

Rows and what "native" is:
  softmax fwd            torch.softmax(x, -1)
  softmax bwd            the backward op alone vs torch._softmax_backward_data (the op
                         that autograd of torch.softmax calls), both on a saved output y
  softmax fwd+bwd        autograd of labops.softmax vs autograd of torch.softmax
  cross_entropy fwd+bwd  autograd of labops.cross_entropy vs F.cross_entropy (mean)
Bytes counted: fwd = read x + write y; bwd = read g, y + write dx; cross-entropy
= read the logits twice (the backward recomputes softmax from them) + write the
gradient + read the int64 targets twice.
"""

import torch
import torch.nn.functional as F

import labops
from labops.bench import Case, compiled, fwd_bwd

CUDA_SHAPES = [(65536, 1000), (4096, 32768), (262144, 128)]
CPU_SHAPES = [(8192, 1000), (512, 32768), (32768, 128)]


def _labops_softmax(x):
    return labops.softmax(x, -1)


def _torch_softmax(x):
    return torch.softmax(x, -1)


def doctor_cases(randn, generator):
    """(name, labops op, native PyTorch, float64 inputs): what `labops doctor` compares, forward and backward."""
    target = torch.randint(0, 8, (5,), generator=generator)
    return [
        ("softmax", lambda t: labops.softmax(t, -1), lambda t: torch.softmax(t, -1), [randn(5, 8)]),
        ("cross_entropy", lambda t: labops.cross_entropy(t, target.to(t.device)),
         lambda t: F.cross_entropy(t, target), [randn(5, 8)]),
    ]


def cases(device, size=None):
    shapes = CUDA_SHAPES if device == "cuda" else CPU_SHAPES
    if size:  # keep the row lengths, scale the number of rows to about `size` elements
        shapes = [(max(1, size // c), c) for _, c in shapes]
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    gen = torch.Generator(device=device).manual_seed(0)
    for dtype in dtypes:
        for n, c in shapes:
            x = torch.randn(n, c, device=device, dtype=dtype, generator=gen)
            g = torch.randn(n, c, device=device, dtype=dtype, generator=gen)
            y = torch.softmax(x, -1)
            xg = x.detach().requires_grad_()
            target = torch.randint(0, c, (n,), device=device, generator=gen)
            e, numel = x.element_size(), n * c
            shape = f"{n}x{c}"
            # Per element: forward max, subtract, exp, sum, scale (5); backward y*g, its sum, g - dot, times y (4);
            # cross-entropy: the forward's 5 and exp - onehot, scaled (2).
            yield Case("softmax fwd", shape, dtype, 2 * numel * e,
                       lambda x=x: labops.softmax(x, -1), lambda x=x: torch.softmax(x, -1), "torch.softmax",
                       5 * numel, {"torch.compile": lambda x=x, f=compiled(_torch_softmax): f(x)})
            yield Case("softmax bwd", shape, dtype, 3 * numel * e,
                       lambda g=g, y=y: torch.ops.labops.softmax_backward(g, y, -1),
                       lambda g=g, y=y: torch._softmax_backward_data(g, y, -1, y.dtype),
                       "torch._softmax_backward_data", 4 * numel)
            yield Case("softmax fwd+bwd", shape, dtype, 5 * numel * e,
                       fwd_bwd(_labops_softmax, (xg,), g), fwd_bwd(_torch_softmax, (xg,), g), "autograd torch.softmax",
                       9 * numel, {"torch.compile": fwd_bwd(compiled(_torch_softmax), (xg,), g)})
            yield Case("cross_entropy fwd+bwd", shape, dtype, 3 * numel * e + 2 * n * 8,
                       fwd_bwd(labops.cross_entropy, (xg, target), None), fwd_bwd(F.cross_entropy, (xg, target), None),
                       "F.cross_entropy", 7 * numel,
                       {"torch.compile": fwd_bwd(compiled(F.cross_entropy), (xg, target), None)})


# The ladder (labops.ladder, `labops bench --ladder softmax`): every rung of the softmax forward on the suite's
# shapes (rows of 1000, 32768 and 128), along the last dim. On the CPU float32 only; on CUDA float32 and float16.
def ladder_cases(device):
    shapes = CUDA_SHAPES if device == "cuda" else CPU_SHAPES
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    gen = torch.Generator(device=device).manual_seed(0)
    for dtype in dtypes:
        for n, c in shapes:
            x = torch.randn(n, c, device=device, dtype=dtype, generator=gen)
            # read x, write y; per element max, subtract, exp, sum, scale
            yield Case("softmax fwd", f"{n}x{c}", dtype, 2 * n * c * x.element_size(),
                       lambda x=x: labops.softmax(x, -1), lambda x=x: torch.softmax(x, -1), "torch.softmax", 5 * n * c)
