"""Softmax and fused cross-entropy: forward and backward against float64
oracles (torch.softmax, F.cross_entropy), gradcheck, opcheck, torch.compile,
huge inputs, out-of-range targets and bad arguments."""

import contextlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import Seeded, assert_compiled_matches_eager, long, opcheck_every, poison_allocator, t, tolerances

import labops
from labops import reference
from labops.testing import numerical_gradient, rel_error

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
REDUCTIONS = ["mean", "sum", "none"]


def sample_inputs(device, dtype=torch.float32, seed=0):
    """(case, x, dim): many shapes and dims, contiguous or not, never all zeros.

    The row lengths reach every CUDA path: sub-warp and warp rows (3..1024),
    block rows (2048, 5000), rows that need a whole 1024-thread block (3000
    float64, 20000 float32 and float16: the rows register_prefetch takes), rows
    too long for registers (40000; 9001 unaligned), 16-byte-aligned and not
    (odd lengths, an offset view), and dim != -1 (strided rows: few are moved
    last first on CUDA, many take the strided kernel)."""
    make = Seeded(device, dtype, seed)

    def randn(*shape):
        return make.randn(*shape, scale=3.0)

    yield "scalar", randn(), 0
    yield "1d-odd", randn(7), 0
    yield "1d-neg-dim", randn(130), -1
    for dim in (0, 1, -1):
        yield f"2d-dim{dim}", randn(33, 65), dim
    for dim in (0, 1, -1):
        yield f"3d-dim{dim}", randn(2, 3, 1029), dim
    for dim in (0, 1, 2, -1, -3):
        yield f"4d-dim{dim}", randn(2, 3, 4, 5), dim
    yield "tiny-rows", randn(100, 3), -1
    yield "rows-128", randn(40, 128), -1
    yield "rows-1000", randn(9, 1000), 1
    yield "rows-2048", randn(5, 2048), -1
    yield "rows-5000", randn(3, 5000), -1
    yield "rows-3000", randn(3, 3000), -1
    yield "rows-20000", randn(3, 20000), -1
    yield "rows-1001", randn(17, 1001), -1
    yield "rows-9001", randn(2, 9001), -1
    yield "rows-40000", randn(2, 40000), -1
    yield "strided-many-rows", randn(2, 5, 16400), 1  # enough strided rows for CUDA's strided kernel
    yield "transposed-dim0", randn(65, 33).t(), 0
    yield "transposed-dim1", randn(65, 33).t(), 1
    yield "strided", randn(4, 300)[:, ::3], -1
    yield "offset", randn(4, 1025).reshape(-1)[1:4097].reshape(4, 1024), -1  # not 16-byte aligned
    yield "empty-rows", randn(0, 5), -1
    yield "empty-dim", randn(4, 0), -1
    yield "empty-dim0", randn(0, 5), 0


# ---- bad arguments (tests/test_arg_rules.py feeds each to the eager op and to its fake) ----
LOGITS, TARGET = t(4, 3), long(4)
# (op, id, args): each breaks one rule of the op's C++ checks.
ARG_RULE_CASES = [
    ("softmax", "integer x", (t(3, 4, dtype=torch.int64), 1)),
    ("softmax", "dim too big", (t(3, 4), 2)),
    ("softmax", "dim too small", (t(3, 4), -3)),
    ("softmax_backward", "integer output", (t(3, 4), t(3, 4, dtype=torch.int32), 1)),
    ("softmax_backward", "grad shape", (t(3, 5), t(3, 4), 1)),
    ("softmax_backward", "grad dtype", (t(3, 4, dtype=torch.float64), t(3, 4), 1)),
    ("softmax_backward", "dim", (t(3, 4), t(3, 4), 5)),
    ("cross_entropy", "integer logits", (LOGITS.long(), TARGET, "mean")),
    ("cross_entropy", "1-D logits", (LOGITS[0], TARGET[:1], "mean")),
    ("cross_entropy", "3-D logits", (LOGITS[None], TARGET, "mean")),
    ("cross_entropy", "target dtype", (LOGITS, TARGET.int(), "mean")),
    ("cross_entropy", "float target", (LOGITS, TARGET.float(), "mean")),
    ("cross_entropy", "target shape", (LOGITS, TARGET[:, None], "mean")),
    ("cross_entropy", "target length", (LOGITS, TARGET[:3], "sum")),
    ("cross_entropy", "reduction", (LOGITS, TARGET, "avg")),
    ("cross_entropy_backward", "integer logits", (t(()), LOGITS.long(), TARGET, "mean")),
    ("cross_entropy_backward", "target dtype", (t(()), LOGITS, TARGET.int(), "mean")),
    ("cross_entropy_backward", "reduction", (t(()), LOGITS, TARGET, "avg")),
    ("cross_entropy_backward", "integer grad_loss", (t((), dtype=torch.int64), LOGITS, TARGET, "mean")),
    ("cross_entropy_backward", "grad_loss dtype", (t((), dtype=torch.float64), LOGITS, TARGET, "mean")),
    ("cross_entropy_backward", "grad_loss for none", (t(3), LOGITS, TARGET, "none")),
    ("cross_entropy_backward", "grad_loss for mean", (t(4), LOGITS, TARGET, "mean")),
]


