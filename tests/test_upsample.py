"""Bilinear upsampling: forward and backward against float64 oracles
(F.interpolate for half_pixel / align_corners, an independent NumPy formula and
onnxruntime for asymmetric), gather == scatter, gradcheck, opcheck,
torch.compile, the reference loops, and bad arguments."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import (Seeded, assert_compiled_matches_eager, opcheck_every, poison_allocator, samples_for_each, t,
                      tolerances)

import labops
from labops import ladder, reference
from labops.testing import rel_error

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
MODES = ["half_pixel", "align_corners", "asymmetric"]
TORCH_MODES = ["half_pixel", "align_corners"]  # the two F.interpolate implements


def sample_inputs(device, dtype=torch.float32, seed=0):
    """(name, x, kwargs): random inputs (never zeros) with the arguments that go with them.

    Covers growing and shrinking, output size 1, input size 1, scale factors
    whose product with the size is not an integer (1.7, 0.6), per-dimension
    pairs, non-contiguous and misaligned inputs, empty batches, rows whose width
    is and is not a multiple of the GPU's vector width, and an output row too
    wide for the GPU gather's shared memory.
    """
    randn = Seeded(device, dtype, seed).randn

    yield "x2", randn(2, 3, 8, 8), dict(scale_factor=2)
    yield "x2-wide-rows", randn(1, 2, 3, 32), dict(scale_factor=2)
    yield "grow-size", randn(2, 3, 5, 7), dict(size=(11, 16))
    yield "shrink-size", randn(1, 4, 13, 17), dict(size=(6, 5))
    yield "grow-h-shrink-w", randn(2, 2, 9, 4), dict(size=(4, 10))
    yield "out-1", randn(2, 3, 5, 6), dict(size=1)
    yield "out-1xN", randn(1, 2, 5, 6), dict(size=(1, 9))
    yield "in-1", randn(1, 2, 1, 1), dict(size=(3, 4))
    yield "scale-1.7", randn(2, 3, 7, 9), dict(scale_factor=1.7)
    yield "scale-0.6", randn(2, 3, 11, 13), dict(scale_factor=0.6)
    yield "scale-pair", randn(1, 3, 10, 6), dict(scale_factor=(2.5, 0.75))
    yield "scale-3-int", randn(1, 2, 4, 5), dict(scale_factor=(3, 3))
    yield "channels-last", randn(2, 6, 5, 3).permute(0, 3, 1, 2), dict(scale_factor=2)
    yield "strided", randn(2, 3, 10, 12)[:, :, ::2, 1::2], dict(size=(9, 8))
    yield "offset", randn(2 * 3 * 4 * 4 + 1)[1:].view(2, 3, 4, 4), dict(scale_factor=2)
    yield "empty-batch", randn(0, 3, 4, 4), dict(scale_factor=2)
    yield "empty-channels", randn(2, 0, 4, 4), dict(size=(3, 3))
    yield "wider-than-smem", randn(1, 1, 2, 6200), dict(scale_factor=2)


# ---- bad arguments (tests/test_arg_rules.py feeds each to the eager op and to its fake) ----
# (op, id, args): each breaks one rule of the op's C++ checks.
ARG_RULE_CASES = [
    ("upsample_bilinear2d", "integer x", (t(1, 2, 4, 4, dtype=torch.uint8), [8, 8], "half_pixel", None, None)),
    ("upsample_bilinear2d", "3-D x", (t(2, 4, 4), [8, 8], "half_pixel", None, None)),
    ("upsample_bilinear2d", "output_size 0", (t(1, 2, 4, 4), [0, 3], "half_pixel", None, None)),
    ("upsample_bilinear2d", "output_size 3 entries", (t(1, 2, 4, 4), [3, 3, 3], "half_pixel", None, None)),
    ("upsample_bilinear2d", "empty height", (t(1, 2, 0, 4), [3, 3], "half_pixel", None, None)),
    ("upsample_bilinear2d", "output too big", (t(1, 2, 4, 4), [2**24 + 1, 3], "half_pixel", None, None)),
    ("upsample_bilinear2d", "negative scale", (t(1, 2, 4, 4), [8, 8], "half_pixel", -2.0, None)),
    ("upsample_bilinear2d", "infinite scale", (t(1, 2, 4, 4), [8, 8], "half_pixel", None, float("inf"))),
    ("upsample_bilinear2d", "coordinate_mode", (t(1, 2, 4, 4), [8, 8], "Half_Pixel", None, None)),
    ("upsample_bilinear2d_backward", "integer grad", (t(1, 2, 8, 8).long(), [1, 2, 4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "3-D grad", (t(2, 8, 8), [1, 2, 4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "input_size rank", (t(1, 2, 8, 8), [4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "negative input_size", (t(1, 2, 8, 8), [-1, 2, 4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "N and C", (t(1, 2, 8, 8), [1, 3, 4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "input width 0", (t(1, 2, 8, 8), [1, 2, 4, 0], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "scale 0", (t(1, 2, 8, 8), [1, 2, 4, 4], "half_pixel", 0.0, None)),
    ("upsample_bilinear2d_backward", "coordinate_mode", (t(1, 2, 8, 8), [1, 2, 4, 4], "pytorch", None, None)),
]


# ---- graph nodes (tests/test_autograd_nodes.py checks each against native PyTorch's) ----
# (name, labops fn, native fn, input shape, whether the node saves a tensor)
AUTOGRAD_NODE_CASES = [
    ("upsample_bilinear2d", lambda a: labops.upsample_bilinear2d(a, scale_factor=2),
     lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"), (2, 3, 4, 4), False),
]


def labops_upsample(x, mode, **kw):
    return labops.upsample_bilinear2d(x, coordinate_mode=mode, **kw)


def torch_upsample(x, mode, **kw):
    return F.interpolate(x, mode="bilinear", align_corners=(mode == "align_corners"), **kw)


def _resolve(x, kw):
    """(out_h, out_w) and the (scale_h, scale_w) F.interpolate would use."""
    out = labops.upsample_bilinear2d_output_size(x, **kw)
    sf = kw.get("scale_factor")
    scales = (None, None) if sf is None else (tuple(sf) if isinstance(sf, tuple) else (sf, sf))
    return out, scales


# ---- an independent oracle for asymmetric: TF1's resize_bilinear(align_corners=False) ----

def tf1_matrix(in_size, out_size, scale_factor):
    """TF1's legacy rule: in = out * scale, top = floor(in), bottom = min(ceil(in), in_size - 1)."""
    scale = 1.0 / scale_factor if scale_factor is not None else in_size / out_size
    src = np.arange(out_size) * scale
    top = np.floor(src).astype(np.int64)
    bottom = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    lerp = src - top
    a = np.zeros((out_size, in_size))
    np.add.at(a, (np.arange(out_size), top), 1.0 - lerp)
    np.add.at(a, (np.arange(out_size), bottom), lerp)
    return a


