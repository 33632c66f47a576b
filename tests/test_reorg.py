"""reorg: the three orders against independent oracles (darknet's own loop,
F.pixel_unshuffle, a NumPy space_to_depth), backward, gradcheck, opcheck,
torch.compile, and bad input."""

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import Seeded, assert_compiled_matches_eager, opcheck_every, poison_allocator, samples_for_each, t

import labops
from labops import ladder, reference

ORDERS = ["darknet", "dcr", "crd"]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def sample_inputs(device, dtype=torch.float32, seed=0):
    """(name, x, stride): random nonzero inputs; C is always divisible by stride^2 (darknet needs it)."""
    make = Seeded(device, dtype, seed)

    def rand(*shape):
        return make.rand(*shape, low=0.5, high=1.5)

    yield "tiny", rand(1, 4, 2, 2), 2
    yield "small", rand(2, 8, 6, 4), 2
    yield "yolo passthrough 26x26", rand(2, 64, 26, 26), 2  # Wo = 13: odd
    yield "Wo multiple of 4", rand(1, 8, 16, 16), 2
    yield "Wo=2 rows", rand(3, 4, 2, 4), 2
    yield "stride 4", rand(2, 16, 8, 16), 4
    yield "stride 3", rand(1, 18, 9, 6), 3
    yield "stride 1", rand(2, 3, 5, 7), 1
    yield "empty batch", rand(0, 4, 4, 4), 2
    yield "empty height", rand(2, 4, 0, 6), 2
    yield "channels_last", rand(2, 8, 6, 10).contiguous(memory_format=torch.channels_last), 2
    yield "sliced", rand(2, 12, 10, 9)[:, 2:10, 1:9, 1:], 2
    yield "offset (misaligned)", rand(1 + 2 * 4 * 6 * 8)[1:].view(2, 4, 6, 8), 2


# ---- bad arguments (tests/test_arg_rules.py feeds each to the eager op and to its fake) ----
# (op, id, args): each breaks one rule of the op's C++ checks.
ARG_RULE_CASES = [
    ("reorg", "integer x", (t(2, 8, 4, 4, dtype=torch.int32), 2, "crd")),
    ("reorg", "order", (t(2, 8, 4, 4), 2, "tf")),
    ("reorg", "3-D x", (t(8, 4, 4), 2, "darknet")),
    ("reorg", "stride 0", (t(2, 8, 4, 4), 0, "crd")),
    ("reorg", "stride too large", (t(2, 8, 4, 4), 2**32, "crd")),
    ("reorg", "height not divisible", (t(2, 8, 5, 4), 2, "crd")),
    ("reorg", "width not divisible", (t(2, 8, 4, 6), 4, "dcr")),
    ("reorg", "darknet channels", (t(2, 6, 4, 4), 2, "darknet")),
    ("reorg_backward", "integer grad", (t(2, 8, 2, 2, dtype=torch.int64), 2, "crd")),
    ("reorg_backward", "order", (t(2, 8, 2, 2), 2, "DCR")),
    ("reorg_backward", "3-D grad", (t(6, 2, 2), 2, "crd")),
    ("reorg_backward", "stride -1", (t(2, 8, 2, 2), -1, "crd")),
    ("reorg_backward", "channels", (t(2, 6, 2, 2), 2, "crd")),
    ("reorg_backward", "darknet channels", (t(2, 8, 2, 2), 2, "darknet")),
]


# ---- graph nodes (tests/test_autograd_nodes.py checks each against native PyTorch's) ----
# (name, labops fn, native fn, input shape, whether the node saves a tensor)
AUTOGRAD_NODE_CASES = [
    ("reorg", lambda a: labops.reorg(a, 2, "crd"), lambda a: F.pixel_unshuffle(a, 2), (2, 3, 4, 4), False),
]


@functools.lru_cache(maxsize=None)
def darknet_gather_index(shape, stride, forward):
    """Run darknet's loop (reference.darknet_reorg_cpu) on positions 0..n-1 once per shape:
    entry j of the result is the element that lands at position j."""
    n, c, h, w = shape
    positions = np.arange(n * c * h * w, dtype=np.int64)
    return reference.darknet_reorg_cpu(positions, w, h, c, n, stride, forward=forward)