# ---- graph nodes (tests/test_autograd_nodes.py checks each against native PyTorch's) ----
# (name, labops fn, native fn, input shape, whether the node saves a tensor)
NODE_TARGET = torch.tensor([0, 2, 1, 4])  # cross_entropy's: 4 rows of 5 classes
AUTOGRAD_NODE_CASES = [
    ("softmax", lambda a: labops.softmax(a, 0), lambda a: torch.softmax(a, 0), (3, 4), True),
    ("cross_entropy", lambda a: labops.cross_entropy(a, NODE_TARGET), lambda a: F.cross_entropy(a, NODE_TARGET),
     (4, 5), True),
]


def huge_inputs(device, dtype):
    """Rows where exp(x) overflows without the max subtraction (and underflows for -1000)."""
    x = torch.tensor([[1000.0, 999.0, 990.0, 0.0],
                      [-1000.0, -1001.0, -1003.0, -1000.5],
                      [500.0, -500.0, 1000.0, 1000.0],
                      [3.0, float("-inf"), 1.0, float("-inf")]], dtype=torch.float64)
    return x.to(device, dtype)


def backward_tolerances(dtype):
    rtol, atol = tolerances(dtype)
    # y * (g - dot) cancels when g is close to dot; the saved y carries the dtype's rounding.
    return 4 * rtol, 4 * atol


# ---------------------------------------------------------------- softmax

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_forward_matches_oracle(device, dtype):
    rtol, atol = tolerances(dtype)
    for case, x, dim in sample_inputs(device, dtype):
        poison_allocator(device, x.numel() * x.element_size())
        y = labops.softmax(x, dim)
        assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device, case
        assert y.is_contiguous(), case
        expected = torch.softmax(x.double(), dim)
        torch.testing.assert_close(y.double(), expected, rtol=rtol, atol=atol, msg=case)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_forward_many_block_rows_cuda(dtype):
    # Rows that need a whole 1024-thread block, more than twice as many rows as
    # the GPU has multiprocessors: the kernel whose resident blocks prefetch
    # their next row into shared memory, each block looping over many rows.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = {torch.float32: 20000, torch.float64: 4000}.get(dtype, 30000)  # 1024 threads per row, every dtype
    x = torch.randn(2 * sms + 37, n, device="cuda", dtype=torch.float64).to(dtype) * 4
    poison_allocator("cuda", x.numel() * x.element_size())
    y = labops.softmax(x, -1)
    rtol, atol = tolerances(dtype)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_backward_matches_oracle(device, dtype):
    rtol, atol = backward_tolerances(dtype)
    for case, x, dim in sample_inputs(device, dtype, seed=1):
        g = torch.randn(x.shape, dtype=torch.float64).to(device, dtype)
        xl = x.detach().requires_grad_()
        labops.softmax(xl, dim).backward(g)
        x64 = x.double().detach().requires_grad_()
        torch.softmax(x64, dim).backward(g.double())
        assert xl.grad.dtype == dtype, case
        torch.testing.assert_close(xl.grad.double(), x64.grad, rtol=rtol, atol=atol, msg=case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_backward_op_matches_formula(device, dtype):
    # The op alone, on a saved output y that it did not compute itself.
    rtol, atol = tolerances(dtype)
    for case, x, dim in sample_inputs(device, dtype, seed=2):
        y = torch.softmax(x.double(), dim).to(dtype)
        g = torch.randn(x.shape, dtype=torch.float64).to(device, dtype)
        poison_allocator(device, x.numel() * x.element_size())
        dx = torch.ops.labops.softmax_backward(g, y, dim)
        expected = torch._softmax_backward_data(g.double(), y.double(), dim if x.dim() else 0, torch.float64)
        scale = 1.0 + (g.double().abs().max().item() if g.numel() else 0.0)
        torch.testing.assert_close(dx.double(), expected, rtol=rtol, atol=atol * scale, msg=case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_is_stable_on_huge_inputs(device, dtype):
    x = huge_inputs(device, dtype)
    y = labops.softmax(x, -1)
    assert not y.isnan().any(), "the max subtraction is missing: exp overflowed"
    rtol, atol = tolerances(dtype)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), rtol=rtol, atol=atol)
    # Along dim 0 too (strided rows), and the gradient stays finite.
    torch.testing.assert_close(labops.softmax(x, 0).double(), torch.softmax(x.double(), 0), rtol=rtol, atol=atol)
    xl = x.detach().requires_grad_()
    labops.softmax(xl, -1).backward(torch.ones_like(x))
    assert xl.grad.isfinite().all()