def asymmetric_oracle(x64, out, scales):
    a_h = tf1_matrix(x64.shape[2], out[0], scales[0])
    a_w = tf1_matrix(x64.shape[3], out[1], scales[1])
    y = a_h @ x64.cpu().numpy() @ a_w.T
    return torch.from_numpy(y).to(x64.device), (a_h, a_w)


def oracle_forward(x64, mode, kw):
    if x64.numel() == 0:  # F.interpolate rejects C == 0; the answer is empty either way
        return x64.new_empty(*x64.shape[:2], *_resolve(x64, kw)[0])
    if mode == "asymmetric":
        out, scales = _resolve(x64, kw)
        return asymmetric_oracle(x64, out, scales)[0]
    return torch_upsample(x64, mode, **kw)


def oracle_backward(x64, g64, mode, kw):
    if x64.numel() == 0:
        return torch.zeros_like(x64)
    if mode == "asymmetric":
        out, scales = _resolve(x64, kw)
        _, (a_h, a_w) = asymmetric_oracle(x64, out, scales)
        return torch.from_numpy(a_h.T @ g64.cpu().numpy() @ a_w).to(x64.device)
    xr = x64.detach().requires_grad_()
    torch_upsample(xr, mode, **kw).backward(g64)
    return xr.grad


def coordinate_atol(x, out_hw, dtype, g=None):
    """The error that rounding the *source coordinate* in the kernel's arithmetic type
    (float for every dtype but float64, as in PyTorch) adds over a float64 oracle.

    src = scale * (x + 0.5) - 0.5 takes three roundings, so it is off by at most
    about 3 * eps * in; an output moves by that times the largest step between
    neighbouring inputs, per dimension. Backward: each input sums at most
    (out/in + 2) weights per dimension, each off by that much, times |g|.
    """
    if x.numel() == 0:
        return 0.0
    eps = 2.0**-53 if dtype == torch.float64 else 2.0**-24
    in_h, in_w = x.shape[2:]
    d_src = 3 * eps * (max(in_h, in_w) + 1)
    if g is None:
        return 2 * d_src * 2 * x.abs().max().item()
    reads = (out_hw[0] / in_h + 2) * (out_hw[1] / in_w + 2)
    return 2 * d_src * reads * g.abs().max().item()


