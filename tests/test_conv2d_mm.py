"""im2col / col2im / conv2d_mm (SpatialConvolutionMM): against F.unfold,
F.fold and F.conv2d in float64, gradcheck, opcheck, torch.compile,
accGradParameters' accumulation, the readable references, and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import (ONE, ZERO, Seeded, assert_compiled_matches_eager, assert_one_graph_for_two_shapes, opcheck_every,
                      t, tf32_convolutions, tolerances)

import labops
from labops import reference
from labops.testing import rel_error

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def sample_inputs(device, dtype=torch.float32, seed=0):
    """(case, x, (kernel, stride, padding, dilation)) over many geometries, never zeros.

    L = out_h * out_w is a multiple of 8 in some cases (the CUDA im2col then
    stores 16-byte vectors) and odd in others (one element per store).
    """
    randn = Seeded(device, dtype, seed).randn

    yield "3x3-pad1", randn(2, 3, 7, 9), ((3, 3), (1, 1), (1, 1), (1, 1))
    yield "3x3-pad1-L64", randn(2, 4, 8, 8), ((3, 3), (1, 1), (1, 1), (1, 1))
    yield "asymmetric", randn(2, 2, 8, 6), ((2, 3), (1, 2), (0, 1), (1, 1))
    yield "stride2", randn(1, 3, 9, 9), ((3, 3), (2, 2), (1, 1), (1, 1))
    yield "dilation", randn(2, 2, 10, 11), ((3, 2), (1, 1), (2, 1), (2, 3))
    yield "everything", randn(3, 3, 17, 31), ((3, 5), (2, 1), (1, 2), (1, 2))
    yield "big-stride", randn(2, 2, 11, 13), ((3, 3), (3, 4), (1, 0), (1, 1))
    yield "kernel-is-image", randn(1, 4, 5, 5), ((5, 5), (1, 1), (0, 0), (1, 1))
    yield "1x1", randn(3, 5, 4, 4), ((1, 1), (1, 1), (0, 0), (1, 1))
    yield "unbatched", randn(3, 6, 7), ((2, 2), (2, 2), (0, 0), (1, 1))
    yield "non-contiguous", randn(2, 9, 8, 3).permute(0, 3, 1, 2), ((3, 3), (1, 1), (1, 1), (1, 1))
    yield "sliced", randn(2, 3, 12, 20)[:, :, ::2, 1::2], ((3, 2), (1, 1), (1, 0), (1, 1))
    yield "empty-batch", randn(0, 3, 5, 5), ((3, 3), (1, 1), (1, 1), (1, 1))
    # C a multiple of 8: the CUDA tensor_cores rung takes these (16 bytes of a pixel's channels at a time)
    yield "16-channels", randn(2, 16, 9, 10), ((3, 3), (1, 1), (1, 1), (1, 1))
    yield "8-channels-everything", randn(3, 8, 13, 11), ((3, 2), (2, 1), (2, 1), (2, 3))
    yield "channels-last", randn(2, 8, 6, 7).contiguous(memory_format=torch.channels_last), \
        ((3, 3), (1, 1), (1, 1), (1, 1))


# ---- bad arguments (tests/test_arg_rules.py feeds each to the eager op and to its fake) ----
CX, CW, CG = t(2, 3, 6, 6), t(4, 3, 3, 3), t(2, 4, 4, 4)  # 3x3, no padding
# (op, id, args): each breaks one rule of the op's C++ checks.
ARG_RULE_CASES = [
    ("im2col", "integer x", (CX.long(), [3, 3], ONE, ZERO, ONE)),
    ("im2col", "2-D x", (CX[0, 0], [3, 3], ONE, ZERO, ONE)),
    ("im2col", "kernel_size 3 entries", (CX, [3, 3, 3], ONE, ZERO, ONE)),
    ("im2col", "kernel_size 0", (CX, [0, 3], ONE, ZERO, ONE)),
    ("im2col", "stride 0", (CX, [3, 3], [1, 0], ZERO, ONE)),
    ("im2col", "dilation 0", (CX, [3, 3], ONE, ZERO, [0, 1])),
    ("im2col", "padding -1", (CX, [3, 3], ONE, [-1, 0], ONE)),
    ("im2col", "kernel too big", (CX, [7, 1], ONE, ZERO, ONE)),
    ("col2im", "integer cols", (t(2, 27, 16).long(), [6, 6], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "4-D cols", (t(1, 2, 27, 16), [6, 6], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "stride 0", (t(2, 27, 16), [6, 6], [3, 3], [0, 0], ZERO, ONE)),
    ("col2im", "output_size 3 entries", (t(2, 27, 16), [6, 6, 1], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "output_size 0", (t(2, 27, 16), [0, 6], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "rows not divisible", (t(2, 27, 16), [6, 6], [2, 2], ONE, ZERO, ONE)),
    ("col2im", "kernel too big", (t(2, 27, 16), [2, 2], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "block count", (t(2, 27, 16), [7, 7], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "block count 2-D", (t(27, 16), [7, 7], [3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm", "integer x", (CX.long(), CW, None, ONE, ZERO, ONE)),
    ("conv2d_mm", "2-D x", (CX[0, 0], CW, None, ONE, ZERO, ONE)),
    ("conv2d_mm", "integer weight", (CX, CW.long(), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "2-D weight", (CX, t(4, 27), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "in_channels", (CX, t(4, 2, 3, 3), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "empty kernel", (CX, t(4, 3, 0, 3), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "stride 0", (CX, CW, None, [0, 1], ZERO, ONE)),
    ("conv2d_mm", "stride 1 entry", (CX, CW, None, [1], ZERO, ONE)),
    ("conv2d_mm", "padding -1", (CX, CW, None, ONE, [0, -1], ONE)),
    ("conv2d_mm", "dilation 0", (CX, CW, None, ONE, ZERO, [1, 0])),
    ("conv2d_mm", "kernel too big", (CX, t(4, 3, 7, 3), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "dilated kernel too big", (CX, CW, None, ONE, ONE, [4, 4])),
    ("conv2d_mm", "weight dtype", (CX, CW.double(), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "bias dtype", (CX, CW, t(4, dtype=torch.int64), ONE, ZERO, ONE)),
    ("conv2d_mm", "bias shape", (CX, CW, t(4, 1), ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "integer grad", (CG.long(), CW, [2, 3, 6, 6], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "input_size rank", (CG, CW, [3, 6, 6, 1, 1], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "negative input_size", (CG, CW, [2, 3, -6, 6], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "weight dtype", (CG, CW.double(), [2, 3, 6, 6], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "in_channels", (CG, t(4, 2, 3, 3), [2, 3, 6, 6], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "grad shape", (CG, CW, [2, 3, 6, 6], ONE, ONE, ONE)),
    ("conv2d_mm_acc_grad_parameters", "2-D x", (CG, CX[0, 0], torch.zeros(4, 3, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "integer grad",
     (CG.long(), CX, torch.zeros(4, 3, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad dtype",
     (CG.double(), CX, torch.zeros(4, 3, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad_weight dtype",
     (CG, CX, torch.zeros(4, 3, 3, 3, dtype=torch.float64), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad_weight in_channels",
     (CG, CX, torch.zeros(4, 2, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad shape",
     (CG[:, :, :3], CX, torch.zeros(4, 3, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad_bias dtype",
     (CG, CX, torch.zeros(4, 3, 3, 3), torch.zeros(4, dtype=torch.float64), ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad_bias shape",
     (CG, CX, torch.zeros(4, 3, 3, 3), torch.zeros(5), ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_backward_weight", "2-D x", (CG, CX[0, 0], [4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "integer grad", (CG.long(), CX, [4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "grad dtype", (CG.double(), CX, [4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "weight_size rank", (CG, CX, [4, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "negative weight_size", (CG, CX, [-4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "weight_size in_channels", (CG, CX, [4, 2, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "grad shape", (CG[:, :, :3], CX, [4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "stride", (CG, CX, [4, 3, 3, 3], [0, 1], ZERO, ONE)),
]


# ---- graph nodes (tests/test_autograd_nodes.py checks each against native PyTorch's) ----
# (name, labops fn, native fn, input shape, whether the node saves a tensor)
_NODE = torch.Generator().manual_seed(7)
NODE_WEIGHT, NODE_BIAS = (torch.randn(*shape, dtype=torch.float64, generator=_NODE) for shape in ((4, 3, 3, 3), (4,)))
AUTOGRAD_NODE_CASES = [
    ("im2col", lambda a: labops.im2col(a, 3, 1, 1), lambda a: F.unfold(a, 3, 1, 1), (2, 3, 4, 4), False),
    ("col2im", lambda a: labops.col2im(a, (4, 4), 3, 1, 1), lambda a: F.fold(a, (4, 4), 3, 1, 1), (2, 27, 16), False),
    # the weight and bias closed over need no gradient: the node saves the weight alone (for grad x)
    ("conv2d_mm", lambda a: labops.conv2d_mm(a, NODE_WEIGHT, NODE_BIAS, 1, 1),
     lambda a: F.conv2d(a, NODE_WEIGHT, NODE_BIAS, 1, 1), (2, 3, 5, 5), True),
]


def unfold_args(params):
    k, s, p, d = params
    return dict(kernel_size=k, dilation=d, padding=p, stride=s)


def conv_weight(x, params, out_channels=4, seed=1, device=None):
    randn = Seeded("cpu", torch.float64, seed).randn
    k = params[0]
    c = x.shape[-3]
    w = randn(out_channels, c, *k) / (c * k[0] * k[1]) ** 0.5
    b = randn(out_channels)
    return w.to(x.device, x.dtype), b.to(x.device, x.dtype)


def assert_close_scaled(actual, expected, dtype, factor=1.0, msg=""):
    """assert_close with atol relative to the largest expected value: results of
    long dot products (K terms) carry absolute errors of about eps * max|y|."""
    rtol, atol = tolerances(dtype)
    scale = max(1.0, expected.abs().max().item()) if expected.numel() else 1.0
    torch.testing.assert_close(actual.double(), expected, rtol=factor * rtol, atol=factor * atol * scale, msg=msg)


# ---- im2col / col2im ----

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_im2col_matches_unfold(device, dtype):
    for case, x, params in sample_inputs(device, dtype):
        k, s, p, d = params
        out = labops.im2col(x, k, s, p, d)
        expected = F.unfold(x.double(), **unfold_args(params))
        assert out.dtype == dtype and out.device == x.device and out.is_contiguous(), case
        assert out.shape == expected.shape, case
        # A pure copy: bit for bit.
        torch.testing.assert_close(out.double(), expected, rtol=0, atol=0, msg=case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_col2im_matches_fold(device, dtype):
    randn = Seeded(device, dtype, seed=2).randn
    for case, x, params in sample_inputs(device, dtype):
        k, s, p, d = params
        shape = F.unfold(x.double(), **unfold_args(params)).shape
        cols = randn(*shape)
        if case == "non-contiguous":
            cols = cols.transpose(-1, -2).contiguous().transpose(-1, -2)
        out = labops.col2im(cols, x.shape[-2:], k, s, p, d)
        expected = F.fold(cols.double(), x.shape[-2:], **unfold_args(params))
        assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous(), case
        assert_close_scaled(out, expected, dtype, msg=case)


def test_col2im_is_the_adjoint_not_the_inverse(device):
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64, device=device)
    y = torch.randn(2, 3 * 9, 6 * 7, dtype=torch.float64, device=device)
    # <im2col(x), y> == <x, col2im(y)>: what makes col2im im2col's backward.
    lhs = (labops.im2col(x, 3, padding=1) * y).sum()
    rhs = (x * labops.col2im(y, (6, 7), 3, padding=1)).sum()
    torch.testing.assert_close(lhs, rhs, rtol=1e-12, atol=0)
    # Each pixel comes back times the number of windows that saw it (4 in a corner, 9 inside).
    back = labops.col2im(labops.im2col(x, 3, padding=1), (6, 7), 3, padding=1)
    counts = labops.col2im(labops.im2col(torch.ones_like(x), 3, padding=1), (6, 7), 3, padding=1)
    torch.testing.assert_close(back, x * counts, rtol=1e-14, atol=0)
    assert counts[0, 0, 0, 0] == 4 and counts[0, 0, 3, 3] == 9


# ---- conv2d_mm ----

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_conv2d_mm_matches_conv2d(device, dtype):
    for case, x, params in sample_inputs(device, dtype):
        _, s, p, d = params
        w, b = conv_weight(x, params)
        for bias in (b, None):
            out = labops.conv2d_mm(x, w, bias, s, p, d)
            expected = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), s, p, d)
            # channels_last where x is (entry.h's output_format), as cuDNN's and oneDNN's F.conv2d give it
            channels_last = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
            layout = torch.channels_last if channels_last else torch.contiguous_format
            assert out.dtype == dtype and out.shape == expected.shape and out.is_contiguous(memory_format=layout), case
            assert_close_scaled(out, expected, dtype, factor=4, msg=case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_channels_last_in_channels_last_out(device, dtype):
    """A channels_last x gives a channels_last output, and a channels_last grad_output a channels_last input
    gradient, as cuDNN's and oneDNN's F.conv2d do (rungs 4 and 5 write them so; the others write NCHW, then
    copy), with the values of the NCHW tensors' (a CPU GEMM may block an aligned copy differently: not always
    the same bits). The weight gradient follows x, as cuDNN's does: channels_last from a channels_last x."""
    randn = Seeded(device, dtype, seed=9).randn
    cl = torch.channels_last
    x, w, b = randn(3, 16, 9, 10), randn(24, 16, 3, 3) / 12, randn(24)
    out = labops.conv2d_mm(x, w, b, 1, 1, 1)
    out_cl = labops.conv2d_mm(x.contiguous(memory_format=cl), w, b, 1, 1, 1)
    rtol, atol = tolerances(dtype)
    assert out_cl.is_contiguous(memory_format=cl) and not out_cl.is_contiguous()
    torch.testing.assert_close(out_cl, out, rtol=rtol, atol=atol)
    g = randn(*out.shape)
    grad_in = torch.ops.labops.conv2d_mm_backward_input(g, w, list(x.shape), [1, 1], [1, 1], [1, 1])
    grad_in_cl = torch.ops.labops.conv2d_mm_backward_input(g.contiguous(memory_format=cl), w, list(x.shape),
                                                           [1, 1], [1, 1], [1, 1])
    assert grad_in.is_contiguous() and grad_in_cl.is_contiguous(memory_format=cl) and not grad_in_cl.is_contiguous()
    torch.testing.assert_close(grad_in_cl, grad_in, rtol=rtol, atol=atol)
    grad_w, _ = torch.ops.labops.conv2d_mm_backward_weight(g, x, list(w.shape), [1, 1], [1, 1], [1, 1])
    grad_w_cl, _ = torch.ops.labops.conv2d_mm_backward_weight(g.contiguous(memory_format=cl),
                                                              x.contiguous(memory_format=cl), list(w.shape),
                                                              [1, 1], [1, 1], [1, 1])
    assert grad_w.is_contiguous() and grad_w_cl.is_contiguous(memory_format=cl) and not grad_w_cl.is_contiguous()
    assert_close_scaled(grad_w_cl, grad_w.double(), dtype, msg="the channels_last weight gradient")



