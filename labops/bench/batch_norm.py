"""Batch normalization in training (batch statistics, running statistics updated) on ResNet shapes,
vs F.batch_norm.

Bytes counted are the fewest the op must move: x read and y written for the forward; grad_output and
x read and grad_input written for the backward (the per-channel vectors are negligible). labops's
CUDA forward reads x twice (statistics, then y; rung 3 of its ladder rereads a channel while it is in L2),
its backward reads x and grad_output twice: see csrc/batch_norm/cuda.cu.
"""

import torch
import torch.nn.functional as F

import labops
from labops.bench import Case, compiled, fwd_bwd

# (N, C, H, W): a ResNet-50's first stage, a middle stage, the last stage at batch 32 / 64.
SHAPES_CUDA = [(32, 64, 56, 56), (32, 256, 28, 28), (64, 512, 7, 7)]
SHAPES_CPU = [(8, 64, 56, 56), (8, 256, 14, 14), (16, 512, 7, 7)]


def _stats(channels, device):
    return torch.zeros(channels, device=device), torch.ones(channels, device=device)


def doctor_cases(randn, generator):
    """(name, labops op, native PyTorch, float64 inputs): what `labops doctor` compares, forward and backward."""
    x, running_mean, running_var = randn(2, 8, 6, 6), randn(8), randn(8).abs() + 0.5
    cases = []
    for training in (True, False):  # in training the batch's statistics, in evaluation the running ones
        stats = (None, None) if training else (running_mean, running_var)
        cases.append((f"batch_norm(training={training})",
                      lambda t, w, b, s=stats, tr=training: labops.batch_norm(
                          t, *(None if v is None else v.to(t.device) for v in s), w, b, training=tr),
                      lambda t, w, b, s=stats, tr=training: F.batch_norm(t, *s, w, b, training=tr),
                      [x, randn(8), randn(8)]))
    return cases


def cases(device, size=None):
    shapes = SHAPES_CUDA if device == "cuda" else SHAPES_CPU
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        for shape in shapes:
            channels = shape[1]
            x = torch.randn(shape, device=device, dtype=dtype)
            # float32 parameters and running statistics, as torch.nn.BatchNorm2d keeps them under autocast
            w = torch.rand(channels, device=device) + 0.5
            b = torch.randn(channels, device=device)
            lab_mean, lab_var = _stats(channels, device)
            nat_mean, nat_var = _stats(channels, device)
            xg = x.detach().requires_grad_()
            wg, bg = w.detach().requires_grad_(), b.detach().requires_grad_()
            g = torch.randn_like(x)
            n, e = x.numel(), x.element_size()
            fwd_bytes = 2 * n * e  # read x, write y
            bwd_bytes = 3 * n * e  # read grad_output and x, write grad_input

            def lab(x, w, b, mean=lab_mean, var=lab_var):
                return labops.batch_norm(x, mean, var, w, b, training=True)

            def nat(x, w, b, mean=nat_mean, var=nat_var):
                return F.batch_norm(x, mean, var, w, b, training=True)

            label = "x".join(map(str, shape))
            name = "F.batch_norm(training=True)"
            # forward: a subtract, a square and two adds per value for the statistics, a subtract and a
            # multiply-add for y; backward: three multiply-adds for the sums and five operations for grad_input
            yield Case("batch_norm fwd", label, dtype, fwd_bytes, lambda x=x, w=w, b=b: lab(x, w, b),
                       lambda x=x, w=w, b=b: nat(x, w, b), name, 7 * n,
                       {"torch.compile": lambda x=x, w=w, b=b, f=compiled(nat): f(x, w, b)})
            yield Case("batch_norm fwd+bwd", label, dtype, fwd_bytes + bwd_bytes, fwd_bwd(lab, (xg, wg, bg), g),
                       fwd_bwd(nat, (xg, wg, bg), g), name, 18 * n,
                       {"torch.compile": fwd_bwd(compiled(nat), (xg, wg, bg), g)})


# The ladder (labops.ladder, `labops bench --ladder batch_norm`): every rung of the forward, in training (the
# running statistics move on every call; y does not read them) and in evaluation. On CUDA ResNet's three
# stage shapes at batch 32 (64, 128 and 256 channels: rung 3's one block per channel against rung 2's split
# channels), float32 and float16 with float32 parameters; on the CPU the suite's shapes in float32.
LADDER_SHAPES_CUDA = [(32, 64, 56, 56), (32, 128, 28, 28), (32, 256, 14, 14)]


def ladder_cases(device):
    shapes = LADDER_SHAPES_CUDA if device == "cuda" else SHAPES_CPU
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for training in (True, False):
        for dtype in dtypes:
            for shape in shapes:
                gen = torch.Generator(device=device).manual_seed(0)
                x = torch.randn(shape, device=device, dtype=dtype, generator=gen)
                w = torch.rand(shape[1], device=device, generator=gen) + 0.5
                b = torch.randn(shape[1], device=device, generator=gen)
                lab_mean, lab_var = _stats(shape[1], device)
                nat_mean, nat_var = _stats(shape[1], device)
                n = x.numel()
                # read x, write y (the statistics' second read of x is the kernels' business); a subtract, a
                # square and two adds per value for the statistics in training, a subtract and a multiply-add for y
                yield Case(f"batch_norm fwd ({'training' if training else 'eval'})", "x".join(map(str, shape)),
                           dtype, 2 * n * x.element_size(),
                           lambda x=x, w=w, b=b, m=lab_mean, v=lab_var, t=training: labops.batch_norm(x, m, v, w, b, t),
                           lambda x=x, w=w, b=b, m=nat_mean, v=nat_var, t=training: F.batch_norm(x, m, v, w, b, t),
                           f"F.batch_norm(training={training})", (7 if training else 3) * n)
