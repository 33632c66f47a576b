"""Depthwise convolution: forward and the three backward ops against F.conv2d(groups=C_in)
in float64, the reference loops, gradcheck, opcheck, torch.compile, and bad arguments."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import (ONE, ZERO, Seeded, assert_compiled_matches_eager, assert_one_graph_for_two_shapes, opcheck_every,
                      t, tolerances)

import labops
from labops import reference
from labops._checks import pair
from labops.testing import rel_error

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
L = torch.ops.labops

# name, (N, C_in, H, W), multiplier, (kH, kW), stride, padding, dilation, bias
CASES = [
    ("3x3 s1 p1", (2, 3, 9, 11), 1, (3, 3), 1, 1, 1, True),
    ("3x3 s2 p1 odd", (2, 4, 13, 15), 1, (3, 3), 2, 1, 1, True),
    ("3x3 s2 p1 even", (1, 3, 12, 10), 2, (3, 3), 2, 1, 1, False),
    ("3x3 s3 p0", (2, 2, 11, 13), 1, (3, 3), 3, 0, 1, True),
    ("3x3 p2 > k-1", (1, 2, 6, 7), 1, (3, 3), 1, 2, 1, True),
    ("5x5 s1 p2 m2", (1, 3, 12, 10), 2, (5, 5), 1, 2, 1, True),
    ("5x5 s2 p2", (2, 2, 15, 13), 1, (5, 5), 2, 2, 1, True),
    ("7x7 s1 p3", (1, 2, 11, 9), 1, (7, 7), 1, 3, 1, True),
    ("1x1 m3", (2, 2, 5, 6), 3, (1, 1), 1, 0, 1, True),
    ("asym k3x5 s(1,2) p(1,2)", (2, 3, 8, 13), 1, (3, 5), (1, 2), (1, 2), 1, True),
    ("asym k(2,3) s(2,1) p(0,1) d(1,2) m2", (1, 2, 9, 10), 2, (2, 3), (2, 1), (0, 1), (1, 2), True),
    ("dilation 2 p2", (2, 3, 10, 9), 1, (3, 3), 1, 2, 2, True),
    ("dilation (2,1) s2 m3", (1, 2, 13, 12), 3, (3, 3), 2, (2, 1), (2, 1), False),
    ("kernel = padded input", (1, 2, 3, 4), 1, (5, 6), 1, 1, 1, True),
    ("empty batch", (0, 3, 8, 8), 2, (3, 3), 1, 1, 1, True),
    ("split reduction 3x3", (8, 2, 64, 64), 1, (3, 3), 1, 1, 1, True),
    # widths that CUDA reads in vectors of 2 or 4 columns (Note [vector row loads]): 'same' padding
    ("3x3 s1 rows of 2", (2, 3, 7, 10), 1, (3, 3), 1, 1, 1, True),
    ("3x3 s2 rows of 4", (2, 3, 10, 16), 1, (3, 3), 2, 1, 1, True),
    ("5x5 s1 rows of 4", (1, 2, 9, 12), 1, (5, 5), 1, 2, 1, True),
    ("5x5 s2 rows of 2", (2, 2, 8, 12), 1, (5, 5), 2, 2, 1, False),
    ("split reduction 7x7 s2", (8, 2, 40, 40), 1, (7, 7), 2, 3, 1, True),
    # CUDA's strided grad-input tiles (Note [gather tiles]) start at input row -padding: many
    # tiles with no padding, and padding past the first tile's lead
    ("3x3 s2 p0 many tiles", (2, 3, 37, 41), 1, (3, 3), 2, 0, 1, True),
    ("3x3 s2 p2 m2", (1, 2, 11, 12), 2, (3, 3), 2, 2, 1, False),
]

# channels_last x, which the op keeps (Note [channels_last] in csrc/depthwise/depthwise.h). On CUDA the
# tiled geometries with multiplier 1 and C a multiple of the pack (4; 2 for float64) run the NHWC
# kernels; the rest go through NCHW copies. Same fields as CASES.
CHANNELS_LAST_CASES = [
    ("cl 3x3 s1 m2 (copies)", (2, 4, 9, 10), 2, (3, 3), 1, 1, 1, True),
    ("cl 3x3 s1", (2, 8, 9, 10), 1, (3, 3), 1, 1, 1, True),
    ("cl 3x3 s2 odd", (2, 12, 13, 15), 1, (3, 3), 2, 1, 1, False),
    ("cl 5x5 s1", (1, 8, 12, 10), 1, (5, 5), 1, 2, 1, True),
    ("cl 5x5 s2", (2, 4, 15, 13), 1, (5, 5), 2, 2, 1, True),
    ("cl 3x3 s2 p0 many tiles", (2, 8, 29, 23), 1, (3, 3), 2, 0, 1, True),
    ("cl 3x3 C=6 (not whole packs)", (2, 6, 9, 10), 1, (3, 3), 1, 1, 1, True),
    ("cl 7x7 (no tiled kernel)", (1, 4, 11, 9), 1, (7, 7), 1, 3, 1, True),
    ("cl 72 channels, 3 lane groups", (2, 72, 7, 7), 1, (3, 3), 1, 1, 1, True),
    ("cl split reduction", (8, 8, 32, 32), 1, (3, 3), 1, 1, 1, True),
]


def sample_inputs(device, dtype=torch.float32, seed=0):
    """(name, x, weight, bias, stride, padding, dilation) over CASES and CHANNELS_LAST_CASES, plus a
    sliced x and an unaligned one. Random normal values, never all zeros."""
    randn = Seeded(device, dtype, seed).randn

    for name, (n, c, h, w), m, (kh, kw), stride, padding, dilation, has_bias in CASES:
        x = randn(n, c, h, w)
        weight = randn(c * m, 1, kh, kw)
        bias = randn(c * m) if has_bias else None
        yield name, x, weight, bias, stride, padding, dilation
    for name, (n, c, h, w), m, (kh, kw), stride, padding, dilation, has_bias in CHANNELS_LAST_CASES:
        x = randn(n, c, h, w).contiguous(memory_format=torch.channels_last)
        yield (name, x, randn(c * m, 1, kh, kw), randn(c * m) if has_bias else None, stride, padding, dilation)
    yield "sliced x", randn(2, 5, 12, 21)[:, 1:, 1:, ::2], randn(4, 1, 3, 3), randn(4), 2, 1, 1
    # contiguous, but one element into its storage: rows of 16 that vector loads may not read
    yield "unaligned x", randn(1 + 2 * 3 * 8 * 16)[1:].view(2, 3, 8, 16), randn(3, 1, 3, 3), randn(3), 1, 1, 1


# ---- bad arguments (tests/test_arg_rules.py feeds each to the eager op and to its fake) ----
X, W, G = t(2, 3, 8, 8), t(6, 1, 3, 3), t(2, 6, 8, 8)  # multiplier 2, padding 1
# (op, id, args): each breaks one rule of the op's C++ checks.
ARG_RULE_CASES = [
    ("depthwise_conv2d", "integer x", (t(2, 3, 8, 8, dtype=torch.int64), W, None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "weight dtype", (X, t(6, 1, 3, 3, dtype=torch.float64), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "3-D x", (t(3, 8, 8), W, None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "3-D weight", (X, t(6, 3, 3), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "stride 3 entries", (X, W, None, [1, 1, 1], ONE, ONE)),
    ("depthwise_conv2d", "padding 1 entry", (X, W, None, ONE, [1], ONE)),
    ("depthwise_conv2d", "no channels", (t(2, 0, 8, 8), W, None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "weight.size(1)", (X, t(6, 2, 3, 3), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "C_out not a multiple", (X, t(5, 1, 3, 3), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "empty kernel", (X, t(6, 1, 0, 3), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "stride 0", (X, W, None, [0, 1], ONE, ONE)),
    ("depthwise_conv2d", "padding -1", (X, W, None, ONE, [1, -1], ONE)),
    ("depthwise_conv2d", "dilation 0", (X, W, None, ONE, ONE, [0, 1])),
    ("depthwise_conv2d", "kernel too big", (t(2, 3, 2, 8), W, None, ONE, ZERO, ONE)),
    ("depthwise_conv2d", "dilated kernel too big", (t(2, 3, 4, 8), W, None, ONE, ZERO, [3, 3])),
    ("depthwise_conv2d", "bias dtype", (X, W, t(6, dtype=torch.float16), ONE, ONE, ONE)),
    ("depthwise_conv2d", "bias shape", (X, W, t(3), ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "integer grad", (G.long(), W, [2, 3, 8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "weight dtype", (G, W.double(), [2, 3, 8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "3-D input_size", (G, W, [3, 8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "negative input_size", (G, W, [2, 3, -8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "grad shape", (G[:, :, 1:], W, [2, 3, 8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_weight", "x dtype", (G, X.double(), [6, 1, 3, 3], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_weight", "weight_size", (G, X, [5, 1, 3, 3], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_weight", "grad shape", (G[:1], X, [6, 1, 3, 3], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_bias", "integer grad", (G.int(),)),
    ("depthwise_conv2d_backward_bias", "3-D grad", (G[0],)),
    ("depthwise_conv2d_acc_grad_parameters", "grad_weight dtype", (G, X, W.double(), None, ONE, ONE, ONE, 1.0)),
    ("depthwise_conv2d_acc_grad_parameters", "grad_weight shape", (G, X, W[:5], None, ONE, ONE, ONE, 1.0)),
    ("depthwise_conv2d_acc_grad_parameters", "grad shape", (G[:1], X, W, None, ONE, ONE, ONE, 1.0)),
    ("depthwise_conv2d_acc_grad_parameters", "grad_bias shape", (G, X, W, torch.zeros(5), ONE, ONE, ONE, 1.0)),
]


# ---- graph nodes (tests/test_autograd_nodes.py checks each against native PyTorch's) ----
# (name, labops fn, native fn, input shape, whether the node saves a tensor)
# A row's fn takes x alone: the weight is closed over (it needs no gradient, so the node saves it alone).
NODE_WEIGHT = torch.randn(6, 1, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
AUTOGRAD_NODE_CASES = [
    ("depthwise_conv2d", lambda a: labops.depthwise_conv2d(a, NODE_WEIGHT, None, 1, 1),
     lambda a: F.conv2d(a, NODE_WEIGHT, None, 1, 1, groups=3), (2, 3, 5, 5), True),
]


def layout_of(t):
    """The memory format the op keeps: channels_last for a channels_last x that is not also contiguous."""
    cl = t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()
    return torch.channels_last if cl else torch.contiguous_format


def oracle(x, weight, bias, stride, padding, dilation):
    return F.conv2d(x, weight, bias, stride, padding, dilation, groups=x.shape[1])


def _terms(x, weight, stride, padding, dilation, out):
    """How many products each kind of result sums: forward/grad-input and grad-weight."""
    return weight.shape[2] * weight.shape[3] * (weight.shape[0] // x.shape[1]), max(1, out.shape[0] * out.shape[2] * out.shape[3])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_matches_oracle(device, dtype):
    rtol, atol = tolerances(dtype)
    for case, x, w, b, s, p, d in sample_inputs(device, dtype):
        out = labops.depthwise_conv2d(x, w, b, s, p, d)
        expected = oracle(x.double(), w.double(), None if b is None else b.double(), s, p, d)
        assert out.shape == expected.shape and out.dtype == dtype and out.device == x.device, case
        assert out.is_contiguous(memory_format=layout_of(x)), case
        taps, _ = _terms(x, w, s, p, d, out)
        # sums of `taps` products of unit-size numbers: absolute error grows like sqrt(taps)
        torch.testing.assert_close(out.double(), expected, rtol=rtol, atol=atol * math.sqrt(taps), msg=case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_matches_oracle(device, dtype):
    rtol, atol = tolerances(dtype)
    for case, x, w, b, s, p, d in sample_inputs(device, dtype, seed=1):
        leaves = [t.detach().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
        out = labops.depthwise_conv2d(leaves[0], leaves[1], leaves[2] if b is not None else None, s, p, d)
        # grad_output in the output's layout, as the next layer's backward would give it
        grad_out = Seeded(device, dtype, seed=7).randn(*out.shape).contiguous(memory_format=layout_of(out))
        grads = torch.autograd.grad(out, leaves, grad_out)
        assert grads[0].is_contiguous(memory_format=layout_of(x)), case

        def oracle_grads(leaves, grad):
            ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
            ref_out = oracle(ref_leaves[0], ref_leaves[1], ref_leaves[2] if b is not None else None, s, p, d)
            return torch.autograd.grad(ref_out, ref_leaves, grad.double()) if ref_out.numel() else \
                [torch.zeros_like(t) for t in ref_leaves]

        expected = oracle_grads(leaves, grad_out)
        # The same sums over |terms|: a float sum of many products can be off by about eps times
        # that (grad_w of a 64x64 batch of 8 sums 32768 products, and float32 misses by ~5e-4).
        magnitude = oracle_grads([t.abs() for t in leaves], grad_out.abs())
        eps = torch.finfo(dtype).eps
        taps, positions = _terms(x, w, s, p, d, out)
        for name, got, want, mag, terms in zip(("grad_x", "grad_w", "grad_b"), grads, expected, magnitude,
                                               (taps, positions, positions)):
            assert got.dtype == dtype and got.shape == want.shape, (case, name)
            want, mag = want.cpu(), mag.cpu()
            allowed = rtol * want.abs() + torch.clamp(eps * mag, min=atol * math.sqrt(terms))
            err = (got.double().cpu() - want).abs()
            assert bool((err <= allowed).all()), \
                f"{case}: {name}: max error {err.max():.3g}, allowed there {allowed.flatten()[err.argmax()]:.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_every_output_element_is_written(device, dtype):
    # With deterministic algorithms on, torch fills fresh allocations (outputs and the
    # reduction workspace) with NaN: an element a kernel forgets to write shows up.
    # float16 too: the tiled CUDA kernels take tiles several columns wide, per dtype (odd widths leave
    # columns over).
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for case, x, w, b, s, p, d in sample_inputs(device, dtype, seed=2):
            out = L.depthwise_conv2d(x, w, b, [s] * 2 if isinstance(s, int) else s,
                                     [p] * 2 if isinstance(p, int) else p, [d] * 2 if isinstance(d, int) else d)
            args = ([s, s] if isinstance(s, int) else list(s), [p, p] if isinstance(p, int) else list(p),
                    [d, d] if isinstance(d, int) else list(d))
            g = torch.randn_like(out)
            results = [out, L.depthwise_conv2d_backward_input(g, w, list(x.shape), *args),
                       L.depthwise_conv2d_backward_weight(g, x, list(w.shape), *args),
                       L.depthwise_conv2d_backward_bias(g)]
            for r in results:
                assert torch.isfinite(r).all(), case
    finally:
        torch.use_deterministic_algorithms(old)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_channels_last_layouts_give_the_same_results(device, dtype):
    # Every mix of layouts for the backward ops: the result of each op in its documented layout, and
    # equal to the NCHW computation (the same sums, in the same order or another).
    rtol, atol = tolerances(dtype)
    randn = Seeded(device, dtype, seed=8).randn
    cl = torch.channels_last
    for stride in (1, 2):
        x = randn(4, 16, 10, 9)
        w, b = randn(16, 1, 3, 3), randn(16)
        args = ([stride] * 2, [1, 1], [1, 1])
        out = L.depthwise_conv2d(x, w, b, *args)
        out_cl = L.depthwise_conv2d(x.contiguous(memory_format=cl), w, b, *args)
        assert out_cl.is_contiguous(memory_format=cl) and not out_cl.is_contiguous()
        torch.testing.assert_close(out_cl, out, rtol=rtol, atol=atol)
        g = randn(*out.shape)
        expected = (L.depthwise_conv2d_backward_input(g, w, list(x.shape), *args),
                    L.depthwise_conv2d_backward_weight(g, x, list(w.shape), *args), L.depthwise_conv2d_backward_bias(g))
        for g_layout in (torch.contiguous_format, cl):
            gl = g.contiguous(memory_format=g_layout)
            grad_in = L.depthwise_conv2d_backward_input(gl, w, list(x.shape), *args)
            assert grad_in.is_contiguous(memory_format=g_layout), g_layout
            torch.testing.assert_close(grad_in, expected[0], rtol=rtol, atol=atol)
            torch.testing.assert_close(L.depthwise_conv2d_backward_bias(gl), expected[2], rtol=rtol, atol=atol * 8)
            for x_layout in (torch.contiguous_format, cl):
                grad_w = L.depthwise_conv2d_backward_weight(gl, x.contiguous(memory_format=x_layout), list(w.shape),
                                                            *args)
                assert grad_w.is_contiguous()
                torch.testing.assert_close(grad_w, expected[1], rtol=rtol, atol=atol * 8)


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "channels_last"])
def test_reductions_are_deterministic(device, layout):
    x = torch.randn(8, 8, 64, 64, device=device).contiguous(memory_format=layout)
    w = torch.randn(8, 1, 3, 3, device=device)
    g = torch.randn(8, 8, 64, 64, device=device).contiguous(memory_format=layout)
    args = ([1, 1], [1, 1], [1, 1])
    first = L.depthwise_conv2d_backward_weight(g, x, list(w.shape), *args)
    bias_first = L.depthwise_conv2d_backward_bias(g)
    for _ in range(3):
        assert torch.equal(L.depthwise_conv2d_backward_weight(g, x, list(w.shape), *args), first)
        assert torch.equal(L.depthwise_conv2d_backward_bias(g), bias_first)


def test_reference_loops_match_oracle_and_ops():
    rng = np.random.default_rng(0)
    for (n, c, h, w), m, (kh, kw), s, p, d in [((2, 2, 6, 7), 2, (3, 3), (2, 1), (1, 2), (1, 2)),
                                                ((1, 3, 7, 5), 1, (3, 2), (1, 3), (0, 1), (2, 1))]:
        x, weight = rng.standard_normal((n, c, h, w)), rng.standard_normal((c * m, 1, kh, kw))
        bias = rng.standard_normal(c * m)
        tx, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (x, weight, bias))
        expected = oracle(tx, tw, tb, s, p, d)
        go = torch.randn(expected.shape, dtype=torch.float64)
        gx, gw, gb = torch.autograd.grad(expected, (tx, tw, tb), go)
        y = reference.depthwise_forward_loop(x, weight, bias, s, p, d)
        assert rel_error(y, expected) < 1e-12
        assert rel_error(labops.depthwise_conv2d(tx, tw, tb, s, p, d), y) < 1e-12
        assert rel_error(reference.depthwise_backward_input_loop(go.numpy(), weight, x.shape, s, p, d), gx) < 1e-12
        assert rel_error(reference.depthwise_backward_weight_loop(go.numpy(), x, weight.shape, s, p, d), gw) < 1e-12
        assert rel_error(reference.depthwise_backward_bias_loop(go.numpy()), gb) < 1e-12
        assert reference.depthwise_output_size(h, kh, s[0], p[0], d[0]) == expected.shape[2]


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_gradcheck_float64(device, with_bias):
    randn = Seeded(device, torch.float64, seed=3).randn
    x = randn(2, 2, 7, 6).requires_grad_()
    w = randn(4, 1, 3, 2).requires_grad_()
    b = randn(4).requires_grad_() if with_bias else None
    for s, p, d in [(1, 1, 1), ((2, 1), (1, 0), (1, 2))]:
        inputs = (x, w, b) if with_bias else (x, w)
        fn = (lambda a, c, e: labops.depthwise_conv2d(a, c, e, s, p, d)) if with_bias else \
            (lambda a, c: labops.depthwise_conv2d(a, c, None, s, p, d))
        assert torch.autograd.gradcheck(fn, inputs)


def every_op_sample(device):
    """(op, args) for the forward and its three backward ops (input, weight, bias), over every sample
    input (float32; the samples without bias run the forward without one)."""
    grads = Seeded(device, seed=4)
    for _, x, w, b, *window in sample_inputs(device):
        s, p, d = (pair(v, "depthwise_conv2d", arg) for v, arg in zip(window, ("stride", "padding", "dilation")))
        x, w = x.requires_grad_(), w.requires_grad_()
        b = None if b is None else b.requires_grad_()
        yield L.depthwise_conv2d.default, (x, w, b, s, p, d)
        go = grads.randn(*L.depthwise_conv2d(x, w, b, s, p, d).shape)
        yield L.depthwise_conv2d_backward_input.default, (go, w.detach(), list(x.shape), s, p, d)
        yield L.depthwise_conv2d_backward_weight.default, (go, x.detach(), list(w.shape), s, p, d)
        yield L.depthwise_conv2d_backward_bias.default, (go,)
        gw, gb = grads.randn(*w.shape), None if b is None else grads.randn(*b.shape)
        yield L.depthwise_conv2d_acc_grad_parameters.default, (go, x.detach(), gw, gb, s, p, d, 0.5)


def test_opcheck(device):
    opcheck_every(every_op_sample(device))


def test_dynamic_shapes_compile_the_backward_once():
    # the backward ops take the input and weight sizes as SymInt[]
    assert_one_graph_for_two_shapes(lambda x, w: labops.depthwise_conv2d(x, w, None, 1, 1), torch.randn(3, 1, 3, 3))


def test_torch_compile_fullgraph(device):
    layer = labops.nn.DepthwiseConv2d(4, 3, stride=2, padding=1, multiplier=2).to(device)

    def block(x):
        return labops.depthwise_conv2d(layer(x), layer.weight, None, 1, 1).sum()  # a second layer, 8 channels

    x = torch.randn(2, 4, 11, 10, device=device, requires_grad=True)
    assert_compiled_matches_eager(block, x, params=(layer.weight, layer.bias))


def test_module_matches_conv2d(device):
    torch.manual_seed(5)
    layer = labops.nn.DepthwiseConv2d(3, (3, 5), stride=(1, 2), padding=(1, 2), dilation=1, multiplier=2).to(device)
    assert layer.weight.shape == (6, 1, 3, 5) and layer.bias.shape == (6,)
    assert isinstance(layer.weight, torch.nn.Parameter)
    bound = 1 / math.sqrt(15)  # nn.Conv2d's init: fan_in = kH * kW for a depthwise filter
    assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound
    ref = torch.nn.Conv2d(3, 6, (3, 5), stride=(1, 2), padding=(1, 2), groups=3).to(device)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(2, 3, 9, 12, device=device)
    torch.testing.assert_close(layer(x), ref(x))
    assert labops.nn.DepthwiseConv2d(4, 3, bias=False).bias is None


def _bad(device, **over):
    args = dict(x=torch.randn(2, 3, 8, 8, device=device), weight=torch.randn(6, 1, 3, 3, device=device),
                bias=torch.randn(6, device=device), stride=1, padding=1, dilation=1)
    args.update(over)
    return args


BAD = [
    ("x 3-D", lambda dv: dict(x=torch.randn(3, 8, 8, device=dv)), "x must be 4-D"),
    ("weight 3-D", lambda dv: dict(weight=torch.randn(6, 3, 3, device=dv)), "weight must be 4-D"),
    ("weight.size(1)", lambda dv: dict(weight=torch.randn(6, 3, 3, 3, device=dv)), r"weight.size\(1\) must be 1"),
    ("C_out not multiple", lambda dv: dict(weight=torch.randn(4, 1, 3, 3, device=dv), bias=None),
     r"positive multiple of C_in = 3, got 4"),
    ("bias shape", lambda dv: dict(bias=torch.randn(6, 1, device=dv)), r"bias must have shape \(C_out,\)"),
    ("bias length", lambda dv: dict(bias=torch.randn(3, device=dv)), r"bias must have shape \(C_out,\) = \(6,\)"),
    ("stride 0", lambda dv: dict(stride=0), r"stride must be >= 1, got \[0, 0\]"),
    ("stride negative", lambda dv: dict(stride=(1, -2)), r"stride must be >= 1, got \[1, -2\]"),
    ("padding negative", lambda dv: dict(padding=(-1, 0)), r"padding must be >= 0, got \[-1, 0\]"),
    ("dilation 0", lambda dv: dict(dilation=(1, 0)), "dilation must be >= 1"),
    ("kernel too big", lambda dv: dict(x=torch.randn(2, 3, 2, 8, device=dv), padding=0),
     "the dilated kernel must fit in the padded input"),
    ("dilated kernel too big", lambda dv: dict(x=torch.randn(2, 3, 4, 8, device=dv), dilation=3),
     "the dilated kernel must fit in the padded input"),
    ("weight dtype", lambda dv: dict(weight=torch.randn(6, 1, 3, 3, device=dv, dtype=torch.float64)),
     "weight must have the dtype of x"),
    ("bias dtype", lambda dv: dict(bias=torch.randn(6, device=dv, dtype=torch.float16)), "bias must have the dtype of x"),
    ("weight device", lambda dv: dict(weight=torch.randn(6, 1, 3, 3, device="meta")), "weight must be on the device of x"),
    ("integer x", lambda dv: dict(x=torch.ones(2, 3, 8, 8, device=dv, dtype=torch.int64)),
     "x must be a floating-point tensor"),
    ("stride 3 entries", lambda dv: dict(stride=(1, 1, 1)), "stride must have 2 entries"),
]


@pytest.mark.parametrize("name,override,match", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_raise_value_error(device, name, override, match):
    args = _bad(device, **override(device))
    with pytest.raises(ValueError, match=match):
        labops.depthwise_conv2d(**args)
    # The compiled op checks the same rules for callers that skip the Python wrapper.
    pair = lambda v: [v, v] if isinstance(v, int) else list(v)  # noqa: E731
    if name != "weight device":  # a meta tensor would not reach the CPU/CUDA kernel
        with pytest.raises(ValueError, match=match):
            L.depthwise_conv2d(args["x"], args["weight"], args["bias"], pair(args["stride"]),
                               pair(args["padding"]), pair(args["dilation"]))


def test_backward_ops_check_their_arguments(device):
    go = torch.randn(2, 6, 8, 8, device=device)
    w = torch.randn(6, 1, 3, 3, device=device)
    x = torch.randn(2, 3, 8, 8, device=device)
    args = ([1, 1], [1, 1], [1, 1])
    with pytest.raises(ValueError, match=r"grad_output must have the forward output's shape \[2, 6, 8, 8\]"):
        L.depthwise_conv2d_backward_input(go[:, :, 1:], w, [2, 3, 8, 8], *args)
    with pytest.raises(ValueError, match="input_size must be 4-D"):
        L.depthwise_conv2d_backward_input(go, w, [3, 8, 8], *args)
    with pytest.raises(ValueError, match=r"weight_size.size\(0\) \(C_out\) must be a positive multiple"):
        L.depthwise_conv2d_backward_weight(go, x, [5, 1, 3, 3], *args)
    with pytest.raises(ValueError, match="x must have the dtype of grad_output"):
        L.depthwise_conv2d_backward_weight(go, x.double(), [6, 1, 3, 3], *args)
    with pytest.raises(ValueError, match="grad_output must be 4-D"):
        L.depthwise_conv2d_backward_bias(go[0])


# ==== r15 (shared checks, textbook vs fast paths): added at the end, kept separate ====

# The compiled op words every pair rule the same way for every convolution
# (csrc/common/check.h: check_pair / check_like).
CANONICAL_PAIR_ERRORS = [
    (dict(stride=[0, 1]), "stride must be >= 1, got [0, 1]"),
    (dict(padding=[0, -1]), "padding must be >= 0, got [0, -1]"),
    (dict(dilation=[1, 0]), "dilation must be >= 1, got [1, 0]"),
    (dict(stride=[1, 1, 1]), "stride must have 2 entries (h, w), got 3"),
    (dict(padding=[1]), "padding must have 2 entries (h, w), got 1"),
]


@pytest.mark.parametrize("override,message", CANONICAL_PAIR_ERRORS, ids=[m for _, m in CANONICAL_PAIR_ERRORS])
def test_compiled_op_pair_messages_are_canonical(device, override, message):
    args = dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1])
    args.update(override)
    x, w = torch.randn(2, 3, 8, 8, device=device), torch.randn(6, 1, 3, 3, device=device)
    with pytest.raises(ValueError) as info:
        L.depthwise_conv2d(x, w, None, args["stride"], args["padding"], args["dilation"])
    assert str(info.value).splitlines()[0] == "labops.depthwise_conv2d: " + message


# The fast CPU path (depthwise/cpu.cpp FastLauncher: bordered planes, SIMD rows, the
# flipped-kernel backward) against the textbook path (TextbookLauncher: the per-element
# bodies of depthwise/depthwise.h, one call per element), reached through the private op
# labops::_depthwise_conv2d_textbook. Every gradient, float32 and float64.
# name, (N, C_in, H, W), multiplier, (kH, kW), stride, padding, dilation
FAST_VS_TEXTBOOK = [
    ("3x3", (2, 3, 11, 9), 1, (3, 3), 1, 1, 1),
    ("5x5", (2, 2, 12, 13), 1, (5, 5), 1, 2, 1),
    ("3x3 stride 2", (2, 3, 13, 10), 1, (3, 3), 2, 1, 1),
    ("5x5 stride 2 m2", (1, 2, 15, 12), 2, (5, 5), 2, 2, 1),
    ("3x3 dilation 2", (2, 2, 12, 11), 1, (3, 3), 1, 2, 2),
    ("3x3 multiplier 2", (2, 3, 9, 8), 2, (3, 3), 1, 1, 1),
    ("asym k(2,3) s(2,1) p(0,1) d(1,2) m3", (1, 2, 9, 10), 3, (2, 3), (2, 1), (0, 1), (1, 2)),
    ("3x3 stride 3 padding 2 > dilation*(k-1)", (1, 2, 10, 11), 1, (3, 3), 3, 2, 1),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", FAST_VS_TEXTBOOK, ids=[c[0] for c in FAST_VS_TEXTBOOK])
def test_fast_cpu_path_equals_textbook_path(case, dtype):
    _, shape, mult, (kh, kw), stride, padding, dilation = case
    pair = lambda v: [v, v] if isinstance(v, int) else list(v)  # noqa: E731
    s, p, d = pair(stride), pair(padding), pair(dilation)
    g = torch.Generator().manual_seed(15)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    w = torch.randn(shape[1] * mult, 1, kh, kw, generator=g, dtype=dtype)
    b = torch.randn(shape[1] * mult, generator=g, dtype=dtype)
    out = L.depthwise_conv2d(x, w, b, s, p, d)
    go = torch.randn(out.shape, generator=g, dtype=dtype)
    fast = (out, L.depthwise_conv2d_backward_input(go, w, list(x.shape), s, p, d),
            L.depthwise_conv2d_backward_weight(go, x, list(w.shape), s, p, d),
            L.depthwise_conv2d_backward_bias(go))
    textbook = L._depthwise_conv2d_textbook(x, w, b, go, s, p, d)
    # Same terms, summed in another order (SIMD lanes, flat rows): rounding-level differences only.
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for name, f, t in zip(("out", "grad_input", "grad_weight", "grad_bias"), fast, textbook):
        torch.testing.assert_close(f, t, **tol, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("with_bias", [True, False])
def test_acc_grad_parameters_adds_scale_times_the_gradient(device, with_bias):
    """accGradParameters (Torch7): grad_weight += scale * dE/dW and grad_bias += scale * dE/db, into buffers
    that already hold something; float64 autograd of F.conv2d is the oracle."""
    rng = Seeded(device, torch.float64, seed=11)
    x, w, go = rng.randn(2, 3, 9, 8), rng.randn(6, 1, 3, 3), rng.randn(2, 6, 5, 4)
    gw0, gb0 = rng.randn(6, 1, 3, 3), rng.randn(6)
    gw, gb = gw0.clone(), gb0.clone() if with_bias else None
    L.depthwise_conv2d_acc_grad_parameters(go, x, gw, gb, [2, 2], [1, 1], [1, 1], 0.25)
    wr, br = w.clone().requires_grad_(), torch.zeros(6, dtype=torch.float64, device=device, requires_grad=True)
    torch.nn.functional.conv2d(x, wr, br, stride=2, padding=1, groups=3).backward(go)
    torch.testing.assert_close(gw, gw0 + 0.25 * wr.grad, rtol=1e-10, atol=1e-12)
    if with_bias:
        torch.testing.assert_close(gb, gb0 + 0.25 * br.grad, rtol=1e-10, atol=1e-12)


# ---- the ladder (tests/test_ladder.py runs these on every rung) ----

def ladder_cases(device, dtype):
    """(name, op, inputs, float64 oracle, products per output)."""
    for name, x, w, b, s, p, d in sample_inputs(device, dtype):
        expected = F.conv2d(x.double(), w.double(), None if b is None else b.double(), s, p, d, groups=x.shape[1])
        yield name, labops.depthwise_conv2d, (x, w, b, s, p, d), expected, w.shape[2] * w.shape[3]


def ladder_refusals(device):
    """(rung, op, inputs, message) for inputs a forced rung cannot take on `device`."""
    x = torch.randn(2, 3, 7, 7, device=device)
    w, w7 = torch.randn(3, 1, 3, 3, device=device), torch.randn(3, 1, 7, 7, device=device)
    if device == "cpu":
        yield 3, labops.depthwise_conv2d, (x, w, None, 1, 1), r"has no rung 3 on CPU \(rungs 1..2\)"
        return
    for rung, name in ((2, "tiled"), (3, "tiled_vector_rows")):
        yield rung, labops.depthwise_conv2d, (x, w7, None, 1, 3), rf"rung {rung} \({name}\) .*7x7 kernel"
        yield rung, labops.depthwise_conv2d, (x, w, None, 1, 2, 2), rf"rung {rung} \({name}\) .*dilation \(2, 2\)"
    yield 3, labops.depthwise_conv2d, (x, w, None, 1, 1), r"rung 3 \(tiled_vector_rows\) .*got width 7 -> 7"


def test_ladder_defaults_on_inputs_whose_rung_is_known():
    from labops import ladder

    x = torch.randn(2, 3, 8, 8)
    w3, w7 = torch.randn(3, 1, 3, 3), torch.randn(3, 1, 7, 7)
    assert ladder.default_rung("depthwise", "cpu", x, w7, None, 1, 3, 1) == 2
    assert ladder.default_rung("depthwise", "cuda", x, w3, None, 1, 1, 1) == 3  # 'same', widths 8 -> 8
    assert ladder.default_rung("depthwise", "cuda", torch.randn(2, 3, 8, 9), w3, None, 1, 1, 1) == 2  # odd width
    assert ladder.default_rung("depthwise", "cuda", x, w3, None, 1, 0, 1) == 2  # padding 0: not 'same'
    assert ladder.default_rung("depthwise", "cuda", x, w3, None, 1, 1, 2) == 1  # dilation 2
    assert ladder.default_rung("depthwise", "cuda", x, w7, None, 1, 3, 1) == 1
    assert ladder.default_rung("depthwise", "cuda", torch.randn(0, 3, 8, 8), w3, None, 1, 1, 1) is None  # no images
    cl = torch.randn(2, 8, 8, 8).contiguous(memory_format=torch.channels_last)
    assert ladder.default_rung("depthwise", "cuda", cl, torch.randn(8, 1, 3, 3), None, 1, 1, 1) == 2  # NHWC, in place
    assert ladder.default_rung("depthwise", "cuda", cl, torch.randn(16, 1, 3, 3), None, 1, 1, 1) == 3  # m2: NCHW copy