@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", [(3, 16, 9, 10), (2, 64, 20, 20)], ids=["small", "wider"])
def test_autograd_passes_channels_last_gradients_through(device, dtype, size):
    """Autograd hands the backward ops a channels_last grad_output as it is (register.cpp: no copy to NCHW),
    so x's gradient comes back channels_last like x; where the weight gradient needs NCHW copies (the columns
    path), the launcher makes them (Launcher::contiguous). Against float64 F.conv2d's gradients."""
    randn = Seeded(device, dtype, seed=23).randn
    cl = torch.channels_last
    n, c, h, w_ = size
    x = randn(n, c, h, w_).contiguous(memory_format=cl).requires_grad_(True)
    w, b = (randn(32, c, 3, 3) / (9 * c) ** 0.5).requires_grad_(True), randn(32).requires_grad_(True)
    with tf32_convolutions():
        out = labops.conv2d_mm(x, w, b, 1, 1, 1)
    g = randn(*out.shape).contiguous(memory_format=cl)
    gx, gw, gb = torch.autograd.grad(out, (x, w, b), g)
    assert gx.is_contiguous(memory_format=cl) and not gx.is_contiguous()
    x64, w64, b64 = (t.detach().double().requires_grad_(True) for t in (x, w, b))
    expected = torch.autograd.grad(F.conv2d(x64, w64, b64, 1, 1), (x64, w64, b64), g.double())
    compare = torch.float16 if dtype == torch.float32 and device == "cuda" else dtype  # TF32 on a GPU
    for name, got, want in zip(("x", "weight", "bias"), (gx, gw, gb), expected):
        assert_close_scaled(got, want, compare, msg=f"the gradient of {name}")


# ---- the ladder (conv2d_mm forward) ----

def ladder_cases(device, dtype):
    """(name, op, inputs, expected, terms) for tests/test_ladder.py: every sample input, with a bias on every
    other one, against float64 F.conv2d; an output sums C*kH*kW products."""
    for i, (case, x, params) in enumerate(sample_inputs(device, dtype)):
        k, s, p, d = params
        w, b = conv_weight(x, params)
        bias = b if i % 2 == 0 else None
        expected = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), s, p, d)
        yield case, labops.conv2d_mm, (x, w, bias, s, p, d), expected, x.shape[-3] * k[0] * k[1]


def ladder_refusals(device):
    """(rung, op, inputs, message regex) for inputs a forced rung cannot take on `device`. The CPU's ladder
    stops at rung 2. On CUDA the textbook and im2col_gemm take every input, and implicit_gemm all but
    K = C*kH*kW of 2^30 or more (it counts along K in 32 bits): x and weight here are one element expanded,
    no memory, and the rung is refused before x is copied; so is an image of 2^31 elements (it indexes
    inside an image in 32 bits). (Its other refusal, 2^31 thread blocks or more, needs an output of about
    2^43 elements.)"""
    x = torch.randn(1, 1, 1, 1, device=device)
    if device == "cpu":
        yield 3, labops.conv2d_mm, (x, x, None, 1, 0, 1), r"has no rung 3 on CPU \(rungs 1..2\)"
        yield 4, labops.conv2d_mm, (x, x, None, 1, 0, 1), r"has no rung 4 on CPU \(rungs 1..2\)"
        yield 5, labops.conv2d_mm, (x, x, None, 1, 0, 1), r"has no rung 5 on CPU \(rungs 1..2\)"
        return
    # tensor_cores: float16, bfloat16, or float32 as TF32 (the tests turn TF32 off: conftest), C % 8 == 0
    # (C % 4 in float32)
    x16 = torch.randn(1, 16, 5, 5, device=device)
    w16 = torch.randn(4, 16, 3, 3, device=device)
    yield 4, labops.conv2d_mm, (x16.double(), w16.double(), None, 1, 1, 1), \
        r"rung 4 \(tensor_cores\) cannot take this input: float64 has no tensor cores here"
    yield 4, labops.conv2d_mm, (x16, w16, None, 1, 1, 1), \
        r"rung 4 \(tensor_cores\) cannot take this input: float32 with TF32 off"
    yield 4, labops.conv2d_mm, (x16[:, :12].half(), w16[:, :12].half(), None, 1, 1, 1), \
        r"rung 4 \(tensor_cores\) cannot take this input: C = 12 is not a multiple of 8"
    # wgmma: tensor_cores' rules, on a Hopper GPU (compute capability 9.0) with labops built for sm_90a
    yield 5, labops.conv2d_mm, (x16.double(), w16.double(), None, 1, 1, 1), \
        r"rung 5 \(wgmma\) cannot take this input: float64 has no tensor cores here"
    if torch.cuda.get_device_capability(device) == (9, 0):
        yield 5, labops.conv2d_mm, (x16, w16, None, 1, 1, 1), \
            r"rung 5 \(wgmma\) cannot take this input: float32 with TF32 off"
        yield 5, labops.conv2d_mm, (x16[:, :12].half(), w16[:, :12].half(), None, 1, 1, 1), \
            r"rung 5 \(wgmma\) cannot take this input: C = 12 is not a multiple of 8"
    else:
        yield 5, labops.conv2d_mm, (x16.half(), w16.half(), None, 1, 1, 1), \
            r"rung 5 \(wgmma\) cannot take this input: it needs an sm_90 GPU \(H100, H200\)"
    wide = x.expand(1, 2**30, 1, 1)
    yield 3, labops.conv2d_mm, (wide, wide, None, 1, 0, 1), \
        r"rung 3 \(implicit_gemm\) cannot take this input: C\*kH\*kW = 1073741824 is 2\^30 or more"
    big = x.expand(1, 2**21, 32, 32)  # C*H*W = 2^31, K = 2^21
    yield 3, labops.conv2d_mm, (big, big[:, :, :1, :1], None, 1, 0, 1), \
        r"rung 3 \(implicit_gemm\) cannot take this input: an image of x has 2\^31 elements or more"


def test_ladder_defaults_conv2d_mm():
    """The default table (labops/ops/conv2d_mm.py LADDER_DEFAULTS): im2col_gemm whenever a kernel runs."""
    from labops import ladder

    x, w = torch.empty(2, 3, 8, 8), torch.empty(4, 3, 3, 3)
    for device in ("cpu", "cuda"):
        for dtype in DTYPES:
            assert ladder.default_rung("conv2d_mm", device, x.to(dtype), w.to(dtype), None, 1, 1, 1) == 2
        assert ladder.default_rung("conv2d_mm", device, x, w, None, 2, 0, 2) == 2
        assert ladder.default_rung("conv2d_mm", device, x[:0], w, None, 1, 1, 1) is None  # no images
        assert ladder.default_rung("conv2d_mm", device, x[0], w, None, 1, 1, 1) == 2  # unbatched
        # no input channels: x is empty, the output (the bias) is not, and a kernel runs
        assert ladder.default_rung("conv2d_mm", device, x[:, :0], w[:, :0], torch.empty(4), 1, 1, 1) == 2


