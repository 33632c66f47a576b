"""labops.triton: each op against native PyTorch in float64, gradcheck, opcheck and bad input, on the CPU
through Triton's interpreter; on a GPU, the compiled kernels against the same oracles and against the
interpreter on the same inputs."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import Seeded

triton = pytest.importorskip("triton")

import labops.triton as lt  # noqa: E402
from labops.triton.gelu import APPROXIMATIONS  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# (rtol, atol) against a float64 oracle, by the dtype the op ran in. float64 at 1e-7: compiled, a Python float
# literal in a kernel is a float32 constant (gelu.py's 0.044715, 1/sqrt(2), ...), good to about 3e-8.
TOL = {torch.float64: (1e-7, 1e-7), torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 2e-2),
       torch.bfloat16: (2e-2, 1e-1)}


def close(got, expected, dtype, msg="", scale=1.0):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=atol * scale, msg=msg)


# ---- sample inputs: random, never zeros; sizes that are not powers of two nor multiples of a block ----

def gelu_inputs(device, dtype, seed=0):
    make = Seeded(device, dtype, seed)
    yield "odd-1d", make.randn(7, scale=3.0)
    yield "3d", make.randn(2, 3, 1029, scale=3.0)  # 6174: six blocks of 1024 and a part
    yield "transposed", make.randn(65, 33, scale=3.0).t()
    yield "empty", make.randn(4, 0)


def softmax_inputs(device, dtype, seed=0):
    make = Seeded(device, dtype, seed)
    yield "one-col", make.randn(5, 1)
    yield "odd", make.randn(37, 1000, scale=4.0)  # BLOCK 1024, 24 lanes masked
    yield "3d", make.randn(3, 4, 130, scale=4.0)
    yield "large-logits", make.randn(6, 17, scale=1.0, shift=300.0)  # exp overflows without the max
    yield "transposed", make.randn(40, 9).t()
    yield "empty", make.randn(0, 5)


# (x, weight, bias or None, stride, padding, dilation): shapes and windows of every kind.
CONV_CASES = [
    ("3x3-pad1", (2, 3, 9, 11), (5, 3, 3, 3), True, 1, 1, 1),
    ("stride2-dil2", (2, 5, 13, 12), (70, 5, 3, 3), True, 2, 2, 2),  # 70 filters: two BLOCK_N tiles
    ("pairs", (1, 4, 10, 7), (3, 4, 3, 2), False, (2, 1), (1, 0), (1, 2)),
    ("1x1-stride3", (3, 6, 8, 8), (4, 6, 1, 1), True, 3, 0, 1),
    ("5x5-no-pad", (1, 2, 7, 9), (3, 2, 5, 5), True, 1, 0, 1),
]


def conv_inputs(case, device, dtype, seed=0):
    _, x_shape, w_shape, bias, stride, padding, dilation = case
    make = Seeded(device, dtype, seed)
    return make.randn(*x_shape), make.randn(*w_shape), make.randn(w_shape[0]) if bias else None, stride, padding, \
        dilation


# ---- forward and backward against float64 native PyTorch (CPU: the interpreter) ----

def check_gelu(device, dtype):
    for approximate in APPROXIMATIONS:
        for case, x in gelu_inputs(device, dtype):
            xl = x.detach().requires_grad_()
            y = lt.gelu(xl, approximate)
            assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous(), case
            x64 = x.double().detach().requires_grad_()
            expected = F.gelu(x64, approximate=approximate)
            close(y, expected, dtype, f"{approximate}/{case}", scale=4)
            g = torch.randn(x.shape, dtype=torch.float64).to(device)
            y.backward(g.to(dtype))
            expected.backward(g)
            close(xl.grad, x64.grad, dtype, f"{approximate}/{case} backward", scale=4)


def check_softmax(device, dtype):
    for case, x in softmax_inputs(device, dtype):
        xl = x.detach().requires_grad_()
        y = lt.softmax(xl)
        x64 = x.double().detach().requires_grad_()
        expected = torch.softmax(x64, -1)
        close(y, expected, dtype, case)
        g = torch.randn(x.shape, dtype=torch.float64).to(device)
        y.backward(g.to(dtype))
        expected.backward(g)
        close(xl.grad, x64.grad, dtype, f"{case} backward", scale=2)


def check_conv2d(device, dtype):
    for case in CONV_CASES:
        x, w, b, *window = conv_inputs(case, device, dtype)
        leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
        y = lt.conv2d(*leaves[:2], leaves[2] if b is not None else None, *window)
        leaves64 = [t.double().detach().requires_grad_() for t in leaves]
        expected = F.conv2d(*leaves64[:2], leaves64[2] if b is not None else None, *window)
        # A sum of C*kH*kW products, each rounded: the tolerance grows with the reduction's length.
        scale = (x.shape[1] * w.shape[2] * w.shape[3]) ** 0.5
        close(y, expected, dtype, case[0], scale=scale)
        g = torch.randn(y.shape, dtype=torch.float64).to(device)
        y.backward(g.to(dtype))
        expected.backward(g)
        for name, got, want in zip(("x", "weight", "bias"), leaves, leaves64):
            close(got.grad, want.grad, dtype, f"{case[0]} grad {name}", scale=(y.numel() / y.shape[1]) ** 0.5)


CHECKS = {"gelu": check_gelu, "softmax": check_softmax, "conv2d": check_conv2d}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("op", CHECKS)
def test_matches_native_cpu(op, dtype):
    CHECKS[op]("cpu", dtype)


def test_half_precision_cpu():
    """float16 and bfloat16 (computed in float32) through the interpreter, on one input each."""
    for dtype in (torch.float16, torch.bfloat16):
        x = Seeded("cpu", dtype).randn(3, 50, scale=3.0)
        close(lt.gelu(x, "tanh"), F.gelu(x.double(), approximate="tanh"), dtype)
        close(lt.softmax(x), torch.softmax(x.double(), -1), dtype)
        x, w, b, *window = conv_inputs(CONV_CASES[0], "cpu", dtype)
        close(lt.conv2d(x, w, b, *window), F.conv2d(x.double(), w.double(), b.double(), *window), dtype, scale=6)


# ---- gradcheck (float64) and opcheck, small shapes: the interpreter runs every call ----

def test_gradcheck():
    make = Seeded("cpu", torch.float64, seed=3)
    x = make.randn(3, 7, scale=2.0).requires_grad_()
    for approximate in ("none", "tanh"):
        assert torch.autograd.gradcheck(lambda a: lt.gelu(a, approximate), (x,))
    assert torch.autograd.gradcheck(lt.softmax, (x,))
    xc, w, b = make.randn(1, 2, 5, 4).requires_grad_(), make.randn(3, 2, 3, 2).requires_grad_(), \
        make.randn(3).requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: lt.conv2d(*a, stride=(2, 1), padding=1, dilation=(1, 2)), (xc, w, b))


def test_opcheck():
    make = Seeded("cpu", torch.float32, seed=4)
    x = make.randn(3, 5).requires_grad_()
    g = make.randn(3, 5)
    ops = torch.ops.labops_triton
    xc, w, b = make.randn(1, 2, 5, 4).requires_grad_(), make.randn(3, 2, 3, 3).requires_grad_(), \
        make.randn(3).requires_grad_()
    window = ([2, 1], [1, 1], [1, 1])
    gc = make.randn(1, 3, 3, 4)
    samples = [
        (ops.gelu, (x, "tanh")), (ops.gelu_backward, (g, x.detach(), "none")),
        (ops.softmax, (x,)), (ops.softmax_backward, (g, x.detach())),
        (ops.conv2d, (xc, w, b, *window)), (ops.conv2d, (xc, w, None, *window)),
        (ops.conv2d_grad_input, (gc, xc.detach(), w.detach(), *window)),
        (ops.conv2d_grad_weight, (gc, xc.detach(), w.detach(), *window)),
    ]
    for op, args in samples:
        torch.library.opcheck(op, args)


# ---- bad arguments: a clear Python exception that names the argument and the rule ----

def _bad_calls():
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    yield TypeError, "x must be a torch.Tensor", lambda: lt.gelu([1.0])
    yield ValueError, "x must be a floating-point tensor", lambda: lt.gelu(torch.ones(3, dtype=torch.int64))
    yield ValueError, "approximate must be one of 'none', 'tanh'", lambda: lt.gelu(torch.randn(3), "sigmoid")
    yield ValueError, "x must be a floating-point tensor", lambda: lt.softmax(torch.ones(2, 3, dtype=torch.int32))
    yield ValueError, "x must have at least one dim", lambda: lt.softmax(torch.tensor(1.0))
    yield ValueError, "y must have grad's shape", lambda: torch.ops.labops_triton.softmax_backward(
        torch.randn(2, 3), torch.randn(2, 4))
    yield ValueError, "x must be 4-D", lambda: lt.conv2d(torch.randn(2, 5, 5), w)
    yield ValueError, "weight's dim 1 must be x's channels 2", lambda: lt.conv2d(x, torch.randn(3, 4, 3, 3))
    yield ValueError, "weight must have x's dtype", lambda: lt.conv2d(x, w.double())
    yield ValueError, r"bias must be \(3,\)", lambda: lt.conv2d(x, w, torch.randn(4))
    yield TypeError, "bias must be a torch.Tensor", lambda: lt.conv2d(x, w, [0.0] * 3)
    yield ValueError, "stride must be >= 1", lambda: lt.conv2d(x, w, stride=0)
    yield ValueError, "padding must be >= 0", lambda: lt.conv2d(x, w, padding=(1, -1))
    yield TypeError, "dilation must be an int or a pair of ints", lambda: lt.conv2d(x, w, dilation=1.5)
    yield ValueError, "does not fit x's padded image", lambda: lt.conv2d(x, torch.randn(3, 2, 7, 7))
    yield ValueError, r"grad must be the output's \[1, 3, 3, 3\]", lambda: torch.ops.labops_triton.conv2d_grad_input(
        torch.randn(1, 3, 4, 4), x, w, [1, 1], [0, 0], [1, 1])


@pytest.mark.parametrize("error,message,call", list(_bad_calls()), ids=lambda v: v if isinstance(v, str) else "")
def test_bad_arguments_raise(error, message, call):
    with pytest.raises(error, match=message):
        call()


def test_fake_tensors_run_the_same_checks():
    """The fake (torch.compile, meta tensors) raises what the op raises: one _check for both."""
    x, w = torch.randn(1, 2, 5, 5, device="meta"), torch.randn(3, 4, 3, 3, device="meta")
    with pytest.raises(ValueError, match="weight's dim 1 must be x's channels 2"):
        torch.ops.labops_triton.conv2d(x, w, None, [1, 1], [0, 0], [1, 1])
    assert torch.ops.labops_triton.conv2d(x, w[:, :2], None, [2, 2], [1, 1], [1, 1]).shape == (1, 3, 3, 3)


def test_import_is_light_and_names_the_fix():
    """`import labops` leaves labops.triton alone; without Triton, importing it says how to install it."""
    code = ("import sys; import labops; assert 'labops.triton' not in sys.modules; "
            "sys.modules['triton'] = None\n"
            "try:\n    import labops.triton\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install -e ".[triton]"' in out


def test_triton_is_the_real_one():
    """Inside labops/triton/, `import triton` is Triton itself, not the package it sits in."""
    for name in ("labops.triton", "labops.triton.gelu", "labops.triton._launch"):
        assert sys.modules[name].triton is triton and triton.__name__ == "triton", name


# ---- on a GPU: compiled kernels against the oracles, and against the interpreter on the same inputs ----

@cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", CHECKS)
def test_matches_native_cuda(op, dtype):
    CHECKS[op]("cuda", dtype)


def _agree(fn, *inputs, dtype):
    """fn on CUDA (compiled) and on the CPU (interpreted), forward and backward, on the same inputs."""
    results = []
    for device in ("cuda", "cpu"):
        leaves = [t.to(device).detach().requires_grad_() if isinstance(t, torch.Tensor) else t for t in inputs]
        y = fn(*leaves)
        y.backward(torch.ones_like(y) * 0.5 + torch.arange(y.numel(), device=device).reshape(y.shape) % 3)
        results.append([y.detach().cpu()] + [t.grad.cpu() for t in leaves if isinstance(t, torch.Tensor)])
    for compiled, interpreted in zip(*results):
        rtol, atol = TOL[dtype]
        torch.testing.assert_close(compiled.double(), interpreted.double(), rtol=rtol, atol=10 * atol)


@cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16], ids=str)
def test_interpreter_agrees_with_gpu(dtype):
    make = Seeded("cpu", dtype, seed=7)
    x = make.randn(5, 300, scale=3.0)
    _agree(lambda a: lt.gelu(a, "none"), x, dtype=dtype)
    _agree(lambda a: lt.gelu(a, "tanh"), x, dtype=dtype)
    _agree(lt.softmax, x, dtype=dtype)
    before = torch.backends.cudnn.conv.fp32_precision
    torch.backends.cudnn.conv.fp32_precision = "ieee"  # the interpreter multiplies float32 in full
    try:
        xc, w, b, *window = conv_inputs(CONV_CASES[1], "cpu", dtype)
        _agree(lambda *a: lt.conv2d(*a, *window), xc, w, b, dtype=dtype)
    finally:
        torch.backends.cudnn.conv.fp32_precision = before


def test_weight_grad_split_k(monkeypatch):
    """grad_weight summed in several slices of the output pixels (what a GPU runs) equals one slice's sum."""
    conv_module = sys.modules["labops.triton.conv2d"]
    x, w, b, *window = conv_inputs(CONV_CASES[1], "cpu", torch.float64)
    g = Seeded("cpu", torch.float64, seed=9).randn(*F.conv2d(x, w, b, *window).shape)
    args = (g, x, w, *([v] * 2 if isinstance(v, int) else list(v) for v in window))
    whole = torch.ops.labops_triton.conv2d_grad_weight(*args)
    monkeypatch.setattr(conv_module, "_weight_grad_splits", lambda *a: 3)
    torch.testing.assert_close(torch.ops.labops_triton.conv2d_grad_weight(*args), whole, rtol=1e-12, atol=1e-12)
    x64, w64 = x.detach().requires_grad_(), w.detach().requires_grad_()
    F.conv2d(x64, w64, b, *window).backward(g)
    torch.testing.assert_close(whole, w64.grad)