def test_naive_reference_overflows_and_stable_one_does_not():
    x = np.array([[1000.0, 0.0], [-1000.0, -1001.0]])
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        naive = reference.naive_softmax_loop(x)
    assert np.isnan(naive[0, 0]) and np.isnan(naive[1]).all()  # inf / inf and 0 / 0
    stable = reference.softmax_loop(x)
    np.testing.assert_allclose(stable, [[1.0, 0.0], [1 / (1 + math.exp(-1)), 1 / (1 + math.exp(1))]], rtol=1e-15, atol=1e-300)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_gradcheck_float64(device, dim):
    x = torch.randn(4, 5, 6, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: labops.softmax(t, dim), (x,))


def softmax_op_samples(device):
    """(op, args) for softmax and its backward, over every sample input (float32)."""
    grads = Seeded(device, seed=1)
    for _, x, dim in sample_inputs(device):
        yield torch.ops.labops.softmax.default, (x.requires_grad_(), dim)
        y = torch.softmax(x, dim).detach()
        yield torch.ops.labops.softmax_backward.default, (grads.randn(*x.shape), y, dim)


def test_softmax_opcheck(device):
    opcheck_every(softmax_op_samples(device))


def test_softmax_bad_arguments(device):
    x = torch.randn(3, 4, device=device)
    for bad in (2, -3):
        with pytest.raises(ValueError, match=r"dim must be in \[-2, 1\] for a 2-D tensor, got"):
            labops.softmax(x, bad)
        with pytest.raises(ValueError, match=r"dim must be in \[-2, 1\] for a 2-D tensor, got"):
            torch.ops.labops.softmax(x, bad)  # the C++ check, for callers that skip the wrapper
    with pytest.raises(TypeError, match="dim must be an int"):
        labops.softmax(x, 1.0)
    for dtype in (torch.int64, torch.bool):
        with pytest.raises(ValueError, match="x must be a floating-point tensor"):
            labops.softmax(x.to(dtype))
        with pytest.raises(ValueError, match="x must be a floating-point tensor"):
            torch.ops.labops.softmax(x.to(dtype), -1)
    y = torch.softmax(x, -1)
    with pytest.raises(ValueError, match="grad_output must have the shape of output"):
        torch.ops.labops.softmax_backward(torch.randn(3, 5, device=device), y, -1)
    with pytest.raises(ValueError, match="grad_output must have the dtype of output"):
        torch.ops.labops.softmax_backward(y.double(), y, -1)


# ---------------------------------------------------------------- the ladder (softmax forward)

def ladder_cases(device, dtype):
    """(name, op, inputs, expected, terms) for tests/test_ladder.py: every sample input, against the float64
    softmax. terms = the row length: an output y carries the rounding of its row's sum, y * sqrt(n) * eps about
    (the textbook adds a row of 40000 float32 one element at a time), and y <= 1."""
    for name, x, dim in sample_inputs(device, dtype):
        yield name, labops.softmax, (x, dim), torch.softmax(x.double(), dim), x.shape[dim] if x.dim() else 1