# ---- the ladder (labops.ladder; tests/test_ladder.py runs these cases through every rung) ----

def ladder_cases(device, dtype):
    """(name, op, inputs, expected, terms) for tests/test_ladder.py: every coordinate mode on every sample input
    (growing, shrinking, output or input size 1, odd widths, rows too wide for shared memory, views), as
    upsample_bilinear2d's positional arguments. terms: an output sums 4 products, and its tolerance also takes
    the rounding of the source coordinate in float32 (coordinate_atol, as test_forward_matches_oracle allows):
    sqrt(terms) * atol = 2 * atol + coordinate_atol."""
    _, atol = tolerances(dtype)
    for mode in MODES:
        for case, x, kw in sample_inputs(device, dtype):
            out_hw, _ = _resolve(x, kw)
            terms = ((2 * atol + coordinate_atol(x, out_hw, dtype)) / atol) ** 2
            inputs = (x, kw.get("size"), kw.get("scale_factor"), False, mode)
            yield f"{mode}/{case}", labops.upsample_bilinear2d, inputs, oracle_forward(x.double(), mode, kw), terms


def ladder_refusals(device):
    """(rung, op, inputs, message regex) for inputs a forced rung cannot take on `device`."""
    op = labops.upsample_bilinear2d
    x = torch.randn(2, 3, 8, 8, device=device)
    if device == "cpu":
        yield 3, op, (x, None, 2), r"has no rung 3 on CPU \(rungs 1..2\)"
    else:
        yield (2, op, (x, (16, 10)),
               r"rung 2 \(column_rows\) cannot take this input: the output width 10 is not a multiple of V = 4")
        yield 3, op, (x, (16, 10)), r"rung 3 \(staged_rows\) cannot take this input: the output width 10"
        yield 3, op, (x, (16, 4)), r"rung 3 \(staged_rows\) cannot take this input: it upsamples only"
        yield (3, op, (torch.randn(1, 1, 2, 6200, device=device), None, 2),
               r"rung 3 \(staged_rows\) cannot take this input: the input rows .* do not fit in shared memory")