# ---- no GPU needed: what the launchers pass compiles for sm_90 (as .ci/check_cuda_compiles.sh does for csrc) ----

def _launches(monkeypatch, dtype):
    """(kernel, args, kwargs) of every kernel launch that each op, forward and backward, makes on the CPU."""
    launch_module = sys.modules["labops.triton._launch"]
    seen = {}
    original = launch_module.Kernel.__getitem__

    def record(kernel, grid):
        def launch(*args, **kwargs):
            seen.setdefault((kernel.__name__, str(sorted(kwargs.items()))), (kernel, args, kwargs))
            return original(kernel, grid)(*args, **kwargs)
        return launch

    monkeypatch.setattr(launch_module.Kernel, "__getitem__", record)
    make = Seeded("cpu", dtype, seed=5)
    for approximate in APPROXIMATIONS:
        lt.gelu(make.randn(40).requires_grad_(), approximate).sum().backward()
    lt.softmax(make.randn(3, 40).requires_grad_()).square().sum().backward()
    leaves = [make.randn(1, 3, 6, 5).requires_grad_(), make.randn(4, 3, 3, 3).requires_grad_(),
              make.randn(4).requires_grad_()]
    lt.conv2d(*leaves, padding=1).square().sum().backward()
    return list(seen.values())


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64], ids=str)
def test_kernels_compile_for_sm90(monkeypatch, dtype):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    pointer = {torch.float16: "*fp16", torch.float32: "*fp32", torch.float64: "*fp64", torch.bfloat16: "*bf16"}
    launches = _launches(monkeypatch, dtype)
    assert len(launches) == 2 * 2 + 2 + 3  # gelu (2 forms, forward and backward), softmax (2), conv2d (3)
    for kernel, args, kwargs in launches:
        fn = kernel.compiled
        values = dict(zip(fn.arg_names, args), **kwargs)
        constexprs = {fn.arg_names[i]: values[fn.arg_names[i]] for i in fn.constexprs}
        signature = {name: "constexpr" if name in constexprs else pointer[value.dtype]
                     if isinstance(value, torch.Tensor) else "i32" for name, value in values.items()
                     if name in fn.arg_names}
        options = {"num_warps": kwargs["num_warps"]} if "num_warps" in kwargs else None
        compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                                  target=GPUTarget("cuda", 90, 32), options=options)
        assert compiled.asm["cubin"], kernel.__name__


def test_empty_batch_conv2d():
    x, w, b = torch.randn(0, 3, 5, 5, requires_grad=True), torch.randn(4, 3, 3, 3, requires_grad=True), \
        torch.randn(4, requires_grad=True)
    y = lt.conv2d(x, w, b, padding=1)
    assert y.shape == (0, 4, 5, 5)
    y.sum().backward()
    assert x.grad.shape == x.shape and torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros(4))


def test_compiles_in_one_graph():
    """The ops trace through their fakes under torch.compile(fullgraph=True), forward and backward."""
    from conftest import assert_compiled_matches_eager

    make = Seeded("cpu", torch.float32, seed=6)
    x, w, b = make.randn(2, 3, 6, 5).requires_grad_(), make.randn(4, 3, 3, 3).requires_grad_(), make.randn(4)

    def net(x, w):
        return lt.softmax(lt.gelu(lt.conv2d(x, w, b, padding=1), "tanh").flatten(2))

    assert_compiled_matches_eager(net, x, w, loss=lambda out: (out * out).sum())
