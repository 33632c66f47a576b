"""global_avg_pool2d: forward and backward against float64 oracles, gradcheck,
opcheck, torch.compile, and bad input."""

import numpy as np
import pytest
import torch
from conftest import Seeded, assert_compiled_matches_eager, opcheck_every, poison_allocator, t, tolerances

import labops
from labops import reference
from labops.testing import rel_error

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def sample_inputs(device, dtype=torch.float32, seed=0):
    """Random inputs (mean away from zero, so sums do not cancel), many shapes, contiguous or not."""
    make = Seeded(device, dtype, seed)

    def rand(*shape):
        return make.randn(*shape, shift=1.0)

    yield "7x7", rand(2, 3, 7, 7)
    yield "3-d", rand(5, 6, 6)
    yield "1x1 planes", rand(4, 6, 1, 1)
    yield "14x14", rand(2, 3, 14, 14)
    yield "56x56", rand(1, 3, 56, 56)
    yield "odd", rand(3, 5, 3, 9)
    yield "many planes", rand(8, 300, 7, 7)
    yield "100x100 (block per plane)", rand(1, 2, 100, 100)
    yield "1x3", rand(2, 7, 1, 3)
    yield "empty batch", rand(0, 3, 4, 4)
    yield "empty channels 3-d", rand(0, 4, 4)
    yield "channels_last", rand(2, 5, 6, 7).contiguous(memory_format=torch.channels_last)
    yield "transposed", rand(2, 3, 9, 5).transpose(-1, -2)
    yield "sliced", rand(2, 6, 9, 9)[:, ::2, 1:, :-2]
    yield "offset (misaligned)", rand(1 + 2 * 3 * 7 * 7)[1:].view(2, 3, 7, 7)


# ---- bad arguments (tests/test_arg_rules.py feeds each to the eager op and to its fake) ----
# (op, id, args): each breaks one rule of the op's C++ checks.
ARG_RULE_CASES = [
    ("global_avg_pool2d", "integer x", (t(2, 3, 4, 4, dtype=torch.int64),)),
    ("global_avg_pool2d", "2-D x", (t(4, 4),)),
    ("global_avg_pool2d", "5-D x", (t(1, 2, 3, 4, 5),)),
    ("global_avg_pool2d_backward", "integer grad", (t(2, 3, 1, 1, dtype=torch.int32), [2, 3, 5, 5])),
    ("global_avg_pool2d_backward", "input_size rank", (t(2, 3, 1, 1), [2, 3])),
    ("global_avg_pool2d_backward", "negative input_size", (t(3, 1, 1), [3, -1, 2])),
    ("global_avg_pool2d_backward", "grad shape", (t(2, 3, 2, 1), [2, 3, 5, 5])),
]


# ---- graph nodes (tests/test_autograd_nodes.py checks each against native PyTorch's) ----
# (name, labops fn, native fn, input shape, whether the node saves a tensor)
AUTOGRAD_NODE_CASES = [
    ("global_avg_pool2d", labops.global_avg_pool2d, lambda a: a.mean((-2, -1), keepdim=True), (2, 3, 4, 4),
     False),
]


