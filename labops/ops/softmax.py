"""Softmax and fused cross-entropy: Python face of the compiled softmax ops.

The C++ a call reaches: csrc/softmax/entry.h (``SoftmaxOps``: argument
checks, dtype dispatch, the final reduction of per-row losses),
csrc/softmax/softmax.h (the row bodies), csrc/softmax/cpu.cpp and
csrc/softmax/cuda.cu (the launchers); the gradient: csrc/softmax/register.cpp.
"""

import math

import torch

from .._checks import check_choice, check_tensor
from ..ladder import ALL_DTYPES, Default

__all__ = ["CROSS_ENTROPY_REDUCTIONS", "cross_entropy", "softmax"]

CROSS_ENTROPY_REDUCTIONS = ("mean", "sum", "none")

# The ops' OpOverloads, looked up once: `torch.ops.labops.softmax(...)` would walk three attributes
# and resolve the overload on every call, a measurable share of a tiny call's host time
# (tools/host_time.py).
_softmax = torch.ops.labops.softmax.default
_cross_entropy = torch.ops.labops.cross_entropy.default


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim`` (numerically stable).

    Any rank, any dim (negative counts from the end). Backward uses the saved
    output ``y``: ``grad_x = y * (g - sum(g * y, dim))``.

    Args:
        x: floating tensor of any rank.
        dim: the dim that sums to 1.

    Returns:
        a tensor of x's shape and dtype.

    Example:
        >>> import labops
        >>> labops.softmax(torch.tensor([[1000.0, 0.0], [0.0, 0.0]]), dim=1)
        tensor([[1.0000, 0.0000],
                [0.5000, 0.5000]])
    """
    check_tensor(x, "softmax", "x")
    if type(dim) is not int and (isinstance(dim, bool) or not isinstance(dim, int)):
        raise TypeError(f"labops.softmax: dim must be an int, got {type(dim).__name__}")
    return _softmax(x, dim)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """``F.cross_entropy(logits, target, reduction=...)`` fused in one pass per row.

    logits: (N, C) floating point; target: (N,) int64 class indices in [0, C);
    reduction: ``"mean"`` (over N), ``"sum"`` or ``"none"`` (one loss per row).
    Per row: ``loss = max + log(sum(exp(x - max))) - x[target]``. The backward
    recomputes softmax from the logits: ``(softmax - onehot) * g`` (``/ N`` for
    the mean). A target outside [0, C) raises ValueError (on CUDA this reads
    back one flag, so the call synchronizes and cannot be captured in a CUDA
    graph; the CUDA context stays usable). The backward op does not check
    again (autograd only runs it after a forward that passed): called
    directly, it returns NaN for the rows of out-of-range targets.

    Example:
        >>> import labops
        >>> logits = torch.zeros(2, 4, requires_grad=True)
        >>> loss = labops.cross_entropy(logits, torch.tensor([0, 3]))
        >>> loss.backward()
        >>> round(loss.item(), 4), logits.grad[0]  # log 4, and (softmax - onehot) / N
        (1.3863, tensor([-0.3750,  0.1250,  0.1250,  0.1250]))
    """
    check_tensor(logits, "cross_entropy", "logits")
    check_tensor(target, "cross_entropy", "target")
    check_choice(reduction, CROSS_ENTROPY_REDUCTIONS, "cross_entropy", "reduction")
    return _cross_entropy(logits, target, reduction)


# Fake tensors (torch.compile): no Python fake. The Meta kernels of csrc/softmax/register.cpp run the
# C++ rules and shapes of csrc/softmax/entry.h, so a bad argument raises the same error compiled or not.

# Autograd: a graph node built in csrc/softmax/register.cpp (softmax_backward from the saved output,
# cross_entropy_backward from the logits).


# ---- the ladder: which rung the forward runs when none is forced ----------------------------------------------

# The CUDA launcher (SoftmaxLauncher::softmax_forward, csrc/softmax/cuda.cu): strided rows are moved last first
# when there are fewer than this many (Entry::softmax_forward, csrc/softmax/entry.h) ...
_CUDA_MIN_STRIDED_ROWS = 32768
# ... and a row is held in registers by up to 1024 threads of at most this many 16-byte loads (max_loads).
_CUDA_LOADS_PER_THREAD = {8: 2, 4: 8, 2: 4}  # by element size


def _cuda_rows(x, dim):
    """How SoftmaxLauncher sees x's rows (csrc/softmax/cuda.cu, plan_rows): "strided" (one thread per row),
    "block" (rows that need a whole 1024-thread block of 16-byte loads), "fits" (other rows that fit in
    registers) or "long" (rows too long for registers); and the number of rows."""
    d = dim % max(x.dim(), 1)
    n = x.shape[d] if x.dim() else 1
    rows = x.numel() // max(n, 1)
    strided = math.prod(x.shape[d + 1:]) > 1
    if strided and rows >= _CUDA_MIN_STRIDED_ROWS:
        return "strided", rows
    # The rows the kernel reads: x's (few strided rows moved last first), in place when contiguous, else a
    # fresh copy's (aligned: say 256).
    rows_of = x.movedim(d, -1) if strided else x
    aligned = (rows_of.data_ptr() if rows_of.is_contiguous() else 256) % 16 == 0
    pack = 16 // x.element_size()
    loads_cap = _CUDA_LOADS_PER_THREAD[x.element_size()]
    vec = pack if aligned and n % pack == 0 else 1  # elements per load
    loads = -(-n // vec)  # loads per row
    if loads > 1024 * loads_cap:
        return "long", rows
    if loads > 512 * min(4, loads_cap) and vec == pack:  # more than 512 threads of up to 4 loads each
        return "block", rows
    return "fits", rows


def _cuda_multiprocessors(x):
    """The multiprocessors of x's GPU; for a tensor elsewhere, an H100's 132 (what the table is read against)."""
    return torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 132


def _cuda_many_block_rows(x, dim=-1):
    """Rows that need a whole 1024-thread block, more of them than twice the multiprocessors."""
    kind, rows = _cuda_rows(x, dim)
    return kind == "block" and rows > 2 * _cuda_multiprocessors(x)


# Which rung the forward runs when none is forced (labops.ladder.DEFAULTS reads this): per device, the first
# line whose dtype and condition hold. tests/test_ladder.py holds the kernels to it.
LADDER_DEFAULTS = {
    "cpu": (
        Default("vectorized", ALL_DTYPES, "always (float16 and bfloat16 run its bodies one element at a time)"),
    ),
    "cuda": (
        Default("textbook", ALL_DTYPES, f"strided rows (dim not the last) and at least {_CUDA_MIN_STRIDED_ROWS} of "
                "them; fewer are moved last and take the lines below",
                lambda x, dim=-1: _cuda_rows(x, dim)[0] == "strided"),
        Default("block_two_pass", ("float32",), "rows that need a whole 1024-thread block of 16-byte loads (more "
                "than 8K, up to 32K float32): faster in two passes (Note [softmax kernels], prefers_long)",
                lambda x, dim=-1: _cuda_rows(x, dim)[0] == "block"),
        Default("register_prefetch", ("float64", "float16", "bfloat16"), "rows that need a whole 1024-thread block "
                "of 16-byte loads (more than 2K, up to 4K float64; more than 16K, up to 32K float16 or bfloat16), "
                "more rows than twice the multiprocessors",
                lambda x, dim=-1: _cuda_many_block_rows(x, dim)),
        Default("register_rows", ALL_DTYPES, "other rows that fit in registers: 1024 threads of up to 8 loads "
                "(float32), 4 (float16, bfloat16) or 2 (float64), a load 16 bytes when x is 16-byte aligned and "
                "the row a whole number of them, else one element",
                lambda x, dim=-1: _cuda_rows(x, dim)[0] in ("fits", "block")),
        Default("block_two_pass", ALL_DTYPES, "rows too long for registers"),
    ),
}