# The tiles TensorCorePlan picks on an H100 (132 multiprocessors) for rung 4 (Note [tensor-core implicit GEMM])
# and rung 5 (Note [wgmma implicit GEMM]); partial tiles at the edges.
TILE_CASES = [
    ("tensor_cores", (8, 16, 64, 64), 120),  # 128 x 128 (one wave, where 64 x 64 would take three)
    ("tensor_cores", (4, 8, 100, 100), 40),  # 128 x 64 (313, one wave, where 64 x 64 would take two)
    ("tensor_cores", (1, 8, 5, 7), 72),      # 64 x 64 (a few blocks)
    ("wgmma", (8, 16, 40, 40), 64),          # 128 x 64: 100 blocks
    ("wgmma", (8, 16, 40, 40), 120),         # 128 x 128 (one wave, where 128 x 64 would take two); partial filters
    ("wgmma", (4, 16, 66, 64), 200),         # 128 x 128: 264 blocks, two waves
    ("wgmma", (1, 8, 5, 7), 72),             # a single partial tile of pixels; K = 72, less than one step
    ("wgmma", (8, 64, 7, 7), 256),           # 4 x 2 tiles: the sum over k split in 2 (add_splits_to_output_kernel)
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("rung, shape, out_channels", TILE_CASES, ids=[
    "tensor_cores-128x128", "tensor_cores-128x64", "tensor_cores-64x64", "wgmma-128x64", "wgmma-128x128",
    "wgmma-128x128-two-waves", "wgmma-partial", "wgmma-split-k"])
def test_tensor_core_rungs_every_tile_size(device, dtype, rung, shape, out_channels):
    """Rungs 4 and 5 on each of their tile sizes (and rung 5 with its sum over k split), against float64
    F.conv2d; the same bits twice. float32 runs as TF32 here (tf32_convolutions; conftest turns it off for
    every other test): rounded to the nearest, 10 bits as float16, so it gets float16's tolerance."""
    if device != "cuda":
        pytest.skip("the tensor-core rungs are CUDA rungs")
    if rung == "wgmma" and torch.cuda.get_device_capability(device) != (9, 0):
        pytest.skip("wgmma is a Hopper (sm_90) rung")
    from labops import ladder

    x = Seeded(device, dtype, 3).randn(*shape)
    params = ((3, 3), (1, 1), (1, 1), (1, 1))
    w, b = conv_weight(x, params, out_channels=out_channels)
    expected = F.conv2d(x.double(), w.double(), b.double(), 1, 1)
    with ladder.use("conv2d_mm", rung), tf32_convolutions():
        out = labops.conv2d_mm(x, w, b, 1, 1, 1)
        again = labops.conv2d_mm(x, w, b, 1, 1, 1)
    rtol, atol = tolerances(torch.float16 if dtype == torch.float32 else dtype)
    torch.testing.assert_close(out.double(), expected, rtol=rtol, atol=atol * (shape[1] * 9) ** 0.5)
    assert torch.equal(out, again), "the same bits on every run"


# Rung 5 loads its tiles by TMA where a tap's channels fill whole 128-byte rows (Note [TMA tiles],
# csrc/common/cuda/tma.cuh): the im2col map then finds each pixel from the padding, stride and dilation.
TMA_GEOMETRIES = [
    ((2, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1), 70),  # 198 pixels: a partial tile; 70 filters: a partial one,
                                                        # whose channels_last rows are not 16-byte aligned
    ((3, 13, 8), (3, 2), (2, 1), (2, 1), (1, 2), 64),  # every field differs between height and width
    ((2, 12, 12), (1, 1), (1, 1), (0, 0), (1, 1), 64),  # one tap
    ((1, 16, 15), (5, 5), (3, 2), (2, 2), (1, 1), 128),  # stride 3 down, 2 across
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "channels-last"])
@pytest.mark.parametrize("size, kernel, stride, padding, dilation, out_channels", TMA_GEOMETRIES,
                         ids=["partial-tiles", "asymmetric", "1x1", "5x5-strided"])
def test_wgmma_tma_geometries(device, dtype, layout, size, kernel, stride, padding, dilation, out_channels):
    """Rung 5 with its tiles loaded by TMA (C = 128 bytes of channels: 64 float16 or bfloat16, 32 float32 as
    TF32) on geometries where a wrong corner, stride or offset of the im2col map would read the wrong pixels;
    against float64 F.conv2d, the same bits twice. A channels_last x gets a channels_last out, which the
    epilogue stores 16 bytes at a time where a row of filters allows it (Note [wgmma implicit GEMM])."""
    if device != "cuda" or torch.cuda.get_device_capability(device) != (9, 0):
        pytest.skip("wgmma and TMA are Hopper (sm_90) features")
    from labops import ladder

    channels = 128 // torch.empty((), dtype=dtype).element_size()
    x = Seeded(device, dtype, 11).randn(size[0], channels, size[1], size[2]).contiguous(memory_format=layout)
    params = (kernel, stride, padding, dilation)
    w, b = conv_weight(x, params, out_channels=out_channels)
    expected = F.conv2d(x.double(), w.double(), b.double(), stride, padding, dilation)
    with ladder.use("conv2d_mm", "wgmma"), tf32_convolutions():
        out = labops.conv2d_mm(x, w, b, stride, padding, dilation)
        again = labops.conv2d_mm(x, w, b, stride, padding, dilation)
    rtol, atol = tolerances(torch.float16 if dtype == torch.float32 else dtype)
    taps = kernel[0] * kernel[1]
    torch.testing.assert_close(out.double(), expected, rtol=rtol, atol=atol * (channels * taps) ** 0.5)
    assert out.is_contiguous(memory_format=layout), "out in x's layout"
    assert torch.equal(out, again), "the same bits on every run"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "channels-last"])
def test_wgmma_tma_blocks_take_several_tiles(device, dtype, layout):
    """Rung 5's TMA kernel is persistent (Note [warp-specialized TMA pipeline]): with more tiles than blocks
    that run at once, a block takes several and its ring of stages runs on from one to the next (channels_last:
    its epilogue staged in the ring, which the producer waits for). 3 x 150 x 161 pixels are 566 tiles of 128,
    the last one partial, for at most 264 blocks on an H100; against float64 F.conv2d, the same bits twice."""
    if device != "cuda" or torch.cuda.get_device_capability(device) != (9, 0):
        pytest.skip("wgmma and TMA are Hopper (sm_90) features")
    from labops import ladder

    channels = 128 // torch.empty((), dtype=dtype).element_size()
    x = Seeded(device, dtype, 13).randn(3, channels, 150, 161).contiguous(memory_format=layout)
    w, b = conv_weight(x, ((3, 3), (1, 1), (1, 1), (1, 1)), out_channels=64)
    expected = F.conv2d(x.double(), w.double(), b.double(), 1, 1)
    with ladder.use("conv2d_mm", "wgmma"), tf32_convolutions():
        out = labops.conv2d_mm(x, w, b, 1, 1, 1)
        again = labops.conv2d_mm(x, w, b, 1, 1, 1)
    rtol, atol = tolerances(torch.float16 if dtype == torch.float32 else dtype)
    torch.testing.assert_close(out.double(), expected, rtol=rtol, atol=atol * (channels * 9) ** 0.5)
    assert torch.equal(out, again), "the same bits on every run"


def rounded_to_tf32(t):
    """float32 t rounded to TF32 (10 bits of mantissa) to the nearest, ties away from zero, as PTX's
    cvt.rna.tf32.f32 rounds (finite values): add half a unit of the last kept bit, drop the 13 bits below it."""
    return ((t.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def truncated_to_tf32(t):
    """float32 t with its 13 low mantissa bits dropped: what wgmma does to a float32 operand left as it is."""
    return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)


# (batch, channels, size, filters): the TMA kernel's tiles of 192 x 128 and 128 x 128 pixels x filters, and a small
# case; a channels_last x is rounded in registers where its filters fit one tile, else by a copy (both here).
TF32_ROUNDING_CASES = [(32, 128, 28, 128), (32, 256, 14, 256), (4, 32, 9, 64)]


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "channels-last"])
@pytest.mark.parametrize("batch, channels, size, filters", TF32_ROUNDING_CASES, ids=["192x128", "128x128", "small"])
def test_wgmma_tf32_rounds_to_nearest(device, layout, batch, channels, size, filters):
    """TF32 as cuDNN's forward and input gradient compute it: each float32 operand rounded to the nearest TF32,
    the products added in float32. Rung 5 rounds x (and grad_output) in registers on their way to the tensor
    cores, or by a copy (Note [TF32 rounded on its way to the tensor cores], conv2d_mm/cuda.cu). Against
    float64 convolutions of the rounded operands, within float32's summing error; the same operands truncated
    miss by far more, which the last asserts show, so that this test could catch a kernel that truncates."""
    if device != "cuda" or torch.cuda.get_device_capability(device) != (9, 0):
        pytest.skip("wgmma and TMA are Hopper (sm_90) features")
    from labops import ladder

    randn = Seeded(device, torch.float32, 17).randn
    x = randn(batch, channels, size, size).contiguous(memory_format=layout).requires_grad_()
    w, b = conv_weight(x, ((3, 3), (1, 1), (1, 1), (1, 1)), out_channels=filters)
    g = randn(batch, filters, size, size).contiguous(memory_format=layout)
    with ladder.use("conv2d_mm", "wgmma"), tf32_convolutions():
        out = labops.conv2d_mm(x, w, b, 1, 1, 1)
        grad_x, = torch.autograd.grad(out, x, g)

    def oracle(round_):
        xr, wr, gr = (round_(v.detach()).double() for v in (x, w, g))
        forward = F.conv2d(xr, wr, b.double(), 1, 1)
        backward = torch.nn.grad.conv2d_input(x.shape, wr, gr, 1, 1)
        return forward, backward

    atol = 6e-5  # float32 sums of up to 2304 terms of size about 1/48: 3e-5 at most measured on an H100
    forward, backward = oracle(rounded_to_tf32)
    torch.testing.assert_close(out.double(), forward, rtol=0, atol=atol)
    torch.testing.assert_close(grad_x.double(), backward, rtol=0, atol=atol)
    forward_truncated, backward_truncated = oracle(truncated_to_tf32)
    assert (out.double() - forward_truncated).abs().max() > 10 * atol
    assert (grad_x.double() - backward_truncated).abs().max() > 10 * atol