def test_sample_inputs_are_not_zero():
    for _, x in sample_inputs("cpu", torch.float64):
        assert x.numel() == 0 or x.abs().min() > 0 or x.abs().max() > 0.1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_matches_oracle(device, dtype):
    rtol, atol = tolerances(dtype)
    for case, x in sample_inputs(device, dtype):
        poison_allocator(device)
        y = labops.global_avg_pool2d(x)
        expected = x.double().mean((-2, -1), keepdim=True)
        assert y.shape == expected.shape and y.dtype == dtype and y.device == x.device, case
        assert y.is_contiguous(), case
        torch.testing.assert_close(y.double(), expected, rtol=rtol, atol=atol, msg=case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_matches_oracle(device, dtype):
    rtol, atol = tolerances(dtype)
    for case, x in sample_inputs(device, dtype, seed=1):
        out_shape = (*x.shape[:-2], 1, 1)
        g = (1.0 + torch.randn(out_shape, dtype=torch.float64)).to(device, dtype)
        xl = x.detach().requires_grad_()
        poison_allocator(device)
        labops.global_avg_pool2d(xl).backward(g)
        x64 = x.double().detach().requires_grad_()
        x64.mean((-2, -1), keepdim=True).backward(g.double())
        assert xl.grad.dtype == dtype and xl.grad.shape == x.shape, case
        torch.testing.assert_close(xl.grad.double(), x64.grad, rtol=rtol, atol=atol, msg=case)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_low_precision_sums_in_float(device, dtype):
    # 64*64 ones: a half-precision running sum stalls at 2048 (2048 + 1 rounds
    # to 2048), giving a mean of 0.5; bfloat16 stalls at 256.
    x = torch.ones(2, 3, 64, 64, device=device, dtype=dtype)
    assert torch.equal(labops.global_avg_pool2d(x), torch.ones(2, 3, 1, 1, device=device, dtype=dtype))
    # Dividing a large sum in half precision would lose it too: 1000 * 4096 overflows fp16.
    x = torch.full((1, 2, 64, 64), 1000.0, device=device, dtype=dtype)
    torch.testing.assert_close(labops.global_avg_pool2d(x).float(), torch.full((1, 2, 1, 1), 1000.0, device=device))


def test_empty_planes_give_nan_like_torch_mean(device):
    x = torch.randn(2, 3, 0, 5, device=device)
    y = labops.global_avg_pool2d(x)
    torch.testing.assert_close(y, x.mean((-2, -1), keepdim=True), equal_nan=True)
    assert y.isnan().all()
    g = torch.ops.labops.global_avg_pool2d_backward(torch.randn(2, 3, 1, 1, device=device), [2, 3, 0, 5])
    assert g.shape == (2, 3, 0, 5)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (3, 4, 3)], ids=["4-d", "3-d"])
def test_gradcheck_float64(device, shape):
    x = torch.randn(*shape, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(labops.global_avg_pool2d, (x,))
    assert torch.autograd.gradgradcheck(labops.global_avg_pool2d, (x,))


def every_op_sample(device):
    """(op, args) for the forward and the backward op, over every sample input (float32)."""
    grads = Seeded(device, seed=1)
    for _, x in sample_inputs(device):
        x = x.requires_grad_()
        yield torch.ops.labops.global_avg_pool2d.default, (x,)
        g = grads.randn(*x.shape[:-2], 1, 1).requires_grad_()
        yield torch.ops.labops.global_avg_pool2d_backward.default, (g, list(x.shape))


def test_opcheck(device):
    opcheck_every(every_op_sample(device))


def test_torch_compile_fullgraph(device):
    def head(x):
        return labops.global_avg_pool2d(x * 2.0).flatten(1) * 3.0

    x = torch.randn(4, 6, 7, 7, device=device, requires_grad=True)
    assert_compiled_matches_eager(head, x)


def test_module_and_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5)) + 0.5
    g = rng.standard_normal((2, 3, 1, 1))
    y = reference.global_avg_pool2d_forward_loop(x)
    assert rel_error(y, reference.global_avg_pool2d_forward_numpy(x)) < 1e-14
    assert rel_error(labops.nn.GlobalAvgPool2d()(torch.from_numpy(x)), y) < 1e-12
    gi = reference.global_avg_pool2d_backward_loop(g, x.shape)
    assert rel_error(gi, reference.global_avg_pool2d_backward_numpy(g, x.shape)) < 1e-14
    assert rel_error(torch.ops.labops.global_avg_pool2d_backward(torch.from_numpy(g), list(x.shape)), gi) < 1e-12
    x3 = x[0]
    assert rel_error(labops.global_avg_pool2d(torch.from_numpy(x3)), reference.global_avg_pool2d_forward_loop(x3)) < 1e-12


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_integer_input_is_rejected(device, dtype):
    x = torch.ones(2, 3, 4, 4, device=device, dtype=dtype)
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        labops.global_avg_pool2d(x)
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        torch.ops.labops.global_avg_pool2d(x)


@pytest.mark.parametrize("shape", [(4, 4), (1, 2, 3, 4, 5), ()])
def test_wrong_rank_is_rejected(device, shape):
    x = torch.randn(shape, device=device)
    with pytest.raises(ValueError, match=r"x must be a 3-D \(C, H, W\) or 4-D \(N, C, H, W\) tensor"):
        labops.global_avg_pool2d(x)
    with pytest.raises(ValueError, match=r"x must be a 3-D \(C, H, W\) or 4-D \(N, C, H, W\) tensor"):
        torch.ops.labops.global_avg_pool2d(x)