def ladder_refusals(device):
    """(rung, op, inputs, message regex) for inputs a forced rung cannot take on `device`."""
    x = torch.randn(4, 100, device=device)
    if device == "cpu":
        yield 3, labops.softmax, (x, -1), r"has no rung 3 on CPU \(rungs 1..2\)"
        return
    many_strided = torch.randn(2, 5, 16400, device=device)  # 32800 rows along dim 1: the strided kernel's
    for rung, name in ((2, "block_two_pass"), (3, "register_rows"), (4, "register_prefetch")):
        yield rung, labops.softmax, (many_strided, 1), rf"rung {rung} \({name}\) .*its rows are strided"
    yield (3, labops.softmax, (torch.randn(2, 40000, device=device), -1),
           r"rung 3 \(register_rows\) .*a row of 40000 elements does not fit in the registers")
    yield 4, labops.softmax, (x, -1), r"rung 4 \(register_prefetch\) .*whole 1024-thread block.*a row of 100 elem"
    unaligned = torch.randn(2 * 20000 + 1, device=device)[1:].view(2, 20000)
    yield 4, labops.softmax, (unaligned, -1), r"rung 4 \(register_prefetch\) .*\(not read in 16-byte packs\)"


def test_ladder_defaults_softmax():
    """The default table (labops/ops/softmax.py LADDER_DEFAULTS) on inputs whose rung is known by construction."""
    from labops import ladder

    def rung(device, shape, dim=-1, dtype=torch.float32):
        return ladder.default_rung("softmax", device, torch.empty(shape, dtype=dtype), dim)

    for dtype in DTYPES:
        assert rung("cpu", (4, 100), -1, dtype) == 2 and rung("cpu", (4, 100, 3), 1, dtype) == 2
    assert rung("cpu", (0, 5)) is None
    assert rung("cuda", (2, 5, 16400), 1) == 1  # 32800 strided rows: one thread each
    assert rung("cuda", (2, 3, 1029), 1) == 3  # 2058 strided rows: moved last, rows of 3
    assert rung("cuda", (40, 128)) == 3 and rung("cuda", (3, 5000)) == 3
    assert rung("cuda", (3, 20000)) == 2  # float32 rows of a whole block: two passes
    assert rung("cuda", (3, 20000), -1, torch.float16) == 3  # a few whole-block rows: no prefetch
    assert rung("cuda", (300, 20000), -1, torch.float16) == 4  # more than 2 x 132 multiprocessors
    assert rung("cuda", (300, 3000), -1, torch.float64) == 4 and rung("cuda", (300, 5000), -1, torch.float64) == 2
    assert rung("cuda", (300, 4001), -1, torch.float16) == 3  # odd rows: single loads, never a whole-block row
    assert rung("cuda", (2, 40000)) == 2 and rung("cuda", (2, 9001)) == 2  # too long for registers
    offset = torch.empty(4 * 9000 + 1)[1:].view(4, 9000)  # not 16-byte aligned: single loads, 9000 > 8192
    assert ladder.default_rung("softmax", "cuda", offset, -1) == 2
    # dim 0 of a transposed offset view: its 4 strided rows, moved last, are that view, read in place, unaligned:
    # float16 rows of 20000 in single loads are too long for registers
    moved = torch.empty(4 * 20000 + 1, dtype=torch.float16)[1:].view(4, 20000).t()
    assert ladder.default_rung("softmax", "cuda", moved, 0) == 2
    assert ladder.default_rung("softmax", "cuda", moved.contiguous(), 0) == 3  # aligned: a whole block, few rows
    assert rung("cuda", (4, 0)) is None


# ---------------------------------------------------------------- cross-entropy

