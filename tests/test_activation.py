"""Tanh and GELU: forward and backward against float64 oracles, gradcheck,
opcheck, torch.compile, and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import Seeded, assert_compiled_matches_eager, opcheck_every, samples_for_each, t, tolerances

import labops
from labops import ladder, reference
from labops.testing import numerical_gradient, rel_error

APPROXIMATIONS = ["none", "tanh", "sigmoid"]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def sample_inputs(device, dtype=torch.float32, seed=0):
    """Random inputs of many shapes, contiguous or not, never all zeros."""
    make = Seeded(device, dtype, seed)

    def randn(*shape, scale=3.0):
        return make.randn(*shape, scale=scale)

    yield "scalar", randn()
    yield "empty", randn(0)
    yield "empty-2d", randn(4, 0)
    yield "odd-1d", randn(7)
    yield "2d", randn(33, 65)
    yield "3d", randn(2, 3, 1029)
    yield "transposed", randn(65, 33).t()
    yield "strided", randn(4, 300)[:, ::3]
    yield "offset", randn(4097)[1:]  # not 16-byte aligned: takes the plain grid-stride kernel
    yield "wide-range", randn(5000, scale=12.0)


# ---- bad arguments (tests/test_arg_rules.py feeds each to the eager op and to its fake) ----
# (op, id, args): each breaks one rule of the op's C++ checks.
ARG_RULE_CASES = [
    ("tanh", "integer x", (t(4, dtype=torch.int64),)),
    ("tanh_backward", "integer output", (t(4), t(4, dtype=torch.int32))),
    ("tanh_backward", "grad shape", (t(5), t(4))),
    ("tanh_backward", "grad dtype", (t(4, dtype=torch.float64), t(4))),
    ("gelu", "integer x", (t(4, dtype=torch.bool), "none")),
    ("gelu", "approximate", (t(4), "erf")),
    ("gelu_backward", "integer x", (t(4), t(4, dtype=torch.int64), "none")),
    ("gelu_backward", "grad shape", (t(3), t(4), "tanh")),
    ("gelu_backward", "grad dtype", (t(4, dtype=torch.float64), t(4), "tanh")),
    ("gelu_backward", "approximate", (t(4), t(4), "Tanh")),
]


# ---- graph nodes (tests/test_autograd_nodes.py checks each against native PyTorch's) ----
# (name, labops fn, native fn, input shape, whether the node saves a tensor)
AUTOGRAD_NODE_CASES = [
    ("tanh", labops.tanh, torch.tanh, (3, 4), True),
    ("gelu", lambda a: labops.gelu(a, "tanh"), lambda a: F.gelu(a, approximate="tanh"), (3, 4), True),
]


def as_tensor(array, device):
    return torch.as_tensor(np.asarray(array, dtype=np.float64)).to(device)


def oracle_forward(name, x64, approximate):
    if name == "tanh":
        return torch.tanh(x64)
    if approximate == "sigmoid":  # no native op: the NumPy formula is the oracle
        return as_tensor(reference.gelu_forward_numpy(x64.cpu().numpy(), "sigmoid"), x64.device)
    return F.gelu(x64, approximate=approximate)


def labops_forward(name, x, approximate):
    return labops.tanh(x) if name == "tanh" else labops.gelu(x, approximate)


OPS = [("tanh", "none")] + [("gelu", a) for a in APPROXIMATIONS]
OP_IDS = ["tanh"] + [f"gelu-{a}" for a in APPROXIMATIONS]


# ---- the ladder (labops.ladder; tests/test_ladder.py runs these cases through every rung) ----

def ladder_cases(device, dtype):
    """(name, op, inputs, expected, terms) for tests/test_ladder.py: tanh and each form of gelu on every sample
    input (tanh and gelu share the layer's ladder). On the CPU, rung 2 (simd) takes float32 and float64 only,
    so in float16 and bfloat16 only the textbook runs there (see ladder_refusals)."""
    for op_id, (name, approximate) in zip(OP_IDS, OPS):
        op, extra = (labops.tanh, ()) if name == "tanh" else (labops.gelu, (approximate,))
        for case, x in sample_inputs(device, dtype):
            yield f"{op_id}/{case}", op, (x, *extra), oracle_forward(name, x.double(), approximate), 1


def ladder_refusals(device):
    """(rung, op, inputs, message regex) for inputs a forced rung cannot take on `device`; tanh and gelu share
    the ladder, and a refusal names the op that was called."""
    if device == "cpu":
        x = torch.randn(4, 5)
        yield (2, labops.tanh, (x.half(),),
               r"rung 2 \(simd\) cannot take this input: it vectorizes float32 and float64 only, got Half")
        yield 2, labops.gelu, (x.bfloat16(), "tanh"), r"rung 2 \(simd\) cannot take this input: .*got BFloat16"
    else:
        misaligned = torch.randn(1 + 64, device=device)[1:]  # starts 4 bytes into its storage
        for op in (labops.tanh, labops.gelu):
            yield 2, op, (misaligned,), r"rung 2 \(vector_loads\) cannot take this input: x is not 16-byte aligned"


def test_ladder_defaults_activation():
    """The default table's conditions, on inputs whose rung is known by construction."""
    x = torch.randn(4, 8)
    assert ladder.default_rung("activation", "cpu", x) == 2
    assert ladder.default_rung("activation", "cpu", x.double(), "tanh") == 2
    assert ladder.default_rung("activation", "cpu", x.half()) == 1
    assert ladder.default_rung("activation", "cpu", x.bfloat16(), "sigmoid") == 1
    assert ladder.default_rung("activation", "cuda", x) == 2  # fresh memory
    assert ladder.default_rung("activation", "cuda", x.t(), "none") == 2  # copied into fresh memory first
    assert ladder.default_rung("activation", "cuda", torch.randn(33)[1:]) == 1  # starts 4 bytes in
    assert ladder.default_rung("activation", "cuda", torch.randn(33, dtype=torch.float16)[8:]) == 2  # 16 bytes in
    assert ladder.default_rung("activation", "cpu", torch.randn(4, 0)) is None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,approximate", OPS, ids=OP_IDS)
def test_forward_matches_oracle(device, dtype, name, approximate):
    rtol, atol = tolerances(dtype)
    for case, x in sample_inputs(device, dtype):
        out = labops_forward(name, x, approximate)
        assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device, case
        assert out.is_contiguous(), case
        expected = oracle_forward(name, x.double(), approximate)
        torch.testing.assert_close(out.double(), expected, rtol=rtol, atol=atol, msg=case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,approximate", OPS, ids=OP_IDS)
def test_backward_matches_oracle(device, dtype, name, approximate):
    rtol, atol = tolerances(dtype)
    for case, x in sample_inputs(device, dtype, seed=1):
        grad_out = torch.randn(x.shape, dtype=torch.float64).to(device, dtype)
        xl = x.detach().requires_grad_()
        labops_forward(name, xl, approximate).backward(grad_out)
        x64 = x.double().detach().requires_grad_()
        if name == "gelu" and approximate == "sigmoid":
            expected = as_tensor(
                reference.gelu_backward_numpy(grad_out.double().cpu().numpy(), x64.detach().cpu().numpy(), "sigmoid"),
                device,
            )
        else:
            oracle_forward(name, x64, approximate).backward(grad_out.double())
            expected = x64.grad
        assert xl.grad.dtype == dtype, case
        # Backward multiplies by (1 - y^2) etc.: allow a few more ulps.
        torch.testing.assert_close(xl.grad.double(), expected, rtol=4 * rtol, atol=4 * atol, msg=case)


@pytest.mark.parametrize("name,approximate", OPS, ids=OP_IDS)
def test_gradcheck_float64(device, name, approximate):
    x = torch.randn(5, 7, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: labops_forward(name, t, approximate), (x,))


def op_samples(name, approximate, device):
    """(op, args) for the forward and the backward op, over every sample input (float32, forward
    input requiring grad so opcheck also checks the autograd registration)."""
    grads = Seeded(device, seed=1)
    for _, x in sample_inputs(device):
        x = x.requires_grad_()
        g = grads.randn(*x.shape)
        if name == "tanh":
            yield torch.ops.labops.tanh.default, (x,)
            yield torch.ops.labops.tanh_backward.default, (g, torch.tanh(x).detach())
        else:
            yield torch.ops.labops.gelu.default, (x, approximate)
            yield torch.ops.labops.gelu_backward.default, (g, x.detach(), approximate)


every_op_sample = samples_for_each(lambda op, device: op_samples(*op, device), OPS)


@pytest.mark.parametrize("name,approximate", OPS, ids=OP_IDS)
def test_opcheck(device, name, approximate):
    opcheck_every(op_samples(name, approximate, device))


def test_torch_compile_fullgraph(device):
    def block(x):
        return labops.tanh(labops.gelu(x * 2.0, "tanh")) + labops.gelu(x, "sigmoid")

    x = torch.randn(64, 33, device=device, requires_grad=True)
    assert_compiled_matches_eager(block, x, backend="inductor")


def test_reference_loops_agree_with_numpy_and_ops():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5)) * 3
    g = rng.standard_normal((4, 5))
    y = reference.tanh_forward_loop(x)
    assert rel_error(y, reference.tanh_forward_numpy(x)) < 1e-14
    assert rel_error(reference.tanh_backward_loop(g, y), reference.tanh_backward_numpy(g, y)) < 1e-14
    assert rel_error(labops.tanh(torch.from_numpy(x)), y) < 1e-12
    for a in APPROXIMATIONS:
        yl = reference.gelu_forward_loop(x, a)
        assert rel_error(yl, reference.gelu_forward_numpy(x, a)) < 1e-14
        assert rel_error(labops.gelu(torch.from_numpy(x), a), yl) < 1e-12
        gl = reference.gelu_backward_loop(g, x, a)
        assert rel_error(gl, reference.gelu_backward_numpy(g, x, a)) < 1e-14
        # The analytic derivative against central differences of the forward.
        # (rel_error blows up where the derivative crosses zero, so compare absolutely there.)
        numeric = numerical_gradient(lambda t: reference.gelu_forward_numpy(t, a), x, g)
        np.testing.assert_allclose(gl, numeric, rtol=1e-6, atol=1e-8, err_msg=a)