def cuda_kernel_names(step):
    """The names of the CUDA kernels that step() launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


# Rung 5's tiles other than 128 pixels, each where TensorCorePlan picks it: (its template arguments in the
# kernel's name, x's shape, O, the dtypes that take it).
TILES_BEYOND_128 = {
    # 2 x 100 x 100 output pixels are 157 tiles of 128 (two waves on an H100's 132 multiprocessors) or 105 of
    # 192 (one), the last one partial: three consumer warpgroups on 192 x 128 tiles, forward and input gradient.
    "192x128": (", 192, 128, 1,", (2, 128, 100, 100), 128, (torch.float16, torch.bfloat16, torch.float32)),
    # 2 x 55 x 57 output pixels and 256 filters are 196 tiles of 64 x 128 (one wave, two a multiprocessor) or
    # 98 of 128 x 128 (one wave, one each): one consumer warpgroup a block, two blocks a multiprocessor.
    "64x128": (", 64, 128, 2,", (2, 128, 55, 57), 256, (torch.float16, torch.bfloat16)),
}


@pytest.mark.parametrize("tile, dtype", [(t, d) for t, case in TILES_BEYOND_128.items() for d in case[3]], ids=str)
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "channels-last"])
def test_wgmma_tma_tiles_beyond_128_pixels(device, tile, dtype, layout):
    """Rung 5 runs tiles of 192 x 128 (three consumer warpgroups) where 128-pixel tiles need a wave more, and, in
    2-byte types, of 64 x 128 (one warpgroup, two blocks a multiprocessor) where those fill one wave two to a
    multiprocessor (TensorCorePlan). Forward and both gradients against float64 F.conv2d, with the kernel's
    name as the witness."""
    if device != "cuda" or torch.cuda.get_device_capability(device) != (9, 0):
        pytest.skip("wgmma and TMA are Hopper (sm_90) features")
    from labops import ladder

    witness, shape, filters, _ = TILES_BEYOND_128[tile]
    randn = Seeded(device, dtype, 17).randn
    x = randn(*shape).contiguous(memory_format=layout).requires_grad_(True)
    w, b = conv_weight(x, ((3, 3), (1, 1), (1, 1), (1, 1)), out_channels=filters)
    w = w.contiguous(memory_format=layout).requires_grad_(True)
    g = randn(shape[0], filters, *shape[2:]).contiguous(memory_format=layout)
    results = {}

    def step():
        out = labops.conv2d_mm(x, w, b, 1, 1, 1)
        results["out"] = out
        results["grads"] = torch.autograd.grad(out, (x, w), g)

    with ladder.use("conv2d_mm", "wgmma"), tf32_convolutions():
        names = cuda_kernel_names(step)
    assert [n for n in names if "wgmma_tma_gemm_kernel<" in n and witness in n], sorted(names)
    x64, w64 = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    expected = F.conv2d(x64, w64, b.double(), 1, 1)
    gx, gw = torch.autograd.grad(expected, (x64, w64), g.double())
    compare = torch.float16 if dtype == torch.float32 else dtype  # TF32 keeps float16's 10 mantissa bits
    assert_close_scaled(results["out"], expected, compare, msg="forward")
    assert_close_scaled(results["grads"][0], gx, compare, msg="input gradient")
    assert_close_scaled(results["grads"][1], gw, compare, msg="weight gradient")


# (N, C, H, W, O, kernel, padding, dilation), stride 1: the input gradient as a convolution (Note [the input
# gradient as a convolution]) whose B is the forward's weight, read as it lies, each tap flipped.
INPUT_GRADIENT_FORWARD_WEIGHT = [
    (2, 72, 9, 11, 64, (3, 3), (1, 1), (1, 1)),     # C = 72: the second box of 64 channels mostly past C
    (2, 128, 10, 9, 128, (3, 2), (2, 0), (1, 2)),   # an asymmetric kernel (its flip), padding and dilation
    (3, 256, 7, 7, 512, (3, 3), (1, 1), (1, 1)),    # 8 steps of filters a tap
    (2, 64, 12, 12, 64, (1, 1), (0, 0), (1, 1)),    # one tap: nothing to flip
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("weight_layout", [torch.contiguous_format, torch.channels_last], ids=["w-nchw", "w-cl"])
@pytest.mark.parametrize("n, c, h, w, o, kernel, padding, dilation", INPUT_GRADIENT_FORWARD_WEIGHT,
                         ids=["partial-box", "asymmetric", "7x7", "1x1"])
def test_wgmma_tma_input_gradient_reads_forward_weight(device, dtype, weight_layout, n, c, h, w, o, kernel,
                                                       padding, dilation):
    """In float16 and bfloat16 rung 5's input gradient reads the forward's channels_last weight as its B
    (MN-major, each tap's plane flipped): no flipped transpose of the weight runs, and none at all when every
    tensor is channels_last. TF32 (no transposing instruction) keeps the flipped transpose. Against float64
    F.conv2d's input gradient, the same bits twice."""
    if device != "cuda" or torch.cuda.get_device_capability(device) != (9, 0):
        pytest.skip("wgmma and TMA are Hopper (sm_90) features")
    from labops import ladder

    randn = Seeded(device, dtype, 23).randn
    params = (kernel, (1, 1), padding, dilation)
    x = randn(n, c, h, w).contiguous(memory_format=torch.channels_last)
    wt = conv_weight(x, params, out_channels=o)[0].contiguous(memory_format=weight_layout)
    expected_out = F.conv2d(x.double(), wt.double(), None, 1, padding, dilation)
    g = randn(*expected_out.shape).contiguous(memory_format=torch.channels_last)
    results = []

    def step():
        results.append(torch.ops.labops.conv2d_mm_backward_input(g, wt, list(x.shape), [1, 1], list(padding),
                                                                 list(dilation)))

    with ladder.use("conv2d_mm", "wgmma"), tf32_convolutions():
        names = cuda_kernel_names(step)
        step()
    gemm = [name for name in names if "wgmma_tma_gemm_kernel<" in name]
    transposes = [name for name in names if "transpose" in name]
    # wgmma_tma_gemm_kernel<scalar_t, BM, BN, kPerSM, kForwardWeight, kRoundA>
    forward_weight = [name.split("<", 1)[1].split(">", 1)[0].split(", ")[4] for name in gemm]
    if dtype == torch.float32:
        assert gemm and forward_weight == ["false"] * len(gemm), sorted(names)
    else:
        assert gemm and forward_weight == ["true"] * len(gemm), sorted(names)
        assert not any("transpose_kernel<true" in name for name in transposes), sorted(names)
        if weight_layout == torch.channels_last:
            assert not transposes, sorted(names)
    x64 = x.double().requires_grad_(True)
    expected = torch.autograd.grad(F.conv2d(x64, wt.double(), None, 1, padding, dilation), x64, g.double())[0]
    compare = torch.float16 if dtype == torch.float32 else dtype  # TF32 keeps float16's 10 mantissa bits
    assert_close_scaled(results[0], expected, compare, msg="input gradient")
    assert torch.equal(results[0], results[1]), "the same bits on every run"


# (N, C, H, W, O, kernel, stride, padding, dilation): the weight gradient by taps (Note [the weight gradient by
# taps]) with each edge of its tiles and steps.
WEIGHT_GRADIENT_BY_TAPS = [
    (2, 64, 9, 11, 72, (3, 3), (1, 1), (1, 1), (1, 1)),     # O = 72: part of a tile of 128 filters; 198 pixels
    (3, 192, 7, 7, 128, (3, 3), (1, 1), (1, 1), (1, 1)),    # C = 192: part of a tile of channels
    (2, 64, 12, 10, 64, (3, 2), (2, 1), (1, 0), (1, 2)),    # stride, dilation, an asymmetric kernel and padding
    (4, 128, 14, 14, 256, (1, 1), (1, 1), (0, 0), (1, 1)),  # 1 x 1
    (32, 64, 14, 14, 128, (3, 3), (1, 1), (1, 1), (1, 1)),  # 6272 pixels: the sum over them split
    (16, 64, 28, 28, 32, (3, 3), (1, 1), (1, 1), (1, 1)),   # tiles of 64 filters x 128 columns: two taps a tile
    (2, 512, 6, 6, 512, (3, 3), (1, 1), (1, 1), (1, 1)),    # tiles of 192 columns, some across two taps
    (2, 2048, 4, 4, 40, (3, 3), (1, 1), (1, 1), (1, 1)),    # 144 tiles of 64 filters, 40 of them, k whole
    (64, 512, 7, 7, 512, (3, 3), (1, 1), (1, 1), (1, 1)),   # units of 49 steps: the bias by cuBLAS's gemv
]
# Below 8 steps of 64 output pixels the sum over them is never split (Note [the weight gradient by taps]): the
# kernel writes grad_w itself, and add_tap_splits_kernel must not run.
WHOLE_K_PIXELS = 7 * 64
# The kernels (filters, columns, blocks a multiprocessor) that kTapTiles has, which the geometries above make the
# time model pick on a GPU of 132 multiprocessors (H100 and H200 SXM).
BY_TAPS_TILES = ("128, 128, 1>", "64, 128, 2>", "128, 192, 1>")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "channels-last"])
def test_weight_gradient_by_taps(device, dtype, layout):
    """Where C fills 128-byte rows, float16 and bfloat16 weight gradients on Hopper come from
    wgmma_tma_weight_gradient_kernel, one GEMM of O x (kH * kW * C) over all the batch's output pixels, when x and
    grad_output are channels_last (from NCHW ones, for images of 128 output pixels or more): backward_weight and
    acc_grad_parameters (scale 0.5, into buffers that hold values) against float64 F.conv2d, the same bits twice,
    the kernel's name as the witness that the rule picked it, or not, every tile's kernel run, and no finisher
    where k is too short to split."""
    if device != "cuda" or torch.cuda.get_device_capability(device) != (9, 0):
        pytest.skip("wgmma and TMA are Hopper (sm_90) features")
    randn = Seeded(device, dtype, 23).randn
    ran = set()
    for n, c, h, w_, o, k, s, p, d in WEIGHT_GRADIENT_BY_TAPS:
        x = randn(n, c, h, w_).contiguous(memory_format=layout)
        weight, bias = conv_weight(x, (k, s, p, d), out_channels=o)
        out_shape = F.conv2d(x.double(), weight.double(), None, s, p, d).shape
        g = randn(*out_shape).contiguous(memory_format=layout)
        x64 = x.double().requires_grad_(True)
        w64, b64 = weight.double().requires_grad_(True), bias.double().requires_grad_(True)
        want_w, want_b = torch.autograd.grad(F.conv2d(x64, w64, b64, s, p, d), (w64, b64), g.double())
        results = {}

        def step():
            results["gw"], results["gb"] = torch.ops.labops.conv2d_mm_backward_weight(
                g, x, list(weight.shape), list(s), list(p), list(d))

        names = cuda_kernel_names(step)
        case = f"{n}x{c}x{h}x{w_} -> {o}, kernel {k}, stride {s}, padding {p}, dilation {d}"
        by_taps = layout == torch.channels_last or out_shape[2] * out_shape[3] >= 128
        tiles = [name for name in names if "wgmma_tma_weight_gradient_kernel<" in name]
        assert bool(tiles) == by_taps, (case, sorted(names))
        if by_taps and n * out_shape[2] * out_shape[3] <= WHOLE_K_PIXELS:
            assert not any("add_tap_splits_kernel" in name for name in names), (case, sorted(names))
        ran.update(tile for tile in BY_TAPS_TILES for name in tiles if tile in name)
        assert results["gw"].is_contiguous(memory_format=layout), f"grad_weight follows x's layout, {case}"
        assert_close_scaled(results["gw"], want_w, dtype, msg=f"weight gradient, {case}")
        assert_close_scaled(results["gb"], want_b, dtype, msg=f"bias gradient, {case}")
        again, _ = torch.ops.labops.conv2d_mm_backward_weight(g, x, list(weight.shape), list(s), list(p), list(d))
        assert torch.equal(results["gw"], again), f"the same bits on every run, {case}"
        held_w, held_b = randn(*weight.shape).contiguous(memory_format=layout), randn(o)
        acc_w, acc_b = held_w.clone(), held_b.clone()
        torch.ops.labops.conv2d_mm_acc_grad_parameters(g, x, acc_w, acc_b, list(s), list(p), list(d), 0.5)
        assert_close_scaled(acc_w, held_w.double() + 0.5 * want_w, dtype, msg=f"acc_grad_parameters, {case}")
        assert_close_scaled(acc_b, held_b.double() + 0.5 * want_b, dtype, msg=f"acc_grad_parameters bias, {case}")
    if layout == torch.channels_last and torch.cuda.get_device_properties(device).multi_processor_count == 132:
        assert ran == set(BY_TAPS_TILES), f"tiles that never ran: {set(BY_TAPS_TILES) - ran}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("channels, height, width", [
    (72, 6, 16),   # H*W = 96: 16-byte packs; C = 72 and 96 pixels: a full tile and a partial one each way
    (72, 4, 17),   # H*W = 68: 8-byte packs of float16 (16 of float32)
    (40, 6, 11),   # H*W = 66: packs of 2
    (40, 5, 13),   # H*W = 65: one element at a time
    (40, 7, 7),    # H*W = 49, narrower than a float16 tile: narrow_transpose_kernel, rows in 16-byte packs
], ids=["packs-16B", "packs-8B", "packs-of-2", "singles", "narrow"])
def test_transposes_every_pack_width(device, dtype, channels, height, width):
    """On CUDA an NCHW x and grad_output go to channels_last and the gradients back through transpose_kernel
    (Note [transposes at copy bandwidth], csrc/conv2d_mm/cuda.cu), in the widest pack that divides C and
    H*W, or narrow_transpose_kernel where H*W is narrower than a tile; forward and both gradients against
    float64 F.conv2d, over tiles cut short in both directions."""
    if device != "cuda":
        pytest.skip("a CUDA path")
    randn = Seeded(device, dtype, 9).randn
    x, w, b = randn(2, channels, height, width), randn(24, channels, 3, 3) / (9 * channels) ** 0.5, randn(24)
    x.requires_grad_(True)
    w.requires_grad_(True)
    with tf32_convolutions():
        out = labops.conv2d_mm(x, w, b, 1, 1, 1)
    g = randn(*out.shape)
    gx, gw = torch.autograd.grad(out, (x, w), g)
    x64, w64 = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    expected = F.conv2d(x64, w64, b.double(), 1, 1, 1)
    ex, ew = torch.autograd.grad(expected, (x64, w64), g.double())
    rtol, atol = tolerances(torch.float16)
    for got, want, n in ((out, expected, 9 * channels), (gx, ex, 9 * 24), (gw, ew, 2 * height * width)):
        torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol * n ** 0.5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("channels, kernel, padding, dilation", [
    (24, (3, 3), (1, 1), (1, 1)),  # the padding of the flipped convolution: 1
    (24, (3, 3), (2, 0), (1, 1)),  # 0 and 2: the output is larger than grad_output
    (24, (3, 2), (1, 1), (2, 1)),  # 3 and 0, a dilated, non-square kernel
    (8, (3, 1), (1, 0), (1, 1)),   # C*kH*kW = 24: the flip inside the narrow transpose (fewer than 32 columns)
    (24, (3, 3), (3, 3), (1, 1)),  # negative: not a convolution, the columns and col2im instead
], ids=["3x3-pad1", "pad-2-0", "dilated", "narrow-weight", "pad-too-large"])
def test_input_gradient_as_a_convolution(device, dtype, channels, kernel, padding, dilation):
    """conv2d_mm_backward_input at stride 1 on CUDA runs the tensor_cores forward on grad_output with the flipped,
    transposed weight (Note [the input gradient as a convolution], csrc/conv2d_mm/cuda.cu); against float64
    torch.nn.grad.conv2d_input. float32 as TF32 (tf32_convolutions) gets float16's tolerance."""
    if device != "cuda":
        pytest.skip("a CUDA path")
    randn = Seeded(device, dtype, 5).randn
    area = kernel[0] * kernel[1]
    x, w = randn(3, channels, 11, 13), randn(16, channels, *kernel) / (channels * area) ** 0.5
    g = randn(*F.conv2d(x.double(), w.double(), None, 1, padding, dilation).shape)
    expected = torch.nn.grad.conv2d_input(x.shape, w.double(), g.double(), 1, padding, dilation)
    with tf32_convolutions():
        got = torch.ops.labops.conv2d_mm_backward_input(g, w, list(x.shape), [1, 1], list(padding), list(dilation))
    rtol, atol = tolerances(torch.float16 if dtype == torch.float32 else dtype)
    torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=atol * (16 * kernel[0] * kernel[1]) ** 0.5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("batch, size, kernel, stride, padding, dilation", [
    (8, (19, 17), (3, 3), (1, 1), (1, 1), (1, 1)),
    (16, (36, 34), (3, 3), (2, 2), (1, 1), (1, 1)),   # the transposed problem has more pixels than the kernel
    (8, (23, 25), (3, 2), (1, 2), (2, 0), (2, 1)),    # dilated, non-square, uneven stride and padding
    (32, (40, 40), (3, 3), (1, 1), (1, 1), (1, 1)),   # 51200 terms a weight: many splits
    (3, (19, 17), (3, 3), (1, 1), (1, 1), (1, 1)),    # a batch the tensor cores cannot take: the columns instead
    (8, (11, 13), (3, 3), (1, 1), (1, 1), (1, 1)),    # 143 output pixels an image: the columns instead
    (8, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1)),      # 64 pixels: the columns, grad_output gathered in 16-byte packs
    (64, (12, 12), (3, 3), (1, 1), (1, 1), (1, 1)),   # 144 pixels, a batch of 128 bytes or more: by TMA, as a convolution
    (32, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1)),     # 49 pixels: float32 (TF32) by TMA as a convolution, else the columns
], ids=["3x3", "stride-2", "dilated", "deep", "batch-3", "small-image", "small-image-packed", "small-image-tma",
        "7x7-tma-tf32"])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "channels-last"])