def test_ladder_defaults_upsample():
    """The default table's conditions, on inputs whose rung is known by construction."""
    x = torch.randn(2, 3, 8, 8)
    assert ladder.default_rung("upsample", "cpu", x, None, 2) == 2
    assert ladder.default_rung("upsample", "cpu", x.half(), (3, 5)) == 2
    assert ladder.default_rung("upsample", "cpu", torch.randn(0, 3, 8, 8), None, 2) is None
    assert ladder.default_rung("upsample", "cuda", x, None, 2) == 3  # 16 columns, both axes grow
    assert ladder.default_rung("upsample", "cuda", x, (16, 16), None, True) == 3  # align_corners: 7/15 a step
    assert ladder.default_rung("upsample", "cuda", x, (16, 10)) == 1  # 10 columns: not whole packs of 4
    assert ladder.default_rung("upsample", "cuda", x.double(), (16, 10)) == 3  # float64 packs are 2 columns
    assert ladder.default_rung("upsample", "cuda", x, (16, 4)) == 2  # the width shrinks
    assert ladder.default_rung("upsample", "cuda", x, None, 0.5) == 2  # both shrink
    wide = torch.randn(1, 1, 2, 6200)  # 2 rows of 6200 floats: over 48 KiB of shared memory
    assert ladder.default_rung("upsample", "cuda", wide, None, 2) == 2
    assert ladder.default_rung("upsample", "cuda", wide[:, :, :, :3000], None, 2) == 3
    assert ladder.default_rung("upsample", "cuda", wide[:, :, :1, :], None, 2) == 3  # one input row: 24.8 KB


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_forward_matches_oracle(device, dtype, mode):
    rtol, atol = tolerances(dtype)
    for case, x, kw in sample_inputs(device, dtype):
        out_hw, _ = _resolve(x, kw)
        poison_allocator(device, x.shape[0] * x.shape[1] * out_hw[0] * out_hw[1] * x.element_size())
        y = labops_upsample(x, mode, **kw)
        assert y.shape == (x.shape[0], x.shape[1], *out_hw) and y.dtype == dtype and y.device == x.device, case
        assert y.is_contiguous(), case
        expected = oracle_forward(x.double(), mode, kw)
        assert y.shape == expected.shape, case
        atol_case = atol + coordinate_atol(x, out_hw, dtype)
        torch.testing.assert_close(y.double(), expected, rtol=rtol, atol=atol_case, msg=case)


@pytest.mark.parametrize("mode", TORCH_MODES)
def test_forward_matches_native_in_its_own_dtype(device, mode):
    # PyTorch computes float32 coordinates in float too, so the two agree to
    # rounding: a few ulps (CUDA's compiler fuses multiply-adds differently on
    # each side; both stay as close to the float64 result). A wrong tap or
    # coordinate mode is off by ~0.1, four orders of magnitude more.
    for case, x, kw in sample_inputs(device, torch.float32, seed=3):
        if x.numel() == 0:
            continue  # F.interpolate rejects C == 0
        torch.testing.assert_close(labops_upsample(x, mode, **kw), torch_upsample(x, mode, **kw),
                                   rtol=1e-5, atol=1e-5, msg=lambda message: f"{case}: {message}")


def test_align_corners_flag_and_default(device):
    x = torch.randn(2, 3, 5, 6, device=device, dtype=torch.float64)
    torch.testing.assert_close(labops.upsample_bilinear2d(x, scale_factor=1.5),
                               labops_upsample(x, "half_pixel", scale_factor=1.5), rtol=0, atol=0)
    torch.testing.assert_close(labops.upsample_bilinear2d(x, scale_factor=1.5, align_corners=True),
                               labops_upsample(x, "align_corners", scale_factor=1.5), rtol=0, atol=0)
    # coordinate_mode wins over align_corners
    torch.testing.assert_close(labops.upsample_bilinear2d(x, size=7, align_corners=True, coordinate_mode="asymmetric"),
                               labops_upsample(x, "asymmetric", size=7), rtol=0, atol=0)