def test_backward_op_rejects_bad_arguments(device):
    g = torch.randn(2, 3, 1, 1, device=device)
    with pytest.raises(ValueError, match=r"grad_output must have shape \[2, 3, 1, 1\]"):
        torch.ops.labops.global_avg_pool2d_backward(torch.randn(2, 3, 2, 1, device=device), [2, 3, 5, 5])
    with pytest.raises(ValueError, match=r"grad_output must have shape \[2, 4, 1, 1\]"):
        torch.ops.labops.global_avg_pool2d_backward(g, [2, 4, 5, 5])
    with pytest.raises(ValueError, match="input_size must be a 3-D"):
        torch.ops.labops.global_avg_pool2d_backward(g, [2, 3])
    with pytest.raises(ValueError, match="input_size must not be negative"):
        torch.ops.labops.global_avg_pool2d_backward(torch.randn(3, 1, 1, device=device), [3, -1, 2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_index_beyond_int32():
    # 2^31 + 2048*49 halves (4 GiB): 64-bit plane offsets forward, the 64-bit backward kernel.
    hw = 7 * 7
    planes = 2**31 // hw + 2048
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * 2 * planes * hw:
        pytest.skip("needs about 13 GiB of free GPU memory")
    x = torch.empty(planes, 1, 7, 7, dtype=torch.float16, device="cuda").uniform_(0, 2)
    y = labops.global_avg_pool2d(x)
    idx = torch.cat([torch.arange(0, 1024, device="cuda"), torch.arange(planes - 4096, planes, device="cuda"),
                     torch.randint(0, planes, (10000,), device="cuda")])
    torch.testing.assert_close(y[idx].float(), x[idx].float().mean((-2, -1), keepdim=True), rtol=2e-3, atol=2e-3)
    del x
    g = torch.randn(planes, 1, 1, 1, dtype=torch.float16, device="cuda")
    gi = torch.ops.labops.global_avg_pool2d_backward(g, [planes, 1, 7, 7])
    torch.testing.assert_close(gi[idx].float(), (g[idx].float() / hw).expand(-1, -1, 7, 7), rtol=2e-3, atol=1e-5)


# ---- the ladder (tests/test_ladder.py runs these on every rung) ----

def ladder_cases(device, dtype):
    """(name, op, inputs, float64 oracle, products per output): a mean's error does not grow with H*W."""
    for name, x in sample_inputs(device, dtype):
        yield name, labops.global_avg_pool2d, (x,), x.double().mean((-2, -1), keepdim=True), 1


def ladder_refusals(device):
    """(rung, op, inputs, message) for inputs a forced rung cannot take on `device`."""
    x = torch.randn(2, 3, 7, 7, device=device)
    if device == "cpu":
        yield 2, labops.global_avg_pool2d, (x.half(),), r"rung 2 \(simd4\) cannot take this input: .*Half"
        yield 2, labops.global_avg_pool2d, (x.bfloat16(),), r"rung 2 \(simd4\) cannot take this input"
        yield 3, labops.global_avg_pool2d, (x,), r"has no rung 3 on CPU \(rungs 1..2\)"
    else:
        misaligned = torch.randn(1 + 2 * 3 * 64, device=device)[1:].view(2, 3, 8, 8)
        yield 3, labops.global_avg_pool2d, (misaligned,), r"rung 3 \(vector_loads\) .*not 16-byte aligned"
        yield 4, labops.global_avg_pool2d, (misaligned,), r"rung 4 \(whole_packs\) .*not 16-byte aligned"
        yield 4, labops.global_avg_pool2d, (x,), r"rung 4 \(whole_packs\) .*H\*W = 49 is not a multiple"


def test_ladder_defaults_on_inputs_whose_rung_is_known():
    from labops import ladder

    x = torch.randn(2, 3, 8, 8)
    assert ladder.default_rung("pooling", "cpu", x) == 2
    assert ladder.default_rung("pooling", "cpu", x.half()) == 1
    assert ladder.default_rung("pooling", "cuda", x) == 4  # 64 % 4 == 0, fresh memory
    assert ladder.default_rung("pooling", "cuda", torch.randn(2, 3, 7, 7)) == 3
    assert ladder.default_rung("pooling", "cuda", torch.randn(1 + 2 * 3 * 64)[1:].view(2, 3, 8, 8)) == 2
    assert ladder.default_rung("pooling", "cuda", torch.randn(2, 3, 0, 8)) is None