def ce_inputs(device, dtype, seed=0):
    """(case, logits, target): row lengths for every CUDA path, odd sizes, non-contiguous, empty."""
    make = Seeded(device, dtype, seed)
    for case, n, c in [("1x1", 1, 1), ("7x3", 7, 3), ("40x128", 40, 128), ("9x1000", 9, 1000),
                       ("17x1001", 17, 1001), ("5x5000", 5, 5000), ("3x40000", 3, 40000), ("2x9001", 2, 9001)]:
        logits = make.randn(n, c, scale=3.0)
        target = torch.randint(0, c, (n,), generator=make.generator).to(device)
        yield case, logits, target
    logits = make.randn(33, 12, scale=3.0).t()  # (12, 33), not contiguous
    target = torch.randint(0, 33, (24,), generator=make.generator).to(device)[::2]  # not contiguous either
    yield "non-contiguous", logits, target
    yield "huge", huge_inputs(device, dtype), torch.tensor([0, 1, 3, 2], device=device)
    yield "empty", torch.zeros(0, 5, device=device, dtype=dtype), torch.zeros(0, dtype=torch.long, device=device)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cross_entropy_forward_matches_oracle(device, dtype, reduction):
    rtol, atol = tolerances(dtype)
    for case, logits, target in ce_inputs(device, dtype):
        loss = labops.cross_entropy(logits, target, reduction)
        expected = F.cross_entropy(logits.double(), target, reduction=reduction)
        assert loss.dtype == dtype and loss.shape == expected.shape, case
        # the loss is a difference log-sum-exp - x_t of numbers as large as the logits
        scale = 1.0 + (logits.double().abs().max().item() if logits.numel() else 0.0)
        torch.testing.assert_close(loss.double(), expected, rtol=rtol, atol=atol * scale, msg=case,
                                   equal_nan=logits.numel() == 0)  # mean over no rows is NaN, as torch


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cross_entropy_backward_matches_oracle(device, dtype, reduction):
    rtol, atol = backward_tolerances(dtype)
    for case, logits, target in ce_inputs(device, dtype, seed=1):
        gshape = (logits.shape[0],) if reduction == "none" else ()
        g = (torch.rand(gshape, dtype=torch.float64) + 0.5).to(device, dtype)
        xl = logits.detach().requires_grad_()
        labops.cross_entropy(xl, target, reduction).backward(g)
        x64 = logits.double().detach().requires_grad_()
        F.cross_entropy(x64, target, reduction=reduction).backward(g.double())
        assert xl.grad.dtype == dtype and xl.grad.shape == logits.shape, case
        torch.testing.assert_close(xl.grad.double(), x64.grad, rtol=rtol, atol=atol, msg=case)


def test_cross_entropy_mean_divides_by_n_and_sum_does_not(device):
    logits = torch.randn(6, 4, dtype=torch.float64, device=device)
    target = torch.tensor([0, 1, 2, 3, 0, 1], device=device)
    grads = {}
    for reduction in ("mean", "sum"):
        x = logits.clone().requires_grad_()
        labops.cross_entropy(x, target, reduction).backward()
        grads[reduction] = x.grad
    torch.testing.assert_close(grads["sum"], 6 * grads["mean"])
    # each row's gradient sums to zero: softmax sums to 1, onehot sums to 1
    torch.testing.assert_close(grads["sum"].sum(1), torch.zeros(6, dtype=torch.float64, device=device))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_gradcheck_float64(device, reduction):
    logits = torch.randn(5, 7, dtype=torch.float64, device=device, requires_grad=True)
    target = torch.tensor([0, 6, 3, 3, 1], device=device)
    assert torch.autograd.gradcheck(lambda t: labops.cross_entropy(t, target, reduction), (logits,))


def cross_entropy_op_samples(device):
    """(op, args) for cross_entropy and its backward, every reduction, over every ce_inputs case (float32)."""
    grads = Seeded(device, seed=1)
    for _, logits, target in ce_inputs(device, torch.float32):
        for reduction in REDUCTIONS:
            # The mean over no rows is NaN (0/0, as F.cross_entropy gives), and opcheck compares outputs
            # without equal_nan: that one case is checked by test_cross_entropy_forward_matches_oracle.
            if not (reduction == "mean" and target.numel() == 0):
                yield torch.ops.labops.cross_entropy.default, (logits.requires_grad_(), target, reduction)
            g = grads.rand(*(target.shape if reduction == "none" else ()), low=0.5, high=1.5)
            yield torch.ops.labops.cross_entropy_backward.default, (g, logits.detach(), target, reduction)


def test_cross_entropy_opcheck(device):
    opcheck_every(cross_entropy_op_samples(device))


def every_op_sample(device):
    """(op, args) for every op of the layer: softmax's and cross_entropy's."""
    yield from softmax_op_samples(device)
    yield from cross_entropy_op_samples(device)