def test_tanh_gradient_is_computed_from_output():
    # If backward evaluated tanh(x) again, it could not match g * (1 - y^2) bit for bit.
    x = torch.randn(1000, dtype=torch.float64, requires_grad=True)
    g = torch.randn(1000, dtype=torch.float64)
    y = labops.tanh(x)
    y.backward(g)
    torch.testing.assert_close(x.grad, g * (1 - y.detach() ** 2), rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_input_is_rejected(device, dtype):
    x = torch.ones(4, device=device, dtype=dtype)
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        labops.tanh(x)
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        labops.gelu(x)
    # The C++ kernels check too, for callers that bypass the Python wrappers.
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        torch.ops.labops.gelu(x, "none")


def test_unknown_approximate_is_rejected(device):
    x = torch.randn(4, device=device)
    with pytest.raises(ValueError, match="approximate must be one of 'none', 'tanh', 'sigmoid', got 'erf'"):
        labops.gelu(x, "erf")
    with pytest.raises(ValueError, match="approximate must be 'none', 'tanh' or 'sigmoid', got 'Tanh'"):
        torch.ops.labops.gelu(x, "Tanh")


def test_backward_op_rejects_mismatched_gradient(device):
    y = torch.randn(4, device=device)
    with pytest.raises(ValueError, match="grad_output must have the shape of output"):
        torch.ops.labops.tanh_backward(torch.randn(5, device=device), y)
    with pytest.raises(ValueError, match="grad_output must have the dtype of x"):
        torch.ops.labops.gelu_backward(torch.randn(4, device=device, dtype=torch.float64), y, "none")


def test_not_a_tensor_is_rejected():
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        labops.gelu([1.0, 2.0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_index_beyond_int32():
    # 2^31 + 4099 halves (4 GiB): an int loop index would wrap before the end.
    free, _ = torch.cuda.mem_get_info()
    n = 2**31 + 4099
    if free < 3 * 2 * n:
        pytest.skip("needs about 13 GiB of free GPU memory")
    x = torch.empty(n, dtype=torch.float16, device="cuda").uniform_(-4, 4)
    for view in (x, x[1:]):  # the vectorized kernel and the plain grid-stride one
        y = labops.tanh(view)
        idx = torch.cat([torch.arange(0, 4096, device="cuda"), torch.arange(view.numel() - 8192, view.numel(), device="cuda")])
        idx = torch.cat([idx, torch.randint(0, view.numel(), (100000,), device="cuda")])
        torch.testing.assert_close(y[idx].float(), torch.tanh(view[idx].float()), rtol=2e-3, atol=2e-3)
        del y