def test_modes_differ_where_write_up_002_says():
    # x2 along w of [0, 1, 2, 3]: PyTorch (half_pixel) reads -0.25 -> 0, 0.25, 0.75, ...;
    # TF1 / TFLite (asymmetric) reads 0, 0.5, 1, ...: the same layer, shifted by a quarter pixel.
    x = torch.arange(4, dtype=torch.float64).view(1, 1, 1, 4)
    half = labops_upsample(x, "half_pixel", size=(1, 8)).flatten().tolist()
    asym = labops_upsample(x, "asymmetric", size=(1, 8)).flatten().tolist()
    corners = labops_upsample(x, "align_corners", size=(1, 8)).flatten().tolist()
    assert half == [0.0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.0]
    assert asym == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.0]
    np.testing.assert_allclose(corners, np.arange(8) * 3 / 7, rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_backward_matches_oracle(device, dtype, mode):
    rtol, atol = tolerances(dtype)
    for k, (case, x, kw) in enumerate(sample_inputs(device, dtype, seed=1)):
        xl = x.detach().requires_grad_()
        y = labops_upsample(xl, mode, **kw)
        g64 = torch.randn(y.shape, dtype=torch.float64)
        g = g64.to(device, dtype)
        if k % 2:  # every other case: a grad_output that is not 16-byte aligned
            g = torch.empty(g.numel() + 1, device=device, dtype=dtype)[1:].view(g.shape).copy_(g)
        y.backward(g)
        expected = oracle_backward(x.double(), g.double(), mode, kw)
        assert xl.grad.shape == x.shape and xl.grad.dtype == dtype, case
        # Each input sums a handful of weighted outputs: a few more roundings than forward.
        atol_case = 4 * atol + coordinate_atol(x, y.shape[2:], dtype, g)
        torch.testing.assert_close(xl.grad.double(), expected, rtol=4 * rtol, atol=atol_case, msg=case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_gather_equals_scatter(device, dtype, mode):
    rtol, atol = tolerances(dtype)
    op = torch.ops.labops.upsample_bilinear2d_backward
    for case, x, kw in sample_inputs(device, dtype, seed=2):
        out, (sh, sw) = _resolve(x, kw)
        g = torch.randn(x.shape[0], x.shape[1], *out, dtype=torch.float64).to(device, dtype)
        args = (g, list(x.shape), mode, sh, sw)
        gather, scatter = op(*args, True), op(*args, False)
        assert gather.dtype == scatter.dtype == dtype and gather.shape == scatter.shape == x.shape, case
        torch.testing.assert_close(gather.double(), scatter.double(), rtol=2 * rtol, atol=2 * atol, msg=case)
        # The gather is a fixed sum per element: bit-identical on a second run.
        assert torch.equal(gather, op(*args, True)), case


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck_float64(device, mode):
    for shape, kw in [((1, 2, 4, 5), dict(size=(7, 3))), ((2, 1, 3, 4), dict(scale_factor=1.7)),
                      ((1, 1, 5, 3), dict(scale_factor=(0.6, 2)))]:
        x = torch.randn(*shape, dtype=torch.float64, device=device, requires_grad=True)
        fn = lambda t: labops_upsample(t, mode, **kw)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (x,))
        assert torch.autograd.gradgradcheck(fn, (x,))  # the backward op's own gradient is the forward


def op_samples(mode, device):
    """(op, args) for the forward and both backward ops (gather and scatter), over every sample input."""
    grads = Seeded(device, seed=1)
    for _, x, kw in sample_inputs(device):
        out_hw, scales = _resolve(x, kw)
        scale_h, scale_w = (None if s is None else float(s) for s in scales)
        yield torch.ops.labops.upsample_bilinear2d.default, (x.requires_grad_(), list(out_hw), mode, scale_h, scale_w)
        g = grads.randn(*x.shape[:2], *out_hw)
        for deterministic in (True, False):
            yield (torch.ops.labops.upsample_bilinear2d_backward.default,
                   (g, list(x.shape), mode, scale_h, scale_w, deterministic))


every_op_sample = samples_for_each(op_samples, MODES)


def test_opcheck(device):
    opcheck_every(every_op_sample(device))


def test_torch_compile_fullgraph(device):
    def block(x):
        up = labops.upsample_bilinear2d(x * 2.0, scale_factor=2)
        return up.sin() + labops.upsample_bilinear2d(x, size=(5, 9), coordinate_mode="asymmetric").sum()

    x = torch.randn(2, 3, 4, 6, device=device, requires_grad=True)
    assert_compiled_matches_eager(block, x)


def test_module_matches_nn_upsample(device):
    x = torch.randn(2, 3, 6, 5, device=device)
    for kw in [dict(scale_factor=2), dict(size=(4, 11), align_corners=True), dict(scale_factor=1.7)]:
        ours = labops.nn.UpsampleBilinear2d(**kw)
        theirs = torch.nn.Upsample(mode="bilinear", align_corners=kw.pop("align_corners", False), **kw)
        torch.testing.assert_close(ours(x), theirs(x), rtol=2e-6, atol=2e-6)
    assert "asymmetric" in repr(labops.nn.UpsampleBilinear2d(size=3, coordinate_mode="asymmetric"))
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        labops.nn.UpsampleBilinear2d()
    with pytest.raises(ValueError, match="coordinate_mode must be one of"):
        labops.nn.UpsampleBilinear2d(size=3, coordinate_mode="tf")


@pytest.mark.parametrize("mode", MODES)
def test_matches_onnxruntime_resize(mode):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from labops.testing import onnx_resize

    x = torch.randn(2, 3, 5, 7)
    for size in ((11, 16), (3, 4), (10, 14)):
        ours = labops_upsample(x, mode, size=size)
        torch.testing.assert_close(ours, onnx_resize(x, size, mode), rtol=1e-5, atol=1e-5, msg=f"{mode} {size}")


def test_reference_loops_agree_with_numpy_and_ops():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 4, 5))
    for mode in MODES:
        for out, sf in [((7, 3), (None, None)), ((6, 8), (1.7, 1.7)), ((1, 1), (None, None))]:
            y = reference.upsample_forward_loop(x, out, mode, sf)
            assert rel_error(y, reference.upsample_forward_numpy(x, out, mode, sf)) < 1e-14
            kw = dict(size=out) if sf[0] is None else dict(scale_factor=sf[0])
            assert rel_error(labops_upsample(torch.from_numpy(x), mode, **kw), y) < 1e-12
            g = rng.standard_normal((2, 2, *out))
            scatter = reference.upsample_backward_scatter_loop(g, (4, 5), mode, sf)
            gather = reference.upsample_backward_gather_loop(g, (4, 5), mode, sf)
            assert rel_error(scatter, gather) < 1e-13
            assert rel_error(scatter, reference.upsample_backward_numpy(g, (4, 5), mode, sf)) < 1e-13
            # the adjoint identity <A x, g> == <x, A^T g> ties forward and backward together
            assert abs((y * g).sum() - (x * scatter).sum()) < 1e-12 * np.abs(y * g).sum()