# 4 rows: on CUDA one block checks the targets and reduces the rows (Note [cross-entropy in one launch]);
# 300 rows: find_bad_target checks them, several blocks compute the rows, at::mean reduces them.
@pytest.mark.parametrize("rows", [4, 300])
@pytest.mark.parametrize("bad", [-1, 10, 2**40])
def test_cross_entropy_rejects_out_of_range_target(device, bad, rows):
    logits = torch.randn(rows, 10, device=device)
    target = torch.randint(0, 10, (rows,), device=device)
    target[rows // 2] = bad
    with pytest.raises(ValueError, match=r"target must hold class indices in \[0, C\) = \[0, 10\), got values from"):
        labops.cross_entropy(logits, target)
    # The error came from a flag, not a device-side assert: the device still works.
    y = labops.softmax(logits, -1)
    if device == "cuda":
        torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.softmax(logits, -1))
    target[rows // 2] = 9
    ok = labops.cross_entropy(logits, target)
    assert ok.isfinite()
    assert torch.equal(labops.cross_entropy(logits, target), ok)  # a fixed order of additions: the same bits


def test_cross_entropy_target_check_is_per_call(device):
    # The CUDA check raises a flag in host memory that each host thread owns (Note [cross-entropy target
    # check]): calls from several threads, good and bad interleaved, on side streams too, each get their own verdict.
    import threading
    logits = torch.randn(6, 10, device=device)
    good, bad = torch.tensor([1, 2, 3, 9, 0, 4], device=device), torch.tensor([1, 2, 10, 9, 0, 4], device=device)
    expected = F.cross_entropy(logits, good)
    if device == "cuda":
        torch.cuda.synchronize()  # the side streams below do not wait for the default one
    errors = []

    def worker(k):
        stream = torch.cuda.Stream() if device == "cuda" else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            for i in range(20):
                if (i + k) % 3 == 0:
                    try:
                        labops.cross_entropy(logits, bad)
                        errors.append(f"thread {k} call {i}: no error for a bad target")
                    except ValueError:
                        pass
                else:
                    loss = labops.cross_entropy(logits, good)
                    if not torch.allclose(loss, expected, atol=1e-5, rtol=1e-5):
                        errors.append(f"thread {k} call {i}: loss {loss.item()} != {expected.item()}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []



@pytest.mark.parametrize("rows", [16, 64])  # one launch (Note [cross-entropy in one launch]), three
def test_cross_entropy_replays_in_a_cuda_graph(device, rows):
    """Captured into a CUDA graph (what torch.compile's mode="reduce-overhead" does), the CUDA op skips the
    target check the host cannot wait for (Note [cross-entropy target check]): forward and backward replay on
    new inputs as eager computes them, and a bad target gives NaN instead of an error."""
    if device != "cuda":
        pytest.skip("CUDA graphs")
    randn = Seeded(device, torch.float32, 31).randn
    logits = randn(rows, 10).requires_grad_(True)
    target = torch.randint(0, 10, (rows,), device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capturing stream, as torch.cuda.graph asks
        labops.cross_entropy(logits, target).backward()
    torch.cuda.current_stream().wait_stream(side)
    logits.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = labops.cross_entropy(logits, target)
        (grad,) = torch.autograd.grad(loss, logits)
    for seed in (1, 2):
        new_logits = Seeded(device, torch.float32, seed).randn(rows, 10)
        new_target = torch.randint(0, 10, (rows,), device=device)
        with torch.no_grad():
            logits.copy_(new_logits)
        target.copy_(new_target)
        graph.replay()
        x = new_logits.clone().requires_grad_(True)
        expected = F.cross_entropy(x, new_target)
        (expected_grad,) = torch.autograd.grad(expected, x)
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-6)
    target[3] = 10  # out of range: no error inside the graph, a NaN loss
    graph.replay()
    assert loss.isnan()

def test_cross_entropy_backward_op_marks_bad_target_rows_nan(device):
    # The backward op does not re-validate (the forward did, and raising would
    # cost a device sync); a row with a bad target comes back NaN, never garbage.
    logits = torch.randn(3, 5, device=device)
    target = torch.tensor([1, 7, 0], device=device)
    grad = torch.ops.labops.cross_entropy_backward(torch.tensor(1.0, device=device), logits, target, "sum")
    assert grad[1].isnan().all()
    expected = torch.softmax(logits, -1) - F.one_hot(target.clamp(max=4), 5)
    torch.testing.assert_close(grad[[0, 2]], expected[[0, 2]])


def test_cross_entropy_bad_arguments(device):
    logits = torch.randn(4, 10, device=device)
    target = torch.tensor([1, 2, 3, 4], device=device)
    cases = [
        ((logits, target.int()), r"target must be an int64 \(torch.long\) tensor of class indices, got (torch.int32|Int)"),
        ((logits, target.float()), "target must be an int64"),
        ((logits, target[:3]), r"target must have shape \(N,\) = \(4,\), got \[3\]"),
        ((logits, target[:, None]), r"target must have shape \(N,\)"),
        ((logits[0], target[:1]), "logits must be 2-D"),
        ((logits[None], target), "logits must be 2-D"),
        ((logits.long(), target), "logits must be a floating-point tensor"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            labops.cross_entropy(*args)
        with pytest.raises(ValueError, match=message):
            torch.ops.labops.cross_entropy(*args, "mean")  # the C++ checks, same rules
    with pytest.raises(ValueError, match="reduction must be one of 'mean', 'sum', 'none', got 'avg'"):
        labops.cross_entropy(logits, target, "avg")
    with pytest.raises(ValueError, match="reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        torch.ops.labops.cross_entropy(logits, target, "avg")
    with pytest.raises(ValueError, match=r"grad_loss must have shape \(N,\)"):
        torch.ops.labops.cross_entropy_backward(torch.ones(3, device=device), logits, target, "none")
    with pytest.raises(ValueError, match="grad_loss must be 0-d for reduction='mean'"):
        torch.ops.labops.cross_entropy_backward(torch.ones(4, device=device), logits, target, "mean")


# ---------------------------------------------------------------- together

def test_torch_compile_fullgraph(device):
    def step(x, t):
        p = labops.softmax(x * 2.0, 0)
        return labops.cross_entropy(x + p, t, "sum") + labops.cross_entropy(x, t, "none").max()

    x = torch.randn(16, 10, device=device, requires_grad=True)
    t = torch.randint(0, 10, (16,), device=device)
    assert_compiled_matches_eager(step, x, t)


def test_nn_modules(device):
    x = torch.randn(6, 5, device=device, requires_grad=True)
    t = torch.randint(0, 5, (6,), device=device)
    torch.testing.assert_close(labops.nn.Softmax(0)(x), torch.softmax(x, 0))
    for reduction in REDUCTIONS:
        loss = labops.nn.CrossEntropyLoss(reduction)(x, t)
        torch.testing.assert_close(loss, torch.nn.CrossEntropyLoss(reduction=reduction)(x, t))
    assert "reduction='sum'" in repr(labops.nn.CrossEntropyLoss("sum"))
    with pytest.raises(ValueError, match="reduction must be one of"):
        labops.nn.CrossEntropyLoss("avg")


def test_reference_loops_agree_with_torch_and_ops():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5)) * 3
    g = rng.standard_normal((3, 4, 5))
    for dim in (0, 1, -1):
        y = reference.softmax_loop(x, dim)
        y_torch = torch.softmax(torch.from_numpy(x), dim)
        assert rel_error(y, y_torch) < 1e-14
        assert rel_error(labops.softmax(torch.from_numpy(x), dim), y) < 1e-12
        dx = reference.softmax_backward_loop(g, y, dim)
        numeric = numerical_gradient(lambda t: reference.softmax_loop(t, dim), x, g)
        np.testing.assert_allclose(dx, numeric, rtol=1e-6, atol=1e-9)
    logits = rng.standard_normal((6, 4)) * 3
    target = np.array([0, 3, 2, 1, 1, 0])
    lt, tt = torch.from_numpy(logits), torch.from_numpy(target)
    for reduction in REDUCTIONS:
        loss = reference.cross_entropy_forward_loop(logits, target, reduction)
        assert rel_error(loss, F.cross_entropy(lt, tt, reduction=reduction)) < 1e-13
        assert rel_error(labops.cross_entropy(lt, tt, reduction), loss) < 1e-12
        gl = np.linspace(0.5, 1.5, 6) if reduction == "none" else np.array(1.3)
        grad = reference.cross_entropy_backward_loop(gl, logits, target, reduction)
        numeric = numerical_gradient(lambda t: reference.cross_entropy_forward_loop(t, target, reduction), logits, gl)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match=r"target\[1\] = 4 is not a class index"):
        reference.cross_entropy_forward_loop(logits[:2], [0, 4])
