"""Host time of the pieces of conv2d_mm's eager fwd+bwd on a tiny input, each timed on its own without a
profiler (torch.profiler adds its own cost to every event, so its table overstates small ops).

An eager training step pays, per layer, for every op it dispatches and every kernel it launches; on a
tiny input that is all it pays for. This prints what each piece costs on this machine: an allocation,
an ATen op with a TensorIterator (zeros, sum, a transposing copy), a labops op with one launch, each
backward op, and native PyTorch's convolution_backward for comparison.

    PYTHONPATH=. python tools/host_pieces.py [cuda|cpu]
"""

import sys
import time

import torch
import torch.nn.functional as F

import labops

import host_time  # tools/host_time.py, beside this file: its timing loop

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cuda"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def per_call_us(fn, calls=2000, repeats=5):
    """Best of `repeats` bursts of `calls` calls, in µs per call, after 100 calls of warm-up."""
    for _ in range(100):
        fn()
    return host_time._time(fn, calls, repeats, sync)


def pieces():
    t = lambda *shape: torch.randn(*shape, device=DEVICE)  # noqa: E731
    x, w, b, g = t(2, 4, 8, 8), t(8, 4, 3, 3), t(8), t(2, 8, 8, 8)  # tools/host_time.py's conv2d_mm case
    ops, one = torch.ops.labops, [1, 1]
    gw = torch.zeros_like(w)
    yield "torch.empty (an allocation)", lambda: torch.empty(2, 8, 8, 8, device=DEVICE)
    yield "torch.zeros (allocation + fill)", lambda: torch.zeros(8, 4, 3, 3, device=DEVICE)
    yield "g.sum((0, 2, 3)) (the bias gradient)", lambda: g.sum((0, 2, 3))
    yield "g as (O, N*L): transpose + reshape copy", lambda: g.view(2, 8, 64).transpose(0, 1).reshape(8, 128)
    yield "labops im2col (one launch)", lambda: ops.im2col(x, [3, 3], one, one, one)
    yield "labops conv2d_mm, bias (3 launches)", lambda: ops.conv2d_mm(x, w, b, one, one, one)
    yield "labops conv2d_mm, no bias (2 launches)", lambda: ops.conv2d_mm(x, w, None, one, one, one)
    yield "F.conv2d, bias", lambda: F.conv2d(x, w, b, 1, 1)
    yield "labops conv2d_mm_backward_input", lambda: ops.conv2d_mm_backward_input(g, w, [2, 4, 8, 8], one, one, one)
    yield "labops conv2d_mm_acc_grad_parameters", \
        lambda: ops.conv2d_mm_acc_grad_parameters(g, x, gw, None, one, one, one, 1.0)
    if hasattr(ops, "conv2d_mm_backward_weight"):
        yield "labops conv2d_mm_backward_weight", lambda: ops.conv2d_mm_backward_weight(g, x, [8, 4, 3, 3], one, one, one)
    conv_backward = torch.ops.aten.convolution_backward
    yield "aten.convolution_backward, input only", \
        lambda: conv_backward(g, x, w, None, one, one, one, False, [0, 0], 1, [True, False, False])
    yield "aten.convolution_backward, weight + bias", \
        lambda: conv_backward(g, x, w, [8], one, one, one, False, [0, 0], 1, [False, True, True])
    a, ww, bb = (v.detach().requires_grad_() for v in (x, w, b))
    yield "autograd.grad(labops.conv2d_mm)", lambda: torch.autograd.grad(labops.conv2d_mm(a, ww, bb, 1, 1), (a, ww, bb), g)
    yield "autograd.grad(F.conv2d)", lambda: torch.autograd.grad(F.conv2d(a, ww, bb, 1, 1), (a, ww, bb), g)


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(f"host time per call, µs (best of 5 x 2000 calls); torch {torch.__version__} on {DEVICE}")
    for name, fn in pieces():
        print(f"{per_call_us(fn):9.2f}  {name}", flush=True)