def test_reference_coordinate_table():
    table = reference.coordinate_table(4, 8)
    assert table["half_pixel"][:3] == [0.0, 0.25, 0.75]  # -0.25 clamped at 0
    assert table["asymmetric"][:3] == [0.0, 0.5, 1.0]
    assert table["align_corners"][-1] == pytest.approx(3.0)
    assert reference.coordinate_table(5, 1)["align_corners"] == [0.0]
    # with a scale factor the step is 1 / scale_factor, not in / out
    assert reference.source_coordinate(3, 7, 11, "asymmetric", scale_factor=1.7) == pytest.approx(3 / 1.7)


# ---- bad arguments ----

def test_size_and_scale_factor_rules(device):
    x = torch.randn(1, 2, 4, 4, device=device)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        labops.upsample_bilinear2d(x)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        labops.upsample_bilinear2d(x, size=8, scale_factor=2)
    for bad in (0, -3, (4, 0)):
        with pytest.raises(ValueError, match="size must be positive"):
            labops.upsample_bilinear2d(x, size=bad)
    with pytest.raises(ValueError, match="size must be an int or a pair of ints"):
        labops.upsample_bilinear2d(x, size=(2, 3, 4))
    with pytest.raises(ValueError, match="size must be an int or a pair of ints"):
        labops.upsample_bilinear2d(x, size=2.5)
    for bad in (0.0, -2.0, (2.0, 0.0), float("inf"), float("nan")):
        with pytest.raises(ValueError, match="scale_factor must be positive"):
            labops.upsample_bilinear2d(x, scale_factor=bad)
    with pytest.raises(ValueError, match="scale_factor 0.1 must leave at least one output pixel"):
        labops.upsample_bilinear2d(x, scale_factor=0.1)
    # the compiled op checks too, for callers that bypass the wrapper
    with pytest.raises(ValueError, match="output_size must be two positive integers"):
        torch.ops.labops.upsample_bilinear2d(x, [0, 3], "half_pixel", None, None)
    with pytest.raises(ValueError, match="scale_h must be a positive finite number or None"):
        torch.ops.labops.upsample_bilinear2d(x, [8, 8], "half_pixel", -2.0, None)