@pytest.mark.parametrize("channels", [16, 3], ids=["C16", "C3"])  # 3: the finisher's last run of 4 channels partial
def test_weight_gradient_as_a_convolution(device, dtype, batch, size, kernel, stride, padding, dilation, layout,
                                          channels):
    """conv2d_mm_backward_weight and accGradParameters on CUDA run the tensor_cores forward with the batch as its
    channels, its sum over pixels split and the splits added in order (Note [the weight gradient as a
    convolution], csrc/conv2d_mm/cuda.cu), reading x and grad_output from NCHW or channels_last (batch_last),
    writing grad_weight in x's layout and adding into a contiguous one; against float64
    torch.nn.grad.conv2d_weight, the same bits twice."""
    if device != "cuda":
        pytest.skip("a CUDA path")
    randn = Seeded(device, dtype, 7).randn
    x, w = randn(batch, channels, *size).contiguous(memory_format=layout), randn(24, channels, *kernel)
    g = randn(*F.conv2d(x.double(), w.double(), None, stride, padding, dilation).shape)
    g = g.contiguous(memory_format=layout)
    expected = torch.nn.grad.conv2d_weight(x.double(), w.shape, g.double(), stride, padding, dilation)
    terms = batch * g.shape[2] * g.shape[3]
    rtol, atol = tolerances(torch.float16 if dtype == torch.float32 else dtype)
    args = (list(stride), list(padding), list(dilation))
    with tf32_convolutions():
        got, got_bias = torch.ops.labops.conv2d_mm_backward_weight(g, x, list(w.shape), *args)
        again, _ = torch.ops.labops.conv2d_mm_backward_weight(g, x, list(w.shape), *args)
        start = randn(*w.shape)
        accumulated = start.clone()
        torch.ops.labops.conv2d_mm_acc_grad_parameters(g, x, accumulated, None, *args, 0.5)
    torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=atol * terms ** 0.5)
    assert got.is_contiguous(memory_format=layout), "grad_weight follows x's layout"
    torch.testing.assert_close(got_bias.double(), g.double().sum((0, 2, 3)), rtol=rtol, atol=atol * terms ** 0.5)
    assert torch.equal(got, again), "the weight gradient must have the same bits on every run"
    torch.testing.assert_close(accumulated.double(), start.double() + 0.5 * expected, rtol=rtol,
                               atol=atol * terms ** 0.5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("batch, channels, size, kernel, stride, padding, dilation", [
    (13, 1088, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1)),  # 49 pixels; channels enough for 8 blocks an H100 SM: 13
                                                         # images a block, one run crossing them
    (5, 1088, (30, 30), (3, 3), (1, 1), (1, 1), (1, 1)),  # float64: 8 KB windows, groups of 2, 2 and 1 images
    (5, 16, (9, 11), (3, 2), (2, 1), (2, 0), (1, 2)),     # strided, dilated, uneven padding
    (3, 16, (40, 60), (3, 3), (1, 1), (1, 1), (1, 1)),    # float16: 5.2 KB windows; float64 (21 KB): im2col_kernel
    (6, 16, (4, 4), (5, 5), (1, 1), (3, 3), (1, 1)),      # padding wider than the image
], ids=["7x7", "partial-group", "strided-dilated", "big-window", "wide-padding"])
def test_weight_gradient_columns_through_shared_memory(device, dtype, batch, channels, size, kernel, stride, padding,
                                                       dilation):
    """Where the tensor cores do not take the weight gradient (float64; a batch not a multiple of 8), CUDA writes
    its columns, every image of a row side by side, from a copy in shared memory of each plane with its padding
    (Note [im2col through shared memory], csrc/conv2d_mm/cuda.cu); against float64
    torch.nn.grad.conv2d_weight."""
    if device != "cuda":
        pytest.skip("a CUDA path")
    randn = Seeded(device, dtype, 5).randn
    x, w = randn(batch, channels, *size), randn(24, channels, *kernel)
    g = randn(*F.conv2d(x.double(), w.double(), None, stride, padding, dilation).shape)
    expected = torch.nn.grad.conv2d_weight(x.double(), w.shape, g.double(), stride, padding, dilation)
    terms = batch * g.shape[2] * g.shape[3]
    rtol, atol = tolerances(dtype)
    got, _ = torch.ops.labops.conv2d_mm_backward_weight(g, x, list(w.shape), list(stride), list(padding),
                                                         list(dilation))
    torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=atol * terms ** 0.5)


def test_ladder_textbook_runs_when_x_is_empty_but_the_output_is_not(device):
    from labops import ladder

    x, w = torch.randn(2, 0, 5, 5, device=device), torch.randn(3, 0, 3, 3, device=device)
    b = torch.randn(3, device=device)
    names = ladder.rungs("conv2d_mm", device)
    for rung in range(1, len(names) + 1):  # implicit GEMMs: K = 0, no steps
        if names[rung - 1] == "wgmma" and torch.cuda.get_device_capability(device) != (9, 0):
            continue  # a Hopper rung
        with ladder.use("conv2d_mm", rung), tf32_convolutions():  # rungs 4 and 5 take float32 as TF32
            out = labops.conv2d_mm(x, w, b, 1, 1)
            assert ladder.last_rung("conv2d_mm") == rung
        torch.testing.assert_close(out, b.view(1, 3, 1, 1).expand(2, 3, 5, 5))


# ---- the implicit GEMM (CUDA rung 3), its tiling emulated on the CPU ----

IGEMM_BK, IGEMM_MICRO, IGEMM_PAD_A = 8, 8, 4  # csrc/conv2d_mm/cuda.cu: kIgemmBK, kIgemmMicro, kIgemmPadA
IGEMM_TILES = [(128, 128), (64, 64)]  # (BM, BN) of the two implicit_gemm_kernel instantiations