def oracle_forward(x, stride, order):
    """Float64 (or exact) oracle on the CPU, independent of labops."""
    n, c, h, w = x.shape
    out_shape = (n, c * stride * stride, h // stride, w // stride)
    x64 = x.detach().double().cpu()
    if x.numel() == 0:  # F.pixel_unshuffle returns empty inputs unchanged, with the wrong shape
        return torch.empty(out_shape, dtype=torch.float64)
    if order == "crd":
        return F.pixel_unshuffle(x64, stride)
    if order == "dcr":
        return torch.from_numpy(reference.reorg_forward_numpy(x64.numpy(), stride, "dcr"))
    # darknet: reorg_cpu(x, w, h, c, batch, stride, forward=0) with the input's dims.
    index = darknet_gather_index(tuple(x.shape), stride, 0)
    return x64.reshape(-1)[torch.from_numpy(index)].reshape(out_shape)


def oracle_backward(g, stride, order):
    n, cs2, ho, wo = g.shape
    in_shape = (n, cs2 // (stride * stride), ho * stride, wo * stride)
    g64 = g.detach().double().cpu()
    if g.numel() == 0:
        return torch.empty(in_shape, dtype=torch.float64)
    if order == "crd":
        return F.pixel_shuffle(g64, stride)
    if order == "dcr":
        return torch.from_numpy(reference.reorg_backward_numpy(g64.numpy(), stride, "dcr"))
    # darknet's backward pass: the same loop with forward=1.
    index = darknet_gather_index(in_shape, stride, 1)
    return g64.reshape(-1)[torch.from_numpy(index)].reshape(in_shape)


# ---- the ladder (labops.ladder; tests/test_ladder.py runs these cases through every rung) ----

def ladder_cases(device, dtype):
    """(name, op, inputs, expected, terms) for tests/test_ladder.py: every order on every sample input (strides
    1 to 4, odd widths, channels_last, sliced and misaligned views). A permutation: each output is one input."""
    for order in ORDERS:
        for case, x, s in sample_inputs(device, dtype):
            yield f"{order}/{case}", labops.reorg, (x, s, order), oracle_forward(x, s, order).to(device), 1


def ladder_refusals(device):
    """(rung, op, inputs, message regex) for inputs a forced rung cannot take on `device`."""
    x = torch.rand(2, 16, 8, 16, device=device)
    if device == "cpu":
        yield (3, labops.reorg, (x, 4, "crd"),
               r"rung 3 \(row_tasks_s2\) cannot take this input: it moves stride 2 only, got stride 4")
    else:
        yield (2, labops.reorg, (torch.rand(1, 18, 9, 6, device=device), 3, "dcr"),
               r"rung 2 \(packed_tasks\) cannot take this input: it moves strides 2 and 4 only, got stride 3")
        yield (2, labops.reorg, (x.double(), 4, "crd"),
               r"rung 2 \(packed_tasks\) cannot take this input: a task of stride 4 is 32 bytes")
        misaligned = torch.rand(1 + 2 * 4 * 6 * 8, device=device)[1:].view(2, 4, 6, 8)
        yield (2, labops.reorg, (misaligned, 2, "darknet"),
               r"rung 2 \(packed_tasks\) cannot take this input: x is not 8-byte aligned")
        yield 3, labops.reorg, (x, 2, "crd"), r"has no rung 3 on CUDA \(rungs 1..2\)"


def test_ladder_defaults_reorg():
    """The default table's conditions, on inputs whose rung is known by construction."""
    x = torch.rand(2, 16, 8, 16)
    assert ladder.default_rung("reorg", "cpu", x, 2, "darknet") == 3
    assert ladder.default_rung("reorg", "cpu", x, 4, "crd") == 2
    assert ladder.default_rung("reorg", "cpu", torch.rand(1, 18, 9, 6), 3, "dcr") == 2
    assert ladder.default_rung("reorg", "cpu", torch.rand(2, 4, 0, 6), 2, "dcr") is None
    assert ladder.default_rung("reorg", "cuda", x, 2, "darknet") == 2
    assert ladder.default_rung("reorg", "cuda", x.half(), 4, "crd") == 2
    assert ladder.default_rung("reorg", "cuda", x.double(), 2, "crd") == 2  # a 16-byte task
    assert ladder.default_rung("reorg", "cuda", x.double(), 4, "crd") == 1  # a 32-byte task
    assert ladder.default_rung("reorg", "cuda", torch.rand(1, 18, 9, 6), 3, "dcr") == 1
    assert ladder.default_rung("reorg", "cuda", torch.rand(1 + 2 * 4 * 6 * 8)[1:].view(2, 4, 6, 8), 2) == 1
    assert ladder.default_rung("reorg", "cuda", torch.rand(2 + 2 * 4 * 6 * 8)[2:].view(2, 4, 6, 8), 2) == 2
    assert ladder.default_rung("reorg", "cuda", x[:, :, :, 1:9], 2) == 2  # copied into fresh memory first


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("order", ORDERS)
def test_forward_matches_oracle(device, dtype, order):
    for case, x, s in sample_inputs(device, dtype):
        poison_allocator(device)
        y = labops.reorg(x, s, order)
        expected = oracle_forward(x, s, order)
        assert y.shape == expected.shape and y.dtype == dtype and y.device == x.device, case
        assert y.is_contiguous(), case
        # A permutation: every element bit for bit.
        assert torch.equal(y.double().cpu(), expected), case


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("order", ORDERS)
def test_backward_matches_oracle(device, dtype, order):
    for case, x, s in sample_inputs(device, dtype, seed=1):
        xl = x.detach().requires_grad_()
        y = labops.reorg(xl, s, order)
        g = (0.5 + torch.rand(y.shape, dtype=torch.float64)).to(device, dtype)
        poison_allocator(device)
        y.backward(g)
        assert xl.grad.shape == x.shape and xl.grad.dtype == dtype, case
        assert torch.equal(xl.grad.double().cpu(), oracle_backward(g, s, order)), case


@pytest.mark.parametrize("order", ORDERS)
def test_backward_op_inverts_forward(device, order):
    for case, x, s in sample_inputs(device, torch.float32, seed=2):
        y = labops.reorg(x, s, order)
        assert torch.equal(torch.ops.labops.reorg_backward(y, s, order), x), case


@pytest.mark.parametrize("shape,s", [((2, 8, 6, 4), 2), ((1, 18, 9, 6), 3), ((2, 64, 26, 26), 2), ((1, 32, 8, 4), 4)])
def test_darknet_is_dcr_of_reinterpreted_memory(device, shape, s):
    n, c, h, w = shape
    x = torch.rand(shape, dtype=torch.float64, device=device) + 0.5
    closed_form = labops.reorg(x.reshape(n, c // (s * s), h * s, w * s), s, "dcr").reshape(n, c * s * s, h // s, w // s)
    assert torch.equal(labops.reorg(x, s, "darknet"), closed_form)
    # The same identity among the references alone: darknet's loop vs the NumPy dcr formula.
    x_np = x.cpu().numpy()
    loop = reference.darknet_reorg_cpu(x_np, w, h, c, n, s, forward=0).reshape(n, c * s * s, h // s, w // s)
    formula = reference.reorg_forward_numpy(x_np.reshape(n, c // (s * s), h * s, w * s), s, "dcr")
    assert np.array_equal(loop, formula.reshape(loop.shape))
    # ...and it is not space-to-depth (unless C == s^2... it never coincides with dcr of x here).
    assert not torch.equal(labops.reorg(x, s, "darknet"), labops.reorg(x, s, "dcr"))


def test_references_agree():
    rng = np.random.default_rng(0)
    for shape, s in [((2, 8, 6, 4), 2), ((1, 9, 3, 6), 3)]:
        x = rng.standard_normal(shape)
        for order in ORDERS:
            y = reference.reorg_forward_loop(x, s, order)
            assert np.array_equal(y, reference.reorg_forward_numpy(x, s, order)), order
            assert np.array_equal(reference.reorg_backward_numpy(y, s, order), x), order
            assert np.array_equal(labops.reorg(torch.from_numpy(x), s, order).numpy(), y), order
    x = rng.standard_normal((1, 4, 2, 2))
    assert np.array_equal(reference.reorg_forward_loop(x, 2, "crd"), F.pixel_unshuffle(torch.from_numpy(x), 2).numpy())


@pytest.mark.parametrize("order", ORDERS)
def test_gradcheck_float64(device, order):
    x = torch.randn(2, 8, 4, 6, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: labops.reorg(t, 2, order), (x,))
    assert torch.autograd.gradgradcheck(lambda t: labops.reorg(t, 2, order), (x,))


def op_samples(order, device):
    """(op, args) for the forward and the backward op, over every sample input (float32)."""
    grads = Seeded(device, seed=1)
    for _, x, stride in sample_inputs(device):
        n, c, h, w = x.shape
        yield torch.ops.labops.reorg.default, (x.requires_grad_(), stride, order)
        g = grads.randn(n, c * stride * stride, h // stride, w // stride).requires_grad_()
        yield torch.ops.labops.reorg_backward.default, (g, stride, order)


every_op_sample = samples_for_each(op_samples, ORDERS)


def test_opcheck(device):
    opcheck_every(every_op_sample(device))


def test_torch_compile_fullgraph(device):
    def passthrough(x):
        return torch.cat([labops.reorg(x, 2, "darknet"), labops.reorg(x * 2.0, 2, "crd")], dim=1)

    def weighted_sum(out):  # a gradient that differs per element, so a permuted gradient shows
        return (out * torch.arange(out.numel(), device=out.device).reshape(out.shape)).sum()

    x = torch.randn(2, 8, 6, 6, device=device, requires_grad=True)
    assert_compiled_matches_eager(passthrough, x, loss=weighted_sum)


def test_module():
    m = labops.nn.Reorg(2, "crd")
    x = torch.randn(2, 4, 6, 6)
    assert torch.equal(m(x), F.pixel_unshuffle(x, 2))
    assert "order='crd'" in repr(m)
    with pytest.raises(ValueError, match="order must be one of"):
        labops.nn.Reorg(2, "tf")
    with pytest.raises(ValueError, match="stride must be an int >= 1"):
        labops.nn.Reorg(0)


BAD = [
    ((2, 8, 4, 4), 0, "crd", "stride must be >= 1, got 0"),
    ((2, 8, 4, 4), -2, "dcr", "stride must be >= 1, got -2"),
    ((2, 8, 5, 4), 2, "crd", "height and width must be divisible by stride 2"),
    ((2, 8, 4, 6), 4, "dcr", "height and width must be divisible by stride 4"),
    ((2, 6, 4, 4), 2, "darknet", "channels must be divisible by stride\\^2 = 4 for order 'darknet'"),
]


@pytest.mark.parametrize("shape,stride,order,message", BAD)
def test_bad_arguments_are_rejected(device, shape, stride, order, message):
    x = torch.randn(shape, device=device)
    with pytest.raises(ValueError, match=message):
        labops.reorg(x, stride, order)
    with pytest.raises(ValueError, match=message):  # the C++ kernel checks too
        torch.ops.labops.reorg(x, stride, order)


def test_other_bad_arguments(device):
    x = torch.randn(2, 8, 4, 4, device=device)
    assert labops.reorg(torch.randn(2, 6, 4, 4, device=device), 2, "dcr").shape == (2, 24, 2, 2)  # darknet-only rule
    with pytest.raises(ValueError, match="order must be one of 'darknet', 'dcr', 'crd', got 'DCR'"):
        labops.reorg(x, 2, "DCR")
    with pytest.raises(ValueError, match="order must be 'darknet', 'dcr' or 'crd', got 'tf'"):
        torch.ops.labops.reorg(x, 2, "tf")
    for bad in (torch.randn(8, 4, 4, device=device), torch.randn(1, 2, 8, 4, 4, device=device)):
        with pytest.raises(ValueError, match=r"x must be a 4-D \(N, C, H, W\) tensor"):
            labops.reorg(bad)
        with pytest.raises(ValueError, match=r"x must be a 4-D \(N, C, H, W\) tensor"):
            torch.ops.labops.reorg(bad, 2, "darknet")
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        labops.reorg(torch.ones(2, 8, 4, 4, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        torch.ops.labops.reorg(torch.ones(2, 8, 4, 4, dtype=torch.int32, device=device), 2, "crd")
    with pytest.raises(TypeError, match="stride must be an int"):
        labops.reorg(x, 2.0)
    with pytest.raises(ValueError, match="grad_output's channels must be divisible by stride\\^2 = 4"):
        torch.ops.labops.reorg_backward(torch.randn(2, 6, 2, 2, device=device), 2, "crd")
    with pytest.raises(ValueError, match="grad_output must be a 4-D tensor"):
        torch.ops.labops.reorg_backward(torch.randn(6, 2, 2, device=device), 2, "crd")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("order", ORDERS)
def test_cuda_index_beyond_int32(order):
    # 2^31 + a bit halves (4 GiB): takes the 64-bit index path.
    n, c, h, w = 1, 4, 2 * 16384, 2 * 16384 + 64
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * 2 * n * c * h * w:
        pytest.skip("needs about 13 GiB of free GPU memory")
    x = torch.empty(n, c, h, w, dtype=torch.float16, device="cuda").uniform_(0.5, 1.5)
    y = labops.reorg(x, 2, order)
    # Compare the last rows of every output plane with the closed forms.
    if order == "crd":
        expected_tail = F.pixel_unshuffle(x[:, :, -8:], 2)
        assert torch.equal(y[:, :, -4:], expected_tail)
    elif order == "dcr":
        expected_tail = F.pixel_unshuffle(x[:, :, -8:], 2).reshape(n, c, 4, 4, -1).transpose(1, 2).reshape(n, 4 * c, 4, -1)
        assert torch.equal(y[:, :, -4:], expected_tail)
    else:
        xr = x.reshape(n, c // 4, h * 2, w * 2)
        tail = F.pixel_unshuffle(xr[:, :, -8:], 2).reshape(n, c // 4, 4, 4, -1).transpose(1, 2).reshape(n, c, 4, -1)
        assert torch.equal(y.reshape(n, c, h, w)[:, :, -4:], tail)
    back = torch.ops.labops.reorg_backward(y, 2, order)
    del y
    assert torch.equal(back[:, :, -16:], x[:, :, -16:])