def test_unknown_coordinate_mode(device):
    x = torch.randn(1, 2, 4, 4, device=device)
    with pytest.raises(ValueError, match="coordinate_mode must be one of 'half_pixel', 'align_corners', "
                                         "'asymmetric', got 'tf_half_pixel_for_nn'"):
        labops.upsample_bilinear2d(x, scale_factor=2, coordinate_mode="tf_half_pixel_for_nn")
    with pytest.raises(ValueError, match="coordinate_mode must be 'half_pixel', 'align_corners' or 'asymmetric', "
                                         "got 'Half_Pixel'"):
        torch.ops.labops.upsample_bilinear2d(x, [8, 8], "Half_Pixel", None, None)
    with pytest.raises(ValueError, match="coordinate_mode must be"):
        torch.ops.labops.upsample_bilinear2d_backward(torch.randn(1, 2, 8, 8, device=device), [1, 2, 4, 4],
                                                      "pytorch", None, None)


@pytest.mark.parametrize("shape", [(4, 4), (2, 4, 4), (1, 1, 2, 4, 4)])
def test_non_4d_input_is_rejected(device, shape):
    x = torch.randn(*shape, device=device)
    with pytest.raises(ValueError, match=r"x must be a 4-D \(N, C, H, W\) tensor"):
        labops.upsample_bilinear2d(x, scale_factor=2)
    with pytest.raises(ValueError, match=r"x must be a 4-D \(N, C, H, W\) tensor"):
        torch.ops.labops.upsample_bilinear2d(x, [8, 8], "half_pixel", None, None)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool])
def test_integer_input_is_rejected(device, dtype):
    x = torch.ones(1, 2, 4, 4, device=device, dtype=dtype)
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        labops.upsample_bilinear2d(x, scale_factor=2)
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        torch.ops.labops.upsample_bilinear2d(x, [8, 8], "half_pixel", None, None)
    with pytest.raises(ValueError, match="grad_output must be a floating-point tensor"):
        torch.ops.labops.upsample_bilinear2d_backward(x, [1, 2, 2, 2], "half_pixel", None, None)


def test_empty_spatial_input_is_rejected(device):
    with pytest.raises(ValueError, match="height and width must be between 1 and 2"):
        labops.upsample_bilinear2d(torch.randn(1, 2, 0, 4, device=device), size=3)
    with pytest.raises(ValueError, match="x's height must be between 1 and 2"):
        torch.ops.labops.upsample_bilinear2d(torch.randn(1, 2, 0, 4, device=device), [3, 3], "half_pixel", None, None)


def test_backward_op_checks_input_size(device):
    g = torch.randn(1, 2, 8, 8, device=device)
    op = torch.ops.labops.upsample_bilinear2d_backward
    with pytest.raises(ValueError, match=r"input_size must have 4 entries \(N, C, H, W\)"):
        op(g, [4, 4], "half_pixel", None, None)
    with pytest.raises(ValueError, match="grad_output must have input_size's N and C"):
        op(g, [1, 3, 4, 4], "half_pixel", None, None)
    with pytest.raises(ValueError, match=r"input_size\[3\] must be between 1 and 2"):
        op(g, [1, 2, 4, 0], "half_pixel", None, None)


def test_not_a_tensor_is_rejected():
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        labops.upsample_bilinear2d([[1.0]], size=2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_matches_cpu_in_float64():
    # The same coordinate helper on both devices: float64 results agree to a few ulps.
    for case, x, kw in sample_inputs("cpu", torch.float64, seed=4):
        for mode in MODES:
            cpu = labops_upsample(x, mode, **kw)
            gpu = labops_upsample(x.cuda(), mode, **kw).cpu()
            torch.testing.assert_close(gpu, cpu, rtol=1e-13, atol=1e-13, msg=f"{case} {mode}")


def test_sizes_match_f_interpolate():
    x = torch.empty(1, 1, 7, 13)
    for sf in (1.7, 0.6, 2, 0.5, 3.3, (1.25, 2.75)):
        expected = F.interpolate(x, scale_factor=sf, mode="bilinear").shape[2:]
        assert labops.upsample_bilinear2d_output_size(x, scale_factor=sf) == tuple(expected)
    assert math.floor(7 * 0.6) == labops.upsample_bilinear2d_output_size(x, scale_factor=0.6)[0]
