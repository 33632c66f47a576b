"""batch_norm: forward (training and evaluation, the running statistics' update), the three backward
ops, autograd, gradcheck, opcheck, torch.compile, the modules, the reference, and bad arguments;
every number against F.batch_norm in float64."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import Seeded, assert_compiled_matches_eager, opcheck_every, poison_allocator, t, tolerances

import labops
import labops.torch7 as torch7
from labops import ladder, reference
from labops.testing import rel_error

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
L = torch.ops.labops


def sample_inputs(device, dtype=torch.float32, seed=0):
    """Random inputs: channel means away from zero and unequal spreads, many shapes, contiguous or not."""
    make = Seeded(device, dtype, seed)

    def rand(*shape):
        return make.randn(*shape, scale=3.0, shift=2.0)

    yield "7x7", rand(2, 3, 7, 7)
    yield "2-d (N, C)", rand(5, 6)
    yield "3-d (N, C, L)", rand(3, 4, 9)
    yield "odd", rand(3, 5, 3, 9)
    yield "1x1 planes", rand(4, 6, 1, 1)
    yield "one image", rand(1, 3, 5, 5)
    yield "many values per channel", rand(4, 3, 64, 64)  # 16384 per channel: SIMD lanes, 4 CPU tasks
    yield "many channels", rand(2, 300, 3, 3)
    yield "empty batch", rand(0, 3, 4, 4)
    yield "channels_last", rand(2, 5, 6, 7).contiguous(memory_format=torch.channels_last)
    yield "transposed", rand(2, 3, 9, 5).transpose(-1, -2)
    yield "sliced", rand(2, 6, 9, 9)[:, ::2, 1:, :-2]
    yield "offset (misaligned)", rand(1 + 2 * 3 * 8 * 8)[1:].view(2, 3, 8, 8)


# ---- bad arguments (tests/test_arg_rules.py feeds each to the eager op and to its fake) ----
BX, BC = t(2, 3, 4, 4), t(3)  # 3 channels, and a per-channel vector
BG, BS = t(2, 3, 4, 4), t(3).abs()  # its grad_output, and a saved statistic (float32 for a float32 x)
# (op, id, args): each breaks one rule of the op's C++ checks.
ARG_RULE_CASES = [
    ("batch_norm", "integer x", (BX.long(), None, None, None, None, True, 0.1, 1e-5)),
    ("batch_norm", "1-D x", (BC, None, None, None, None, True, 0.1, 1e-5)),
    ("batch_norm", "weight shape", (BX, t(4), None, None, None, True, 0.1, 1e-5)),
    ("batch_norm", "running_var shape", (BX, None, None, BC, t(3, 1), True, 0.1, 1e-5)),
    ("batch_norm", "weight dtype", (BX, BC.double(), None, None, None, True, 0.1, 1e-5)),
    ("batch_norm", "float16 x, float64 bias", (BX.half(), None, BC.double(), None, None, True, 0.1, 1e-5)),
    ("batch_norm", "parameters of two dtypes", (BX.half(), BC, BC.half(), None, None, True, 0.1, 1e-5)),
    ("batch_norm", "running_mean alone", (BX, None, None, BC, None, True, 0.1, 1e-5)),
    ("batch_norm", "running_var alone", (BX, None, None, None, BC, True, 0.1, 1e-5)),
    ("batch_norm", "eval without running stats", (BX, BC, BC, None, None, False, 0.1, 1e-5)),
    ("batch_norm", "momentum 1.5", (BX, None, None, BC, BC, True, 1.5, 1e-5)),
    ("batch_norm", "momentum -0.1", (BX, None, None, None, None, True, -0.1, 1e-5)),
    ("batch_norm", "eps 0", (BX, None, None, None, None, True, 0.1, 0.0)),
    ("batch_norm", "eps inf", (BX, None, None, BC, BC, False, 0.1, float("inf"))),
    ("batch_norm", "one value per channel", (t(1, 3, 1, 1), None, None, None, None, True, 0.1, 1e-5)),
    ("batch_norm_backward_input", "integer x", (BG, BX.int(), None, BS, BS, True)),
    ("batch_norm_backward_input", "integer grad", (BG.long(), BX, None, BS, BS, True)),
    ("batch_norm_backward_input", "grad shape", (BG[:1], BX, None, BS, BS, True)),
    ("batch_norm_backward_input", "grad dtype", (BG.double(), BX, None, BS, BS, True)),
    ("batch_norm_backward_input", "save_mean shape", (BG, BX, None, t(4), BS, True)),
    ("batch_norm_backward_input", "save_invstd dtype", (BG, BX, None, BS, BS.double(), True)),
    ("batch_norm_backward_input", "float32 statistics of float16 x",
     (BG.half(), BX.half(), None, BS.half(), BS, False)),
    ("batch_norm_backward_input", "weight dtype", (BG, BX, BC.double(), BS, BS, True)),
    ("batch_norm_backward_input", "sums alone", (BG, BX, None, BS, BS, True, BC, None)),
    ("batch_norm_backward_input", "sum_grad shape", (BG, BX, None, BS, BS, True, BC, t(2))),
    ("batch_norm_acc_grad_parameters", "2-D grad", (BG[0, 0], BX, BS, BS, torch.zeros(3), None, 1.0)),
    ("batch_norm_acc_grad_parameters", "grad_weight shape", (BG, BX, BS, BS, torch.zeros(2), None, 1.0)),
    ("batch_norm_acc_grad_parameters", "grad_weight dtype", (BG, BX, BS, BS, torch.zeros(3).double(), None, 1.0)),
    ("batch_norm_acc_grad_parameters", "grad_bias dtype",
     (BG.half(), BX.half(), BS, BS, torch.zeros(3), torch.zeros(3).half(), 1.0)),
    ("batch_norm_acc_grad_parameters", "grad_bias shape", (BG, BX, BS, BS, torch.zeros(3), torch.zeros(3, 1), 1.0)),
    ("batch_norm_backward_parameters", "1-D x", (BC, BC, BS, BS)),
    ("batch_norm_backward_parameters", "grad shape", (BG[:, :2], BX, BS, BS)),
    ("batch_norm_backward_parameters", "save_mean dtype", (BG, BX, BS.half(), BS)),
]


# ---- graph nodes (tests/test_autograd_nodes.py checks each against native PyTorch's) ----
# (name, labops fn, native fn, input shape, whether the node saves a tensor)
AUTOGRAD_NODE_CASES = [
    ("batch_norm", lambda a: labops.batch_norm(a, training=True), lambda a: F.batch_norm(a, None, None, training=True),
     (2, 3, 4, 4), True),
]


def parameters(x, seed=0, dtype=None):
    """weight, bias, running_mean, running_var for x's channels (x's dtype unless given), all non-trivial."""
    make = Seeded(x.device, dtype or x.dtype, seed)
    c = x.shape[1]
    return make.rand(c, low=0.5, high=1.5), make.randn(c), make.randn(c), make.rand(c, low=0.5, high=2.0)


def oracle(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    """F.batch_norm in float64 on copies: (y, running_mean, running_var) after the call."""
    def f64(t):
        return None if t is None else t.detach().double().clone()

    rm, rv = f64(running_mean), f64(running_var)
    y = F.batch_norm(x.double(), rm, rv, f64(weight), f64(bias), training, momentum, eps)
    return y, rm, rv


def statistics_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


MODES = [  # (id, training, affine, running statistics)
    ("train", True, True, True), ("train, no affine", True, False, True), ("train, no running", True, True, False),
    ("train, bare", True, False, False), ("eval", False, True, True), ("eval, no affine", False, False, True),
]


def test_sample_inputs_are_not_zero():
    for _, x in sample_inputs("cpu", torch.float64):
        assert x.numel() == 0 or x.abs().max() > 0.1


@pytest.mark.parametrize("mode", MODES, ids=[m[0] for m in MODES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_matches_f_batch_norm(device, dtype, mode):
    _, training, affine, running = mode
    rtol, atol = tolerances(dtype)
    for case, x in sample_inputs(device, dtype):
        # float16 / bfloat16 take float32 parameters and running statistics (as F.batch_norm allows)
        w, b, rm, rv = parameters(x, dtype=statistics_dtype(dtype) if case != "odd" else dtype)
        w, b = (w, b) if affine else (None, None)
        rm, rv = (rm, rv) if running else (None, None)
        want, want_rm, want_rv = oracle(x, w, b, rm, rv, training)
        poison_allocator(device)
        y, mean, invstd = L.batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)
        assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous(), case
        torch.testing.assert_close(y.double(), want, rtol=rtol, atol=atol, msg=case)
        if running:  # updated in place, in their own dtype
            rtol_p, atol_p = tolerances(rm.dtype)
            torch.testing.assert_close(rm.double(), want_rm, rtol=rtol_p, atol=atol_p, msg=case)
            torch.testing.assert_close(rv.double(), want_rv, rtol=rtol_p, atol=atol_p, msg=case)
        # What is saved: the statistics that normalized, in float32 for half inputs.
        assert mean.dtype == invstd.dtype == statistics_dtype(dtype) and mean.shape == (x.shape[1],), case
        if x.numel() == 0 and training:
            assert mean.isnan().all() and invstd.isnan().all(), case
            continue
        if training:
            dims = [0, *range(2, x.dim())]
            want_mean, want_var = x.double().mean(dims), x.double().var(dims, correction=0)
        else:
            want_mean, want_var = rm.double(), rv.double()
        rtol_s, atol_s = tolerances(statistics_dtype(dtype))
        torch.testing.assert_close(mean.double(), want_mean, rtol=rtol_s, atol=atol_s, msg=case)
        torch.testing.assert_close(invstd.double(), (want_var + 1e-5).rsqrt(), rtol=rtol_s, atol=atol_s, msg=case)


def test_python_face_matches_f_batch_norm(device):
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64, device=device) * 2 + 1
    w, b, rm, rv = parameters(x)
    want, want_rm, want_rv = oracle(x, w, b, rm, rv, True, momentum=0.3, eps=1e-3)
    y = labops.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-3)
    torch.testing.assert_close(y, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rm, want_rm, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rv, want_rv, rtol=1e-12, atol=1e-12)
    want, _, _ = oracle(x, None, None, rm, rv, False)
    torch.testing.assert_close(labops.batch_norm(x, rm, rv), want, rtol=1e-12, atol=1e-12)


def test_large_mean_keeps_its_digits(device):
    # Note [shifted sums]: mean 1000, std 1 in float32. E[x^2] - E[x]^2 would keep about one digit of var.
    make = Seeded(device, torch.float32, seed=3)
    x = make.randn(8, 4, 16, 16, shift=1000.0)
    y, mean, invstd = L.batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    want, _, _ = oracle(x, None, None, None, None, True)
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(invstd.double(), (x.double().var((0, 2, 3), correction=0) + 1e-5).rsqrt(),
                               rtol=1e-4, atol=0)


def test_running_statistics_update_in_place_with_unbiased_variance(device):
    x = torch.randn(3, 2, 4, 5, dtype=torch.float64, device=device) + 3
    rm, rv = torch.full((2,), 0.5, dtype=torch.float64, device=device), torch.full((2,), 2.0, dtype=torch.float64,
                                                                                     device=device)
    mean_before, var_before, version = rm.clone(), rv.clone(), rm._version
    L.batch_norm(x, None, None, rm, rv, True, 0.25, 1e-5)
    m = 3 * 4 * 5
    torch.testing.assert_close(rm, 0.75 * mean_before + 0.25 * x.mean((0, 2, 3)))
    torch.testing.assert_close(rv, 0.75 * var_before + 0.25 * x.var((0, 2, 3), correction=1))
    assert x.var((0, 2, 3), correction=1).allclose(x.var((0, 2, 3), correction=0) * m / (m - 1))
    assert rm._version > version  # autograd sees the write
    # Strided running statistics are updated too (through a contiguous copy).
    buffers = torch.zeros(2, 4, dtype=torch.float64, device=device)
    buffers[:, 1] = 1.0
    L.batch_norm(x, None, None, buffers[:, 0], buffers[:, 1], True, 1.0, 1e-5)
    torch.testing.assert_close(buffers[:, 0], x.mean((0, 2, 3)))
    torch.testing.assert_close(buffers[:, 1], x.var((0, 2, 3), correction=1))
    # Evaluation and momentum 0 leave them as they were.
    before = rm.clone()
    L.batch_norm(x, None, None, rm, rv, False, 0.5, 1e-5)
    L.batch_norm(x, None, None, rm, rv, True, 0.0, 1e-5)
    assert torch.equal(rm, before)


# ---- gradients ----

def _autograd_grads(fn, x, w, b, g):
    leaves = [t for t in (x, w, b) if t is not None and t.requires_grad]
    return torch.autograd.grad(fn(x, w, b), leaves, g)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients_match_f_batch_norm(device, dtype, training):
    rtol, atol = tolerances(dtype)
    for i, (case, x) in enumerate(sample_inputs(device, dtype, seed=1)):
        affine = i % 3 != 2
        w, b, rm, rv = parameters(x, seed=i, dtype=statistics_dtype(dtype) if i % 2 else dtype)
        w, b = (w, b) if affine else (None, None)
        g = Seeded(device, dtype, seed=100 + i).randn(*x.shape)
        leaves = [x.detach().requires_grad_()] + ([w.requires_grad_(), b.requires_grad_()] if affine else [])
        poison_allocator(device)
        got = _autograd_grads(lambda x_, w_, b_: labops.batch_norm(x_, rm.clone(), rv.clone(), w_, b_, training),
                              *leaves + [None] * (3 - len(leaves)), g)
        leaves64 = [t.detach().double().requires_grad_() for t in leaves]
        want = _autograd_grads(
            lambda x_, w_, b_: F.batch_norm(x_, rm.double(), rv.double(), w_, b_, training),
            *leaves64 + [None] * (3 - len(leaves64)), g.double())
        for got_t, want_t, leaf in zip(got, want, leaves, strict=True):
            assert got_t.dtype == leaf.dtype and got_t.shape == leaf.shape, case
            tol = tolerances(leaf.dtype)
            # A parameter gradient is a sum over the channel: its rounding grows with sqrt(M).
            scale = 1.0 if leaf is leaves[0] else max(1.0, (x.numel() / max(1, x.shape[1])) ** 0.5)
            torch.testing.assert_close(got_t.double(), want_t, rtol=tol[0] if leaf is not leaves[0] else rtol,
                                       atol=(tol[1] if leaf is not leaves[0] else atol) * scale, msg=case)


def test_gradient_of_x_alone_and_of_the_parameters_alone(device):
    x = torch.randn(3, 4, 5, 5, dtype=torch.float64, device=device) + 1
    w, b, rm, rv = parameters(x)
    g = torch.randn_like(x)
    for wanted in ("x", "w", "b"):
        xs = x.clone().requires_grad_(wanted == "x")
        ws, bs = w.clone().requires_grad_(wanted == "w"), b.clone().requires_grad_(wanted == "b")
        y = labops.batch_norm(xs, rm, rv, ws, bs, training=True)
        y.backward(g)
        x64, w64, b64 = (t.clone().requires_grad_() for t in (x, w, b))
        F.batch_norm(x64, None, None, w64, b64, True).backward(g)
        for t, ref, name in ((xs, x64, "x"), (ws, w64, "w"), (bs, b64, "b")):
            if name == wanted:
                torch.testing.assert_close(t.grad, ref.grad, rtol=1e-10, atol=1e-12)
            else:
                assert t.grad is None


@pytest.mark.parametrize("shape", [(4, 3, 3, 5), (5, 2), (3, 2, 7)], ids=["4-d", "2-d", "3-d"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_gradcheck_float64(device, shape, training):
    make = Seeded(device, torch.float64, seed=4)
    x = make.randn(*shape, shift=1.0).requires_grad_()
    w, b, rm, rv = (t.requires_grad_(i < 2) for i, t in enumerate(parameters(x)))

    def f(x, w, b):
        return labops.batch_norm(x, rm.clone(), rv.clone(), w, b, training=training)

    assert torch.autograd.gradcheck(f, (x, w, b))
    assert torch.autograd.gradcheck(lambda x: f(x, None, None), (x,))


def test_double_backward_raises(device):
    x = torch.randn(4, 3, 2, 2, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.rand(3, dtype=torch.float64, device=device, requires_grad=True)
    y = labops.batch_norm(x, weight=w, training=True)
    # create_graph=True alone is fine (a gradient penalty's first step): the first derivatives are right.
    gx, gw = torch.autograd.grad(y, (x, w), torch.ones_like(y), create_graph=True)
    want = torch.autograd.grad(F.batch_norm(x, None, None, w, None, True), (x, w), torch.ones_like(y))
    torch.testing.assert_close(gx, want[0])
    torch.testing.assert_close(gw, want[1])
    with pytest.raises(RuntimeError, match="labops.batch_norm: double backward is not implemented"):
        torch.autograd.grad((gx * x).sum() + gw.sum(), x)


# ---- the layer contract: updateGradInput and accGradParameters as ops ----

@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_backward_input_op_matches_autograd(device, training):
    x = torch.randn(3, 4, 5, 6, dtype=torch.float64, device=device) * 2 + 1
    w, b, rm, rv = parameters(x)
    g = torch.randn_like(x)
    _, mean, invstd = L.batch_norm(x, w, b, rm.clone(), rv.clone(), training, 0.1, 1e-5)
    xr = x.clone().requires_grad_()
    F.batch_norm(xr, rm.clone(), rv.clone(), w, b, training).backward(g)
    torch.testing.assert_close(L.batch_norm_backward_input(g, x, w, mean, invstd, training), xr.grad,
                               rtol=1e-10, atol=1e-12)
    # Given the parameter gradients' sums (what autograd does), the same result.
    sums = L.batch_norm_backward_parameters(g, x, mean, invstd)
    torch.testing.assert_close(L.batch_norm_backward_input(g, x, w, mean, invstd, training, *sums), xr.grad,
                               rtol=1e-10, atol=1e-12)


def test_backward_parameters_op_matches_autograd(device):
    x = torch.randn(3, 4, 5, 6, dtype=torch.float64, device=device) - 2
    w, b, _, _ = (t.requires_grad_() for t in parameters(x))
    g = torch.randn_like(x)
    _, mean, invstd = L.batch_norm(x, w.detach(), b.detach(), None, None, True, 0.1, 1e-5)
    F.batch_norm(x, None, None, w, b, True).backward(g)
    grad_w, grad_b = L.batch_norm_backward_parameters(g, x, mean, invstd)
    torch.testing.assert_close(grad_w, w.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grad_b, b.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_acc_grad_parameters_accumulates_with_scale(device, dtype):
    make = Seeded(device, dtype, seed=5)
    x, g = make.randn(3, 4, 6, 5, scale=2.0, shift=1.0), make.randn(3, 4, 6, 5)
    w, b, rm, rv = parameters(x, dtype=statistics_dtype(dtype))
    _, mean, invstd = L.batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
    start_w, start_b = parameters(x, seed=6, dtype=w.dtype)[:2]  # gradients of earlier batches: non-zero
    once_w, once_b = start_w.clone(), start_b.clone()
    L.batch_norm_acc_grad_parameters(g, x, mean, invstd, once_w, once_b, 1.0)
    twice_w, twice_b = start_w.clone(), start_b.clone()
    L.batch_norm_acc_grad_parameters(g, x, mean, invstd, twice_w, twice_b, 0.5)
    L.batch_norm_acc_grad_parameters(g, x, mean, invstd, twice_w, twice_b, 0.5)
    rtol, atol = tolerances(w.dtype)
    torch.testing.assert_close(twice_w, once_w, rtol=rtol, atol=atol * 10)
    torch.testing.assert_close(twice_b, once_b, rtol=rtol, atol=atol * 10)
    # What was added is dE/dweight and dE/dbias of F.batch_norm in float64.
    w64, b64 = w.double().requires_grad_(), b.double().requires_grad_()
    F.batch_norm(x.double(), None, None, w64, b64, True).backward(g.double())
    torch.testing.assert_close((once_w - start_w).double(), w64.grad, rtol=rtol * 10, atol=atol * 30)
    torch.testing.assert_close((once_b - start_b).double(), b64.grad, rtol=rtol * 10, atol=atol * 30)
    # grad_bias may be left out; a strided grad_weight accumulates too.
    strided = torch.zeros(2 * 4, dtype=w.dtype, device=device)[::2]
    L.batch_norm_acc_grad_parameters(g, x, mean, invstd, strided, None, 2.0)
    torch.testing.assert_close(strided, 2 * (once_w - start_w), rtol=rtol, atol=atol * 30)


def test_many_channels_and_a_single_value_per_plane(device):
    # 70000 channels: past CUDA's 65535 blocks in y, which the statistics' kernel loops over.
    x = torch.randn(3, 70000, dtype=torch.float64, device=device)
    w, b, rm, rv = parameters(x)
    want, want_rm, want_rv = oracle(x, w, b, rm, rv, True)
    y = labops.batch_norm(x, rm, rv, w, b, training=True)
    torch.testing.assert_close(y, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(rm, want_rm, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(rv, want_rv, rtol=1e-10, atol=1e-12)


# ---- opcheck and torch.compile ----

def every_op_sample(device):
    """(op, args) for every op over every sample input (float32): forward in training with running
    statistics and in evaluation (every other sample without affine), the three backward ops."""
    grads = Seeded(device, seed=1)
    for i, (_, x) in enumerate(sample_inputs(device)):
        w, b, rm, rv = parameters(x, seed=i)
        affine = i % 2 == 0
        x = x.requires_grad_()
        w, b = (w.requires_grad_(), b.requires_grad_()) if affine else (None, None)
        if x.numel() // x.shape[1] > 1:  # not the empty batch: its statistics are NaN, never "close" to NaN
            yield L.batch_norm.default, (x, w, b, rm, rv, True, 0.1, 1e-5)
        yield L.batch_norm.default, (x, w, b, rm, rv, False, 0.1, 1e-5)
        _, mean, invstd = L.batch_norm(x.detach(), None, None, rm, rv, False, 0.1, 1e-5)
        g = grads.randn(*x.shape)
        xd, wd = x.detach(), None if w is None else w.detach()
        sums = L.batch_norm_backward_parameters(g, xd, mean, invstd)
        yield L.batch_norm_backward_input.default, (g, xd, wd, mean, invstd, True)
        yield L.batch_norm_backward_input.default, (g, xd, wd, mean, invstd, True, *sums)
        yield L.batch_norm_backward_input.default, (g, xd, wd, mean, invstd, False)
        gw, gb = grads.randn(x.shape[1]), grads.randn(x.shape[1])
        yield L.batch_norm_acc_grad_parameters.default, (g, xd, mean, invstd, gw, gb if affine else None, 0.5)
        yield L.batch_norm_backward_parameters.default, (g, xd, mean, invstd)


def test_opcheck(device):
    opcheck_every(every_op_sample(device))


def test_torch_compile_fullgraph(device):
    rm, rv = torch.zeros(3, device=device), torch.ones(3, device=device)
    w = torch.rand(3, device=device, requires_grad=True)
    b = torch.randn(3, device=device, requires_grad=True)
    x = torch.randn(4, 3, 5, 5, device=device, requires_grad=True)

    def block(x, w, b, mean, var):
        return labops.batch_norm(x * 2.0, mean, var, w, b, training=True).relu() * 3.0

    assert_compiled_matches_eager(block, x, w, b, rm, rv, loss=lambda out: out.square().sum())
    # Both runs (compiled, then eager) updated the running statistics in place: twice.
    want_rm, want_rv = torch.zeros(3, device=device), torch.ones(3, device=device)
    for _ in range(2):
        F.batch_norm(x.detach() * 2.0, want_rm, want_rv, None, None, True)
    torch.testing.assert_close(rm, want_rm)
    torch.testing.assert_close(rv, want_rv)


# ---- the modules and the reference ----

def test_module_matches_torch_batch_norm_2d(device):
    torch.manual_seed(7)
    for kwargs in ({}, {"momentum": None}, {"affine": False}, {"track_running_stats": False}, {"eps": 1e-3}):
        ours = labops.nn.BatchNorm2d(5, **kwargs).to(device, torch.float64)
        theirs = torch.nn.BatchNorm2d(5, **kwargs).to(device, torch.float64)
        if ours.weight is not None:
            with torch.no_grad():
                ours.weight.uniform_(0.5, 1.5)
                ours.bias.normal_()
        theirs.load_state_dict(ours.state_dict())  # state_dict compatible both ways
        for step in range(3):
            x = torch.randn(4, 5, 3, 6, dtype=torch.float64, device=device) * (step + 1) + step
            torch.testing.assert_close(ours(x), theirs(x), rtol=1e-10, atol=1e-12, msg=str(kwargs))
        ours.eval(), theirs.eval()
        x = torch.randn(2, 5, 3, 3, dtype=torch.float64, device=device)
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-10, atol=1e-12, msg=str(kwargs))
        for (name, a), (_, t) in zip(ours.state_dict().items(), theirs.state_dict().items(), strict=True):
            torch.testing.assert_close(a, t, rtol=1e-10, atol=1e-12, msg=f"{kwargs}: {name}")
    with pytest.raises(ValueError, match="expected 4D input"):
        labops.nn.BatchNorm2d(3)(torch.randn(2, 3))


def test_torch7_module_matches_autograd(device):
    torch.manual_seed(8)
    layer = torch7.SpatialBatchNormalization(4, momentum=0.2).to(device=device, dtype=torch.float64)
    x = torch.randn(3, 4, 5, 5, dtype=torch.float64, device=device) + 2
    g = torch.randn_like(x)
    layer.gradWeight.normal_()  # gradients of an earlier batch: accGradParameters adds to them
    start = [t.clone() for t in layer.parameters()[1]]
    rm, rv = layer.running_mean.clone(), layer.running_var.clone()
    out = layer.forward(x)
    grad_in = layer.backward(x, g, scale=0.5)
    xa, w, b = x.clone().requires_grad_(), layer.weight.clone().requires_grad_(), layer.bias.clone().requires_grad_()
    ya = F.batch_norm(xa, rm, rv, w, b, True, 0.2)
    ya.backward(g)
    torch.testing.assert_close(out, ya.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_in, xa.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.gradWeight, start[0] + 0.5 * w.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.gradBias, start[1] + 0.5 * b.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.running_mean, rm)
    torch.testing.assert_close(layer.running_var, rv)
    # evaluate(): the running statistics normalize, and the input gradient is w * invstd * g.
    seq = torch7.Sequential().add(layer).evaluate()
    assert not layer.train
    out = seq.forward(x)
    grad_in = seq.backward(x, g)
    xa = x.clone().requires_grad_()
    ya = F.batch_norm(xa, rm, rv, layer.weight, layer.bias, False)
    ya.backward(g)
    torch.testing.assert_close(out, ya.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_in, xa.grad, rtol=1e-12, atol=1e-12)
    seq.training()
    assert layer.train
    assert torch7.SpatialBatchNormalization(3, affine=False).parameters() == ([], [])


def test_reference_agrees_with_torch_and_ops():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2, 4, 5)) * 2 + 1
    g = rng.standard_normal(x.shape)
    w, b = rng.uniform(0.5, 1.5, 2), rng.standard_normal(2)
    rm, rv = rng.standard_normal(2), rng.uniform(0.5, 2.0, 2)
    for training in (True, False):
        y, mean, invstd, new_rm, new_rv = reference.batch_norm_forward_loop(x, w, b, rm, rv, training, 0.1, 1e-5)
        want, want_rm, want_rv = oracle(*(torch.from_numpy(a) for a in (x, w, b, rm, rv)), training)
        assert rel_error(y, want) < 1e-12
        assert rel_error(new_rm, want_rm) < 1e-12 and rel_error(new_rv, want_rv) < 1e-12
        stats = (None, None) if training else (rm, rv)
        y_np, mean_np, invstd_np = reference.batch_norm_forward_numpy(x, w, b, *stats)
        assert rel_error(y_np, y) < 1e-12 and rel_error(mean_np, mean) < 1e-12 and rel_error(invstd_np, invstd) < 1e-12
        y_op, mean_op, invstd_op = L.batch_norm(*(torch.from_numpy(a) for a in (x, w, b, rm.copy(), rv.copy())),
                                                training, 0.1, 1e-5)
        assert rel_error(y_op, y) < 1e-12 and rel_error(invstd_op, invstd) < 1e-12
        gi = reference.batch_norm_backward_input_loop(g, x, w, mean, invstd, training)
        gi_np, gw_np, gb_np = reference.batch_norm_backward_numpy(g, x, w, mean, invstd, training)
        gw, gb = np.ones(2), np.ones(2)
        reference.batch_norm_acc_grad_parameters_loop(g, x, mean, invstd, gw, gb, scale=0.5)
        xt, wt, bt = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
        F.batch_norm(xt, torch.from_numpy(rm), torch.from_numpy(rv), wt, bt, training).backward(torch.from_numpy(g))
        assert rel_error(gi, xt.grad) < 1e-10 and rel_error(gi_np, xt.grad) < 1e-10
        assert rel_error(gw_np, wt.grad) < 1e-10 and rel_error(gb_np, bt.grad) < 1e-10
        assert rel_error(gw, 1 + 0.5 * wt.grad.numpy()) < 1e-12 and rel_error(gb, 1 + 0.5 * bt.grad.numpy()) < 1e-12
        gi_op = L.batch_norm_backward_input(*(torch.from_numpy(a) for a in (g, x, w, mean, invstd)), training)
        assert rel_error(gi_op, gi) < 1e-10


# ---- bad arguments ----

def test_bad_arguments_are_rejected(device):
    x = torch.randn(2, 3, 4, 4, device=device)
    w, b, rm, rv = parameters(x)
    op = L.batch_norm

    def both(message, *, face=None, args=None):
        """The Python face (keyword arguments `face`) and the op (positional `args`) raise `message`."""
        if face is not None:
            with pytest.raises(ValueError, match=message):
                labops.batch_norm(**face)
        if args is not None:
            with pytest.raises(ValueError, match=message):
                op(*args)

    both("x must be a floating-point tensor", face=dict(x=x.long(), training=True),
         args=(x.long(), None, None, None, None, True, 0.1, 1e-5))
    both(r"x must be \(N, C, ...\) with at least 2 dims, got 1-D of shape \[3\]",
         face=dict(x=torch.randn(3, device=device), training=True),
         args=(torch.randn(3, device=device), None, None, None, None, True, 0.1, 1e-5))
    both(r"weight must have shape \(3,\) \(the channels of x, x.size\(1\)\), got \[4\]",
         face=dict(x=x, weight=torch.ones(4, device=device), training=True),
         args=(x, torch.ones(4, device=device), None, None, None, True, 0.1, 1e-5))
    both(r"running_var must have shape \(3,\) \(the channels of x, x.size\(1\)\), got \[3, 1\]",
         face=dict(x=x, running_mean=rm, running_var=rv[:, None], training=True))
    both(r"bias must have shape \(3,\)", args=(x, w, torch.zeros(1, 3, device=device), None, None, True, 0.1, 1e-5))
    both(r"weight must have the dtype of x \(Float\), or Float when x is Half or BFloat16, got Double",
         face=dict(x=x, weight=w.double()))
    both(r"bias must have the dtype of weight \(Float\), got Half",
         args=(x.half(), w, b.half(), None, None, True, 0.1, 1e-5))
    both(r"running_mean must have the dtype of x \(Double\), or Float when x is Half or BFloat16, got Float",
         args=(x.double(), None, None, rm, rv.double(), True, 0.1, 1e-5))
    both("running_mean and running_var must be given together, got running_mean only",
         face=dict(x=x, running_mean=rm, training=True))
    both("running_mean and running_var must be given when training is false", face=dict(x=x),
         args=(x, w, b, None, None, False, 0.1, 1e-5))
    both(r"momentum must be in \[0, 1\], got 1.500000", face=dict(x=x, training=True, momentum=1.5))
    both(r"momentum must be in \[0, 1\], got -0.100000", args=(x, None, None, rm, rv, True, -0.1, 1e-5))
    both("momentum must be in", face=dict(x=x, training=True, momentum=float("nan")))
    both(r"eps must be a finite number > 0, got 0.000000", face=dict(x=x, training=True, eps=0))
    both(r"eps must be a finite number > 0, got inf", args=(x, None, None, rm, rv, True, 0.1, float("inf")))
    both(r"x must have more than 1 value per channel when training .*got x of shape \[1, 3, 1, 1\]",
         face=dict(x=torch.randn(1, 3, 1, 1, device=device), training=True),
         args=(torch.randn(1, 3, 1, 1, device=device), None, None, None, None, True, 0.1, 1e-5))
    # One value per channel is fine in evaluation, as for F.batch_norm.
    labops.batch_norm(torch.randn(1, 3, 1, 1, device=device), rm, rv)
    if device == "cuda":
        both(r"weight must be on the device of x \(cuda:0\), got cpu", args=(x, w.cpu(), None, None, None, True,
                                                                           0.1, 1e-5))
    # The Python face's own type checks.
    for kwargs, message in ((dict(training=1), "training must be a bool, got 1"),
                            (dict(momentum="0.1", training=True), "momentum must be a number"),
                            (dict(eps=None, training=True), "eps must be a number"),
                            (dict(weight=[1.0, 1.0, 1.0], training=True), "weight must be a torch.Tensor")):
        with pytest.raises(TypeError, match=message):
            labops.batch_norm(x, **kwargs)


def test_bad_backward_arguments_are_rejected(device):
    x = torch.randn(2, 3, 4, 4, device=device)
    g = torch.randn_like(x)
    _, mean, invstd = L.batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    gw, gb = torch.zeros(3, device=device), torch.zeros(3, device=device)
    cases = [
        (L.batch_norm_backward_input, (g[:, :2], x, None, mean, invstd, True),
         r"grad_output must have the shape of x \[2, 3, 4, 4\], got \[2, 2, 4, 4\]"),
        (L.batch_norm_backward_input, (g.double(), x, None, mean, invstd, True),
         r"grad_output must have the dtype of x \(Float\), got Double"),
        (L.batch_norm_backward_input, (g, x, None, mean[:2], invstd, True), r"save_mean must have shape \(3,\)"),
        (L.batch_norm_backward_input, (g.half(), x.half(), None, mean.half(), invstd, True),
         r"save_mean must have the dtype Float \(the statistics' dtype for x of dtype Half\), got Half"),
        (L.batch_norm_backward_input, (g, x, gw.double(), mean, invstd, True), "weight must have the dtype of x"),
        (L.batch_norm_backward_input, (g, x, None, mean, invstd, True, gw, None),
         "sum_grad_xhat and sum_grad must be given together, got sum_grad_xhat only"),
        (L.batch_norm_backward_input, (g, x, None, mean, invstd, True, gw, gb[:1]), r"sum_grad must have shape \(3,\)"),
        (L.batch_norm_backward_parameters, (g, x[0], mean, invstd), r"grad_output must have the shape of x"),
        (L.batch_norm_backward_parameters, (g.long(), x, mean, invstd), "grad_output must be a floating-point"),
        (L.batch_norm_backward_parameters, (g, x, mean, invstd.double()), "save_invstd must have the dtype Float"),
        (L.batch_norm_acc_grad_parameters, (g, x, mean, invstd, gw[:2], gb, 1.0),
         r"grad_weight must have shape \(3,\)"),
        (L.batch_norm_acc_grad_parameters, (g, x, mean, invstd, gw, gb.double(), 1.0),
         r"grad_bias must have the dtype of grad_weight \(Float\), got Double"),
    ]
    for fn, args, message in cases:
        with pytest.raises(ValueError, match=message):
            fn(*args)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_cuda_matches_cpu_on_a_resnet_shape(dtype):
    # 32 x 64 x 56 x 56, 100352 values per channel, through every CUDA rung of the forward: the textbook's one
    # thread per channel, split_channels's many blocks per channel (Note [channel partial sums]), and the default,
    # block_per_channel (Note [one block per channel]), whose y pass rereads a channel backwards.
    x = torch.randn(32, 64, 56, 56, dtype=dtype) * 2 + 1
    w, b, rm, rv = (t.float() for t in parameters(x))
    g = torch.randn_like(x)

    def run(device):
        xs, ws, bs = (t.detach().to(device).requires_grad_() for t in (x, w, b))  # a leaf on each device
        rms, rvs = rm.clone().to(device), rv.clone().to(device)  # each run updates its own copy
        y = labops.batch_norm(xs, rms, rvs, ws, bs, training=True)
        y.backward(g.to(device))
        return [t.cpu().double() for t in (y.detach(), xs.grad, ws.grad, bs.grad, rms, rvs)]

    on_cpu = run("cpu")
    rtol, atol = tolerances(dtype)
    for rung, rung_name in enumerate(ladder.rungs("batch_norm", "cuda"), start=1):
        with ladder.use("batch_norm", rung):
            on_cuda = run("cuda")
            assert ladder.last_rung("batch_norm") == rung
        for name, a, c in zip(("y", "grad x", "grad w", "grad b", "running mean", "running var"), on_cpu, on_cuda):
            # Sums of 100352 values, added in different orders: y and grad x inherit the statistics' rounding
            # (about sqrt(100352) roundings: 1.4e-5 at most in float32 on an H100, every rung), the sums more.
            scale = math.sqrt(x.numel() / x.shape[1]) / 10 if name in ("y", "grad x") else 100.0
            torch.testing.assert_close(c, a, rtol=rtol, atol=atol * scale, msg=f"{rung_name}: {name}")


# ---- the ladder (labops.ladder; Note [the ladder] in csrc/common/ladder.h) ----

def ladder_cases(device, dtype):
    """(name, op, inputs, expected, terms) for tests/test_ladder.py: the forward, labops.batch_norm(x, running_mean,
    running_var, weight, bias, training), in training and in evaluation, with and without the affine parameters
    and the running statistics (MODES), on every sample input (odd sizes, 1x1 planes, channels_last, sliced and
    misaligned views, an empty batch). expected: F.batch_norm's y in float64. terms 1: y is elementwise once the
    statistics are known, and their rounding is within tolerances(dtype), as test_forward_matches_f_batch_norm
    holds them. In training a call moves the running statistics (each rung's call moves them again); y does not
    read them. test_every_rung_saves_the_statistics_and_moves_the_running_ones checks those."""
    for case, x in sample_inputs(device, dtype):
        w, b, rm, rv = parameters(x, dtype=statistics_dtype(dtype) if case != "odd" else dtype)
        for mode, training, affine, running in MODES:
            weight, bias = (w, b) if affine else (None, None)
            running_mean, running_var = (rm.clone(), rv.clone()) if running else (None, None)
            expected, _, _ = oracle(x, weight, bias, running_mean, running_var, training)
            yield (f"{case}, {mode}", labops.batch_norm, (x, running_mean, running_var, weight, bias, training),
                   expected, 1)


def ladder_refusals(device):
    """(rung, op, inputs, message regex) for inputs a forced rung cannot take on `device`. Every rung takes every
    input (training or evaluation, any dtype, shape, layout or alignment: a rung without 16-byte packs for an input
    uses single values), so the only refusal is a rung the device lacks: the CPU's rung 3. CUDA has none: its three
    rungs are the whole ladder, and a rung 4 is refused by ladder.use itself, before any call."""
    if device == "cpu":
        x = torch.randn(2, 3, 5, 5)
        yield 3, labops.batch_norm, (x, None, None, None, None, True), r"has no rung 3 on CPU \(rungs 1..2\)"


def test_ladder_defaults_follow_training_and_the_channels():
    """LADDER_DEFAULTS (labops/ops/batch_norm.py) on inputs whose rung is known by construction."""
    many, few = torch.randn(2, 64, 3, 3), torch.randn(2, 63, 3, 3)
    stats = (torch.zeros(64), torch.ones(64))
    for dtype in DTYPES:  # the CPU: chunked_simd always
        assert ladder.default_rung("batch_norm", "cpu", many.to(dtype), None, None, None, None, True) == 2
        assert ladder.default_rung("batch_norm", "cpu", many.to(dtype), *stats, None, None, False) == 2
    assert ladder.default_rung("batch_norm", "cuda", many, None, None, None, None, True) == 3  # block_per_channel: C >= 64
    assert ladder.default_rung("batch_norm", "cuda", many.half(), *stats, None, None, True) == 3
    assert ladder.default_rung("batch_norm", "cuda", few, None, None, None, None, True) == 2  # split_channels: fewer than 64 channels
    assert ladder.default_rung("batch_norm", "cuda", many, *stats, None, None, False) == 3  # evaluation too
    assert ladder.default_rung("batch_norm", "cuda", few, torch.zeros(63), torch.ones(63), None, None, False) == 2
    assert ladder.default_rung("batch_norm", "cuda", torch.randn(0, 64, 3, 3), *stats, None, None, False) is None  # no values, no rung


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_rung_saves_the_statistics_and_moves_the_running_ones(device, dtype):
    """What tests/test_ladder.py does not look at: save_mean, save_invstd and the running statistics after a
    forced rung, training and evaluation. Every rung ends a channel with finish_statistics (batch_norm.h), so the
    momentum update is the same formula; only the sums' rounding differs."""
    names = ladder.rungs("batch_norm", device)
    rtol, atol = tolerances(statistics_dtype(dtype))
    for case, x in sample_inputs(device, dtype):
        if x.numel() == 0:
            continue
        w, b, rm, rv = parameters(x, dtype=statistics_dtype(dtype))
        dims = [0, *range(2, x.dim())]
        batch_mean, batch_var = x.double().mean(dims), x.double().var(dims, correction=0)
        _, want_rm, want_rv = oracle(x, w, b, rm, rv, True, momentum=0.3)
        for rung, name in enumerate(names, start=1):
            what = f"{name}: {case}"
            for training in (True, False):
                rm_r, rv_r = rm.clone(), rv.clone()
                with ladder.use("batch_norm", rung):
                    _, mean, invstd = L.batch_norm(x, w, b, rm_r, rv_r, training, 0.3, 1e-5)
                    assert ladder.last_rung("batch_norm") == rung, what
                want_mean, want_var = (batch_mean, batch_var) if training else (rm.double(), rv.double())
                torch.testing.assert_close(mean.double(), want_mean, rtol=rtol, atol=atol, msg=what)
                torch.testing.assert_close(invstd.double(), (want_var + 1e-5).rsqrt(), rtol=rtol, atol=atol, msg=what)
                if training:
                    torch.testing.assert_close(rm_r.double(), want_rm, rtol=rtol, atol=atol, msg=what)
                    torch.testing.assert_close(rv_r.double(), want_rv, rtol=rtol, atol=atol, msg=what)
                else:
                    assert torch.equal(rm_r, rm) and torch.equal(rv_r, rv), what