def emulate_implicit_gemm(x, w, bias, params, bm, bn):
    """implicit_gemm_kernel (Note [implicit GEMM], csrc/conv2d_mm/cuda.cu) in float64 on the CPU, block by
    block and step by step, with the kernel's maps: which thread loads which element of each tile, which
    outputs a thread's micro-tile holds, and the epilogue's walk over (n, p). The threads of a block run as
    one tensor. Column element (k, j) comes from labops.im2col (im2col_source, as in the kernel). Shared
    tiles start as NaN every step, so an element read but not loaded for that step poisons the result
    (stricter than the kernel's two copies, which hold the step before last's values), and every output
    must be written exactly once: by 4-pixel vectors when L % 4 == 0, else element by element. The
    register staging of the next step's tiles changes when a load is issued, not which; it is not modelled.
    Keep in step with the kernel."""
    k_size, stride, padding, dilation = params
    x4 = x if x.dim() == 4 else x[None]
    cols = labops.im2col(x4.double(), k_size, stride, padding, dilation)  # (batch, K, L)
    batch, K, L = cols.shape
    O, columns, BK, TM = w.shape[0], batch * L, IGEMM_BK, IGEMM_MICRO
    W = w.reshape(O, -1).double()
    bias_of = torch.zeros(O, dtype=torch.float64) if bias is None else bias.double()
    threads = (bm // TM) * (bn // TM)
    t = torch.arange(threads)
    tiles_o = -(-O // bm)
    out = torch.zeros(batch, O, L, dtype=torch.float64)
    written = torch.zeros(batch, O, L, dtype=torch.long)
    a_row, b_col4 = (t // (bn // TM)) * TM, (t % (bn // TM)) * 4
    rows = a_row[:, None] + torch.arange(TM)  # (threads, 8) filters of each micro-tile, from o0
    quad = torch.arange(4)
    for block in range(tiles_o * -(-columns // bn)):
        o0, j0 = (block % tiles_o) * bm, (block // tiles_o) * bn
        b_col = t % bn
        j = j0 + b_col
        has_column = j < columns
        n_b, p_b = (j // L).clamp(max=batch - 1), j % L
        acc = torch.zeros(threads, TM, TM, dtype=torch.float64)
        for k0 in range(0, K, BK):
            a_tile = torch.full((BK, bm + IGEMM_PAD_A), float("nan"), dtype=torch.float64)
            b_tile = torch.full((BK, bn), float("nan"), dtype=torch.float64)
            for r in range(bm * BK // threads):
                e = t + r * threads
                m, kk = e // BK, e % BK
                o, k = o0 + m, k0 + kk
                ok = (o < O) & (k < K)
                a_tile[kk, m] = torch.where(ok, W[o.clamp(max=O - 1), k.clamp(max=K - 1)], 0.0)
            for r in range(BK * bn // threads):
                kk = t // bn + r * (threads // bn)
                k = k0 + kk
                ok = has_column & (k < K)
                b_tile[kk, b_col] = torch.where(ok, cols[n_b, k.clamp(max=K - 1), p_b], 0.0)
            for kk in range(BK):
                a = a_tile[kk][rows]  # a_tile[kk][a_row .. a_row + 7]
                b = b_tile[kk][torch.cat([b_col4[:, None] + quad, bn // 2 + b_col4[:, None] + quad], 1)]
                acc += a[:, :, None] * b[:, None, :]
        for g in range(2):
            first = j0 + g * (bn // 2) + b_col4
            n, p = first // L, first % L
            if L % 4 == 0:  # vector_stores: each group is p .. p + 3 of one image, p % 4 == 0
                assert (p % 4 == 0).all()
                for i in range(TM):
                    o = o0 + a_row + i
                    ok = (first < columns) & (o < O)
                    for u in range(4):
                        idx = (n[ok], o[ok], p[ok] + u)
                        out.index_put_(idx, acc[ok, i, g * 4 + u] + bias_of[o[ok]])
                        written.index_put_(idx, torch.ones_like(o[ok]), accumulate=True)
                continue
            for u in range(4):
                for i in range(TM):
                    o = o0 + a_row + i
                    ok = (first + u < columns) & (o < O)
                    idx = (n[ok], o[ok], p[ok])
                    out.index_put_(idx, acc[ok, i, g * 4 + u] + bias_of[o[ok]])
                    written.index_put_(idx, torch.ones_like(o[ok]), accumulate=True)
                p = p + 1
                n, p = torch.where(p == L, n + 1, n), torch.where(p == L, 0, p)
    assert (written == 1).all(), "an output written twice or never"
    out_hw = [(x4.shape[2 + a] + 2 * padding[a] - dilation[a] * (k_size[a] - 1) - 1) // stride[a] + 1
              for a in range(2)]
    return out.view(batch, O, *out_hw)


@pytest.mark.parametrize("bm,bn", IGEMM_TILES)
def test_implicit_gemm_tiling_emulated_on_the_cpu(bm, bn):
    """The kernel's tiling covers every output once, reads only loaded tile elements, and sums to F.conv2d:
    over every sample geometry, with filters over several tiles of either size (the last one partial)."""
    for i, (case, x, params) in enumerate(sample_inputs("cpu", torch.float64)):
        if x.numel() == 0:
            continue
        _, s, p, d = params
        w, b = conv_weight(x, params, out_channels=bm + 3)
        bias = b if i % 2 == 0 else None
        got = emulate_implicit_gemm(x, w, bias, params, bm, bn)
        expected = F.conv2d(x.double() if x.dim() == 4 else x.double()[None], w, bias, s, p, d)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12, msg=case)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_implicit_gemm_both_tile_sizes(dtype):
    """implicit_gemm picks 128 x 128 tiles when they make a block per multiprocessor, else 64 x 64 ones;
    the sample inputs of the ladder test are all small. Here a batch large enough for the large tiles,
    against float64 F.conv2d, and its first image alone (small tiles): the same bits, since every output is
    one thread's sum over k in order whatever the tile (Note [implicit GEMM])."""
    from labops import ladder

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    hw, c, o = 40, 8, 130  # 2 filter tiles of 128; 1600 pixels an image
    batch = -(-sms * 128 // (hw * hw)) + 1
    randn = Seeded("cuda", dtype, seed=9).randn
    x = randn(batch, c, hw, hw)
    params = ((3, 3), (1, 1), (1, 1), (1, 1))
    w, b = conv_weight(x, params, out_channels=o)
    with ladder.use("conv2d_mm", "implicit_gemm"):
        big = labops.conv2d_mm(x, w, b, 1, 1)
        small = labops.conv2d_mm(x[:1], w, b, 1, 1)
        assert ladder.last_rung("conv2d_mm") == 3
    assert_close_scaled(big, F.conv2d(x.double(), w.double(), b.double(), 1, 1), dtype, factor=4)
    torch.testing.assert_close(small, big[:1], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_conv2d_mm_backward_matches_conv2d(device, dtype):
    randn = Seeded(device, dtype, seed=3).randn
    for case, x, params in sample_inputs(device, dtype, seed=4):
        _, s, p, d = params
        w, b = conv_weight(x, params)
        ours = [t.detach().clone().requires_grad_() for t in (x, w, b)]
        theirs = [t.detach().double().requires_grad_() for t in (x, w, b)]
        out = labops.conv2d_mm(*ours, s, p, d)
        grad_out = randn(*out.shape)
        out.backward(grad_out)
        F.conv2d(*theirs, s, p, d).backward(grad_out.double())
        for name, mine, ref in zip(("x", "weight", "bias"), ours, theirs):
            assert mine.grad.dtype == dtype, (case, name)
            # grad_weight sums over N * L terms: allow more rounding in half precision.
            assert_close_scaled(mine.grad, ref.grad, dtype, factor=8, msg=f"{case}: grad {name}")


def test_gradcheck_conv2d_mm_float64(device):
    for case, x, params in sample_inputs(device, torch.float64, seed=5):
        if case not in ("asymmetric", "dilation", "unbatched", "non-contiguous"):
            continue
        _, s, p, d = params
        x = x[:1] if x.dim() == 4 else x  # one image keeps the Jacobians small
        w, b = conv_weight(x, params, out_channels=2)
        inputs = tuple(t.detach().requires_grad_() for t in (x, w, b))
        assert torch.autograd.gradcheck(lambda a, c, e: labops.conv2d_mm(a, c, e, s, p, d), inputs,
                                        fast_mode=True), case
    # Two images, without bias, and the gradient w.r.t. x only / weight only (full Jacobians).
    x = torch.randn(2, 2, 4, 5, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(3, 2, 2, 3, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, c: labops.conv2d_mm(a, c, None, 1, 1), (x, w))
    assert torch.autograd.gradcheck(lambda a: labops.conv2d_mm(a, w.detach(), None, 2, 1), (x,))
    assert torch.autograd.gradcheck(lambda c: labops.conv2d_mm(x.detach(), c, None, 1, (0, 1), 2), (w,))


def test_gradcheck_im2col_col2im_float64(device):
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64, device=device, requires_grad=True)
    args = ((2, 3), (2, 1), (1, 1), (1, 2))
    assert torch.autograd.gradcheck(lambda t: labops.im2col(t, *args), (x,))
    cols = labops.im2col(x.detach(), *args).clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: labops.col2im(t, (5, 6), *args), (cols,))
    # Second order: im2col's backward is col2im and vice versa, each differentiable.
    assert torch.autograd.gradgradcheck(lambda t: labops.im2col(t, *args), (x,))


def every_op_sample(device):
    """(op, args) for im2col, col2im, conv2d_mm, its backward_input, acc_grad_parameters and backward_weight, over every
    sample input (float32); every other sample without bias (and without a bias gradient)."""
    grads = Seeded(device, seed=1)
    for i, (_, x, (k, s, p, d)) in enumerate(sample_inputs(device)):
        k, s, p, d = list(k), list(s), list(p), list(d)
        x.requires_grad_()
        yield torch.ops.labops.im2col.default, (x, k, s, p, d)
        cols = grads.randn(*labops.im2col(x.detach(), k, s, p, d).shape).requires_grad_()
        yield torch.ops.labops.col2im.default, (cols, list(x.shape[-2:]), k, s, p, d)
        w, b = (t.requires_grad_() for t in conv_weight(x, (k, s, p, d)))
        with_bias = i % 2 == 0
        yield torch.ops.labops.conv2d_mm.default, (x, w, b if with_bias else None, s, p, d)
        g = grads.randn(*labops.conv2d_mm(x.detach(), w.detach(), None, s, p, d).shape)
        yield torch.ops.labops.conv2d_mm_backward_input.default, (g, w.detach(), list(x.shape), s, p, d)
        gw, gb = grads.randn(*w.shape), grads.randn(*b.shape)
        yield (torch.ops.labops.conv2d_mm_acc_grad_parameters.default,
               (g, x.detach(), gw, gb if with_bias else None, s, p, d, 0.5 if with_bias else 1.0))
        yield torch.ops.labops.conv2d_mm_backward_weight.default, (g, x.detach(), list(w.shape), s, p, d)


def test_opcheck(device):
    opcheck_every(every_op_sample(device))


def test_dynamic_shapes_compile_the_backward_once():
    # the backward ops take the input and weight sizes as SymInt[]
    assert_one_graph_for_two_shapes(lambda x, w: labops.conv2d_mm(x, w, None, 1, 1), torch.randn(4, 3, 3, 3))


def test_torch_compile_fullgraph(device):
    def block(x, w, b):
        y = labops.conv2d_mm(x, w, b, 1, 1)
        cols = labops.im2col(y, 2, stride=2)
        return labops.col2im(cols * 2.0, y.shape[-2:], 2, stride=2)

    x = torch.randn(2, 3, 8, 8, device=device, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, device=device, requires_grad=True)
    b = torch.randn(4, device=device, requires_grad=True)
    assert_compiled_matches_eager(block, x, w, b, loss=lambda out: out.square().sum())


# ---- the layer contract: updateGradInput and accGradParameters as ops ----

def test_acc_grad_parameters_accumulates_with_scale(device):
    x = torch.randn(3, 2, 7, 6, dtype=torch.float64, device=device)
    w = torch.randn(4, 2, 3, 2, dtype=torch.float64, device=device)
    s, p, d = [1, 2], [1, 1], [2, 1]
    g = torch.randn(labops.conv2d_mm(x, w, None, s, p, d).shape, dtype=torch.float64, device=device)
    acc = torch.ops.labops.conv2d_mm_acc_grad_parameters
    start_w, start_b = torch.randn_like(w), torch.randn(4, dtype=torch.float64, device=device)
    once_w, once_b = start_w.clone(), start_b.clone()
    acc(g, x, once_w, once_b, s, p, d, 1.0)
    twice_w, twice_b = start_w.clone(), start_b.clone()
    acc(g, x, twice_w, twice_b, s, p, d, 0.5)
    acc(g, x, twice_w, twice_b, s, p, d, 0.5)
    torch.testing.assert_close(twice_w, once_w, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(twice_b, once_b, rtol=1e-12, atol=1e-12)
    # What was added is dE/dW from autograd of F.conv2d (the buffers started non-zero).
    wr, br = w.clone().requires_grad_(), torch.zeros(4, dtype=torch.float64, device=device, requires_grad=True)
    F.conv2d(x, wr, br, s, p, d).backward(g)
    torch.testing.assert_close(once_w - start_w, wr.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(once_b - start_b, br.grad, rtol=1e-10, atol=1e-10)
    # A non-contiguous grad_weight accumulates too.
    gw_t = start_w.transpose(0, 1).contiguous().transpose(0, 1)
    acc(g, x, gw_t, None, s, p, d, 1.0)
    torch.testing.assert_close(gw_t, once_w, rtol=1e-12, atol=1e-12)


def test_backward_input_op_matches_conv2d_gradient(device):
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(5, 3, 3, 3, dtype=torch.float64, device=device)
    s, p, d = [2, 1], [1, 2], [1, 2]
    y = F.conv2d(x, w, None, s, p, d)
    g = torch.randn_like(y)
    y.backward(g)
    grad_x = torch.ops.labops.conv2d_mm_backward_input(g, w, list(x.shape), s, p, d)
    torch.testing.assert_close(grad_x, x.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_weight_op_matches_conv2d_gradients(device, dtype):
    # What autograd calls: (grad_weight, grad_bias) at scale 1, in new tensors, over every sample geometry.
    grads = Seeded(device, dtype, 5)
    for case, x, params in sample_inputs(device, dtype):
        k, s, p, d = (list(v) for v in params)
        w, b = conv_weight(x, params)
        xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
        expected = F.conv2d(xr, wr, br, s, p, d)
        g = grads.randn(*expected.shape)
        expected.backward(g.double())
        # The new tensors are written, never read: left-over NaNs where they may be allocated change nothing.
        torch.full((4 * w.numel() + 64,), float("nan"), device=device, dtype=dtype)
        gw, gb = torch.ops.labops.conv2d_mm_backward_weight(g, x, list(w.shape), s, p, d)
        assert gw.shape == w.shape and gb.shape == b.shape, case
        assert_close_scaled(gw, wr.grad, dtype, factor=10, msg=f"{case}: grad_weight")
        assert_close_scaled(gb, br.grad, dtype, factor=10, msg=f"{case}: grad_bias")
    # grad_output in any layout (the op reads a contiguous copy)
    x, w = Seeded(device, dtype, 6).randn(2, 3, 6, 7), Seeded(device, dtype, 7).randn(5, 3, 3, 3)
    g = Seeded(device, dtype, 8).randn(2, 6, 7, 5).permute(0, 3, 1, 2)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    F.conv2d(xr, wr, None, 1, 1).backward(g.double())
    gw, gb = torch.ops.labops.conv2d_mm_backward_weight(g, x, list(w.shape), [1, 1], [1, 1], [1, 1])
    assert_close_scaled(gw, wr.grad, dtype, factor=10)
    assert_close_scaled(gb, g.double().sum((0, 2, 3)), dtype, factor=10)


def test_columns_chunking_covers_every_image(device):
    # Enough images that the columns buffer is cut into several chunks on any
    # device (a chunk holds at most kColumnBudgetBytes: 1 MiB on the CPU, 512 MiB on a GPU).
    # 9 GPU images of 12 x H x W give chunks of 4 + 4 + 1 images; on the CPU one image's
    # columns (28 MiB) already pass the budget, so each image is cut into bands of output rows.
    n, hw = (3, 512) if device == "cpu" else (9, 1024)
    x = torch.randn(n, 12, hw // 4, hw, device=device)
    w = torch.randn(2, 12, 3, 3, device=device) / 6
    out = labops.conv2d_mm(x, w, None, 1, 1)
    assert_close_scaled(out, F.conv2d(x.double(), w.double(), None, 1, 1), torch.float32, factor=4)
    g = torch.randn_like(out)
    gx = torch.ops.labops.conv2d_mm_backward_input(g, w, list(x.shape), [1, 1], [1, 1], [1, 1])
    gw = torch.zeros_like(w)
    torch.ops.labops.conv2d_mm_acc_grad_parameters(g, x, gw, None, [1, 1], [1, 1], [1, 1], 1.0)
    # backward_weight: the first chunk's GEMM writes, the later ones add; on a GPU the bias is summed chunk by chunk
    new_gw, new_gb = torch.ops.labops.conv2d_mm_backward_weight(g, x, list(w.shape), [1, 1], [1, 1], [1, 1])
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    F.conv2d(xr, wr, None, 1, 1).backward(g.double())
    assert_close_scaled(gx, xr.grad, torch.float32, factor=4)
    assert_close_scaled(gw, wr.grad, torch.float32, factor=10)
    assert_close_scaled(new_gw, wr.grad, torch.float32, factor=10)
    assert_close_scaled(new_gb, g.double().sum((0, 2, 3)), torch.float32, factor=10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_column_bands_cover_every_output_row(device, dtype):
    # One image's columns pass the CPU's 1 MiB budget, so the forward and the weight
    # gradient unfold it a band of output rows at a time (chunk_of moves the top padding
    # down by oh0 * stride_h). Stride, dilation and padding differ along h, and the last
    # band is shorter than the others: 23 output rows in bands of 9 (float64) or 18 (float32).
    randn = Seeded(device, dtype, 3).randn
    x = randn(2, 16, 45, 61)
    w = randn(6, 16, 3, 5) / (16 * 15) ** 0.5
    b = randn(6)
    s, p, d = [2, 1], [2, 1], [2, 1]
    out = labops.conv2d_mm(x, w, b, s, p, d)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
    expected = F.conv2d(xr, wr, br, s, p, d)
    assert out.shape == expected.shape == (2, 6, 23, 59)
    assert_close_scaled(out, expected.detach(), dtype, factor=4)
    g = randn(*out.shape)
    expected.backward(g.double())
    gx = torch.ops.labops.conv2d_mm_backward_input(g, w, list(x.shape), s, p, d)
    assert_close_scaled(gx, xr.grad, dtype, factor=4)
    # accGradParameters accumulates scale * gradient onto what is there
    gw, gb = torch.ones_like(w), torch.ones_like(b)
    torch.ops.labops.conv2d_mm_acc_grad_parameters(g, x, gw, gb, s, p, d, 0.5)
    assert_close_scaled(gw, 1 + 0.5 * wr.grad, dtype, factor=10)
    assert_close_scaled(gb, 1 + 0.5 * br.grad, dtype, factor=10)
    new_gw, new_gb = torch.ops.labops.conv2d_mm_backward_weight(g, x, list(w.shape), s, p, d)
    assert_close_scaled(new_gw, wr.grad, dtype, factor=10)
    assert_close_scaled(new_gb, br.grad, dtype, factor=10)


def test_large_gemms_match_conv2d(device):
    # GEMMs of 2^23 multiply-adds or more take oneDNN on the CPU (Note [oneDNN GEMMs]); 64 -> 64
    # channels, 3x3, 32x32 are 38M per image. The columns (2.4 MB) pass the 1 MiB budget, so the
    # forward writes bands of output rows: a strided result.
    randn = Seeded(device, torch.float32, 6).randn
    x = randn(2, 64, 32, 32)
    w = randn(64, 64, 3, 3) / 24
    b = randn(64)
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    ref = [t.detach().double().requires_grad_() for t in (x, w, b)]
    out = labops.conv2d_mm(*leaves, 1, 1)
    expected = F.conv2d(*ref, 1, 1)
    assert_close_scaled(out, expected.detach(), torch.float32, factor=4)
    g = randn(*out.shape)
    out.backward(g)
    expected.backward(g.double())
    for name, mine, theirs in zip(("x", "weight", "bias"), leaves, ref):
        assert_close_scaled(mine.grad, theirs.grad, torch.float32, factor=10, msg=name)
    gw = torch.ones_like(w)  # accGradParameters adds scale * gradient (beta = 1)
    torch.ops.labops.conv2d_mm_acc_grad_parameters(g, x, gw, None, [1, 1], [1, 1], [1, 1], 0.5)
    assert_close_scaled(gw, 1 + 0.5 * ref[1].grad, torch.float32, factor=10)


def test_cpu_gemm_fallback_matches_conv2d():
    # Float32 CPU GEMMs go through oneDNN where libtorch has it and the CPU runs it, else through
    # ATen (Note [oneDNN GEMMs], csrc/conv2d_mm/cpu.cpp). The tests above run the first path this
    # machine takes; this one reruns the oracle tests with LABOPS_CPU_GEMM=aten, in a fresh process
    # (the choice is made once per process).
    import os
    import subprocess
    import sys

    env = dict(os.environ, LABOPS_CPU_GEMM="aten")
    selected = ("(conv2d_mm_matches_conv2d or backward_matches_conv2d or column_bands or large_gemms) and cpu"
                " and not float64 and not float16 and not bfloat16")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                          __file__, "-k", selected], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and " passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    assert "4 passed" in run.stdout, run.stdout[-500:]


def test_module_matches_nn_conv2d(device):
    torch.manual_seed(0)
    mine = labops.nn.Conv2dMM(3, 5, (3, 2), stride=(2, 1), padding=1, dilation=(1, 2)).to(device)
    native = torch.nn.Conv2d(3, 5, (3, 2), stride=(2, 1), padding=1, dilation=(1, 2)).to(device)
    native.load_state_dict(mine.state_dict())
    assert [n for n, _ in mine.named_parameters()] == ["weight", "bias"]
    x = torch.randn(2, 3, 9, 10, device=device)
    torch.testing.assert_close(mine(x), native(x), rtol=1e-5, atol=1e-5)
    mine(x).sum().backward()
    native(x).sum().backward()
    torch.testing.assert_close(mine.weight.grad, native.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mine.bias.grad, native.bias.grad, rtol=1e-4, atol=1e-4)
    assert labops.nn.Conv2dMM(3, 5, 3, bias=False).bias is None


# ---- the readable references ----

def test_reference_loops_agree_with_torch_and_ops():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 5, 6))
    w = rng.standard_normal((3, 2, 2, 3))
    b = rng.standard_normal(3)
    args = dict(stride=(2, 1), padding=(1, 1), dilation=(1, 2))
    s, p, d = args["stride"], args["padding"], args["dilation"]
    xt, wt, bt = (torch.from_numpy(a) for a in (x, w, b))
    cols = reference.im2col_loop(x, (2, 3), **args)
    assert rel_error(cols, F.unfold(xt, (2, 3), d, p, s)) < 1e-14
    assert rel_error(cols, labops.im2col(xt, (2, 3), s, p, d)) < 1e-14
    folded = reference.col2im_loop(cols, (5, 6), (2, 3), **args)
    assert rel_error(folded, F.fold(torch.from_numpy(cols), (5, 6), (2, 3), d, p, s)) < 1e-14
    y = reference.conv2d_mm_forward_loop(x, w, b, **args)
    assert rel_error(y, F.conv2d(xt, wt, bt, s, p, d)) < 1e-12
    assert rel_error(y, labops.conv2d_mm(xt, wt, bt, s, p, d)) < 1e-12
    g = rng.standard_normal(y.shape)
    xr, wr, br = (t.clone().requires_grad_() for t in (xt, wt, bt))
    F.conv2d(xr, wr, br, s, p, d).backward(torch.from_numpy(g))
    assert rel_error(reference.conv2d_mm_backward_input_loop(g, w, x.shape, **args), xr.grad) < 1e-12
    gw, gb = np.ones_like(w), np.ones_like(b)
    reference.conv2d_mm_acc_grad_parameters_loop(g, x, gw, gb, **args, scale=0.5)
    assert rel_error(gw, 1 + 0.5 * wr.grad) < 1e-12 and rel_error(gb, 1 + 0.5 * br.grad) < 1e-12


# ---- bad arguments ----

def test_bad_arguments_are_rejected(device):
    x = torch.randn(2, 3, 6, 6, device=device)
    w = torch.randn(4, 3, 3, 3, device=device)
    conv = torch.ops.labops.conv2d_mm
    one, zero = [1, 1], [0, 0]
    # weight / in_channels mismatch, through the wrapper and the C++ op.
    with pytest.raises(ValueError, match=r"weight.size\(1\) \(in_channels\) must equal the input's channels 3"):
        labops.conv2d_mm(x, torch.randn(4, 2, 3, 3, device=device))
    with pytest.raises(ValueError, match=r"weight.size\(1\) \(in_channels\) must equal the input's channels 3"):
        conv(x, torch.randn(4, 2, 3, 3, device=device), None, one, zero, one)
    with pytest.raises(ValueError, match="weight must be 4-D"):
        labops.conv2d_mm(x, torch.randn(4, 27, device=device))
    with pytest.raises(ValueError, match="weight must be 4-D"):
        conv(x, torch.randn(4, 27, device=device), None, one, zero, one)
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\)"):
        labops.conv2d_mm(x, w, torch.randn(3, device=device))
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\)"):
        conv(x, w, torch.randn(4, 1, device=device), one, zero, one)
    with pytest.raises(ValueError, match="weight must have the dtype of x"):
        labops.conv2d_mm(x, w.double())
    with pytest.raises(ValueError, match="weight must have the dtype of x"):
        conv(x, w.double(), None, one, zero, one)
    with pytest.raises(ValueError, match="x must be 3-D"):
        labops.conv2d_mm(x[0, 0], w)
    # stride / dilation < 1, negative padding.
    for kwargs, arg, rule in (({"stride": 0}, "stride", ">= 1"), ({"dilation": (1, 0)}, "dilation", ">= 1"),
                              ({"padding": (0, -1)}, "padding", ">= 0")):
        with pytest.raises(ValueError, match=f"{arg} must be {rule}"):
            labops.conv2d_mm(x, w, **kwargs)
        with pytest.raises(ValueError, match=f"{arg} must be {rule}"):
            labops.im2col(x, 3, **kwargs)
        with pytest.raises(ValueError, match=f"{arg} must be {rule}"):
            labops.col2im(torch.randn(2, 27, 16, device=device), (6, 6), 3, **kwargs)
        s, p, d = (kwargs.get(a, v) for a, v in (("stride", 1), ("padding", 0), ("dilation", 1)))
        pair = lambda v: [v, v] if isinstance(v, int) else list(v)  # noqa: E731
        with pytest.raises(ValueError, match=f"{arg} must be {rule}"):
            conv(x, w, None, pair(s), pair(p), pair(d))
        with pytest.raises(ValueError, match=f"{arg} must be {rule}"):
            torch.ops.labops.im2col(x, [3, 3], pair(s), pair(p), pair(d))
    # Kernel larger than the padded input.
    with pytest.raises(ValueError, match=r"must not be larger than the padded input \(6, 6\)"):
        labops.conv2d_mm(x, torch.randn(4, 3, 7, 3, device=device))
    with pytest.raises(ValueError, match=r"must not be larger than the padded input \(8, 8\)"):
        conv(x, torch.randn(4, 3, 3, 3, device=device), None, one, one, [4, 4])
    with pytest.raises(ValueError, match=r"kernel_size \(7, 1\).*must not be larger than the padded input"):
        labops.im2col(x, (7, 1))
    with pytest.raises(ValueError, match=r"kernel_size \(7, 1\).*must not be larger than the padded input"):
        torch.ops.labops.im2col(x, [7, 1], one, zero, one)
    with pytest.raises(ValueError, match=r"kernel_size must have 2 entries \(h, w\), got 3"):
        labops.im2col(x, (3, 3, 3))


def test_bad_col2im_arguments_are_rejected(device):
    cols = torch.randn(2, 27, 16, device=device)  # C=3, 3x3 kernel, 4x4 blocks of a 6x6 image
    fold = torch.ops.labops.col2im
    one, zero = [1, 1], [0, 0]
    assert labops.col2im(cols, (6, 6), 3).shape == (2, 3, 6, 6)
    with pytest.raises(ValueError, match=r"cols.size\(2\) must equal the number of blocks 5 x 5 = 25"):
        labops.col2im(cols, (7, 7), 3)
    with pytest.raises(ValueError, match=r"cols.size\(2\) must equal the number of blocks 5 x 5 = 25"):
        fold(cols, [7, 7], [3, 3], one, zero, one)
    with pytest.raises(ValueError, match=r"cols.size\(1\) must equal the number of blocks"):
        labops.col2im(cols[0], (7, 7), 3)
    with pytest.raises(ValueError, match=r"cols.size\(1\) must be divisible by kernel_h \* kernel_w = 4"):
        labops.col2im(cols, (6, 6), 2)
    with pytest.raises(ValueError, match=r"cols.size\(1\) must be divisible by kernel_h \* kernel_w = 4"):
        fold(cols, [6, 6], [2, 2], one, zero, one)
    with pytest.raises(ValueError, match="must not be larger than the padded input"):
        labops.col2im(cols, (2, 2), 3)
    with pytest.raises(ValueError, match="cols must be 2-D"):
        labops.col2im(cols[None], (6, 6), 3)
    with pytest.raises(ValueError, match=r"output_size must have 2 entries \(h, w\), got 3"):
        labops.col2im(cols, (6, 6, 1), 3)


def test_bad_backward_op_arguments_are_rejected(device):
    x = torch.randn(2, 3, 6, 6, device=device)
    w = torch.randn(4, 3, 3, 3, device=device)
    g = torch.randn(2, 4, 4, 4, device=device)
    one, zero = [1, 1], [0, 0]
    with pytest.raises(ValueError, match=r"grad_output must have the output's shape \[2, 4, 6, 6\]"):
        torch.ops.labops.conv2d_mm_backward_input(g, w, [2, 3, 6, 6], one, one, one)
    with pytest.raises(ValueError, match="input_size must have 3"):
        torch.ops.labops.conv2d_mm_backward_input(g, w, [3, 6, 6, 1, 1], one, zero, one)
    acc = torch.ops.labops.conv2d_mm_acc_grad_parameters
    with pytest.raises(ValueError, match=r"grad_bias must have shape \(4,\)"):
        acc(g, x, torch.zeros_like(w), torch.zeros(5, device=device), one, zero, one, 1.0)
    with pytest.raises(ValueError, match=r"grad_weight.size\(1\) \(in_channels\) must equal"):
        acc(g, x, torch.zeros(4, 2, 3, 3, device=device), None, one, zero, one, 1.0)
    with pytest.raises(ValueError, match="grad_output must have the output's shape"):
        acc(g[:, :, :3], x, torch.zeros_like(w), None, one, zero, one, 1.0)
    backward_weight = torch.ops.labops.conv2d_mm_backward_weight
    with pytest.raises(ValueError, match=r"weight_size must be 4-D \(out_channels, in_channels, kH, kW\), got 3-D"):
        backward_weight(g, x, [4, 3, 3], one, zero, one)
    with pytest.raises(ValueError, match=r"weight_size must be >= 0, got \[-4, 3, 3, 3\]"):
        backward_weight(g, x, [-4, 3, 3, 3], one, zero, one)
    with pytest.raises(ValueError, match=r"weight_size.size\(1\) \(in_channels\) must equal the input's channels 3"):
        backward_weight(g, x, [4, 2, 3, 3], one, zero, one)
    with pytest.raises(ValueError, match=r"grad_output must have the output's shape \[2, 5, 4, 4\]"):
        backward_weight(g, x, [5, 3, 3, 3], one, zero, one)
    with pytest.raises(ValueError, match="grad_output must have the dtype of x"):
        backward_weight(g.double(), x, [4, 3, 3, 3], one, zero, one)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_columns_beyond_int32():
    # N * C*kH*kW * L = 2 * 1 * 41*41 * 800*800 = 2.15e9 > 2^31: a 32-bit column
    # offset would wrap around before the end (4.3 GB of float16 columns).
    free, _ = torch.cuda.mem_get_info()
    n, hw, k = 2, 840, 41
    out_hw = hw - k + 1
    numel = n * k * k * out_hw * out_hw
    assert numel > 2**31
    if free < 2 * 2 * numel + 2**30:
        pytest.skip("needs about 10 GiB of free GPU memory")
    x = torch.randn(n, 1, hw, hw, device="cuda", dtype=torch.float16)
    cols = labops.im2col(x, k)
    assert cols.shape == (n, k * k, out_hw * out_hw)
    # Spot-check the last rows of the last image (past 2^31) and random elements.
    idx_n = torch.tensor([1, 1, 1, 0], device="cuda")
    idx_r = torch.tensor([k * k - 1, k * k - 1, 0, k * k - 1], device="cuda")
    idx_p = torch.tensor([out_hw * out_hw - 1, 0, out_hw * out_hw - 1, 12345], device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    idx_n = torch.cat([idx_n, torch.randint(0, n, (100000,), device="cuda", generator=gen)])
    idx_r = torch.cat([idx_r, torch.randint(0, k * k, (100000,), device="cuda", generator=gen)])
    idx_p = torch.cat([idx_p, torch.randint(0, out_hw * out_hw, (100000,), device="cuda", generator=gen)])
    kh, kw = idx_r // k, idx_r % k
    oh, ow = idx_p // out_hw, idx_p % out_hw
    expected = x[idx_n, 0, oh + kh, ow + kw]
    torch.testing.assert_close(cols[idx_n, idx_r, idx_p], expected, rtol=0, atol=0)
    # col2im's gather reads those same far offsets: fold the columns back.
    image = labops.col2im(cols, (hw, hw), k)
    del cols
    counts_h = torch.minimum(torch.arange(hw, device="cuda") + 1, torch.full((hw,), k, device="cuda"))
    counts_h = torch.minimum(counts_h, (hw - torch.arange(hw, device="cuda")).clamp(max=k))
    counts = (counts_h[:, None] * counts_h[None, :]).float()
    torch.testing.assert_close(image[1, 0].float(), x[1, 0].float() * counts, rtol=4e-3, atol=1e-2)


# ==== r15 (shared checks): added at the end, kept separate ====

# The compiled ops word every pair rule the same way for every convolution
# (csrc/common/check.h: check_pair / check_like).
CANONICAL_PAIR_ERRORS = [
    (dict(stride=[0, 1]), "stride must be >= 1, got [0, 1]"),
    (dict(padding=[0, -1]), "padding must be >= 0, got [0, -1]"),
    (dict(dilation=[1, 0]), "dilation must be >= 1, got [1, 0]"),
    (dict(kernel_size=[3, 0]), "kernel_size must be >= 1, got [3, 0]"),
    (dict(stride=[1, 1, 1]), "stride must have 2 entries (h, w), got 3"),
    (dict(kernel_size=[3]), "kernel_size must have 2 entries (h, w), got 1"),
]


@pytest.mark.parametrize("override,message", CANONICAL_PAIR_ERRORS, ids=[m for _, m in CANONICAL_PAIR_ERRORS])
def test_compiled_op_pair_messages_are_canonical(device, override, message):
    args = dict(kernel_size=[3, 3], stride=[1, 1], padding=[1, 1], dilation=[1, 1])
    args.update(override)
    x = torch.randn(2, 3, 6, 6, device=device)
    with pytest.raises(ValueError) as info:
        torch.ops.labops.im2col(x, args["kernel_size"], args["stride"], args["padding"], args["dilation"])
    assert str(info.value).splitlines()[0] == "labops.im2col: " + message
    if "kernel_size" not in override:  # conv2d_mm takes its kernel from the weight
        with pytest.raises(ValueError) as info:
            torch.ops.labops.conv2d_mm(x, torch.randn(4, 3, 3, 3, device=device), None, args["stride"],
                                       args["padding"], args["dilation"])
        assert str(info.value).splitlines()[0] == "labops.conv2d_mm: " + message


def test_compiled_op_like_messages_are_canonical(device):
    x, w = torch.randn(2, 3, 6, 6, device=device), torch.randn(4, 3, 3, 3, device=device)
    with pytest.raises(ValueError) as info:
        torch.ops.labops.conv2d_mm(x, w.double(), None, [1, 1], [1, 1], [1, 1])
    assert str(info.value).splitlines()[0] == (
        "labops.conv2d_mm: weight must have the dtype of x (Float), got Double")
