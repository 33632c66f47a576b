"""CUDA C kernel exercises: the learner writes a kernel *body*, ``labops.rtc`` compiles and runs it.

A submission is ``kernel_submission(body, launch)``: ``body`` is the CUDA C inside the braces of a
``__global__`` function (each tensor ``x`` is visible as ``x``, ``x_numel``, ``x_dims[]``, ``x_ndim``,
``x_type``; see ``labops.rtc``), and ``launch(**sizes)`` returns ``(grid, block)`` or ``(grid, block,
shared_mem)`` for the sizes the exercise's signature names::

    from labops.exercises import check, kernel_submission
    body = '''
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < x_numel) { ... }
    '''
    check("cuda_gelu", kernel_submission(body, lambda n: ((n + 255) // 256, 256)))

Each case checks the launch against CUDA's rules and the exercise's own (one block per plane, whole
warps, a square tile: the error names the rule), fills the outputs with NaN (so an element no thread
wrote shows as NaN), runs the kernel through ``labops.rtc`` on float32 tensors and compares with a
float64 oracle. On the CPU (the default) rtc runs the threads of a block as cooperative fibers and stops
a launch that reads or writes outside a tensor or a shared array (``OutOfBoundsError``), races
(``DataRaceError``), reaches a ``__syncthreads()`` in a branch some threads skip
(``BarrierDivergenceError``) or reads shared memory no thread wrote (``UninitializedReadError``); the
feedback turns each into the mistake behind it. ``LABOPS_EXERCISE_DEVICE=cuda`` runs the same checks on
the GPU (rtc's checked mode raises the same errors, with less detail).

Mistakes recognised from the output values are computed by an independent float64 formula of the wrong
computation (the sum without the last tile, the tree that drops a partial sum, ...), never by running a
buggy kernel. Where the wrong answer depends on the learner's launch (the block size of a reduction, the
tile of a GEMM), the formula is tried for every launch the exercise allows.

This module reads top to bottom: the machinery, then per exercise its cases, its oracle, its mistakes
(``MISTAKES[exercise_id][key]``), its reference solution (``SOLUTIONS[exercise_id]``, a kernel a student can
learn from that is also fast on a GPU). ``cuda_corpus`` plants each mistake in the references.

The two col2im exercises show why a gather is deterministic and a scatter is not: ``cuda_col2im`` gives
each image pixel one thread that adds the column entries of its taps in a fixed order, so every run
gives the same bits; ``cuda_col2im_atomic`` gives each column entry a thread that ``atomicAdd``s it into
its pixel, and the order in which a pixel's additions land depends on how the GPU schedules the threads.
Float addition is not associative, so two runs can differ in the last bits (both are right to within
rounding; the checks compare with a tolerance).
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import os
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from labops import rtc
from labops.rtc import BarrierDivergenceError, DataRaceError, OutOfBoundsError, UninitializedReadError

from ._core import Case, Check, Exercise, Mistake, randn

__all__ = [
    "BarrierDivergenceError", "DataRaceError", "EXERCISES", "EXERCISES_BY_ID", "EmptyGridError", "KernelSubmission",
    "LaunchConfigError", "MISTAKES", "NegativeIndexError", "OutputRaceError", "SOLUTIONS",
    "SharedOutOfBoundsError", "UninitializedReadError", "exercise_device", "kernel_submission", "mistake_key",
]

# float32 kernels against float64 oracles: a right answer is within a few float32 roundings.
RTOL, ATOL = 2e-5, 1e-5
# Threads a block may hold, and the dynamic shared memory a block may ask for without opting in (CUDA).
MAX_THREADS = 1024
MAX_SHARED_BYTES = 48 * 1024
DEVICE_ENV = "LABOPS_EXERCISE_DEVICE"


# =========================================================================================================
# The machinery: a submission, the launch rules, one launch through rtc
# =========================================================================================================

class LaunchConfigError(ValueError):
    """``launch(**sizes)`` returned a configuration that CUDA or the exercise does not accept."""


class EmptyGridError(LaunchConfigError):
    """The grid has 0 blocks in some dimension (``n // threads`` with fewer elements than threads)."""


# What rtc reports, told apart a little further so that feedback can name the mistake behind it. Each is
# a subclass of rtc's error, with its attributes and message.

class NegativeIndexError(OutOfBoundsError):
    """A tensor was read or written at a negative index (an unchecked tap in the padding, most often)."""


class SharedOutOfBoundsError(OutOfBoundsError):
    """A shared array was read or written outside its size."""


class OutputRaceError(DataRaceError):
    """Two threads wrote (or wrote and read) one element of an output tensor with no order between them."""


def _refine(exc: BaseException, tensor_names) -> BaseException:
    """``exc`` as the subclass above that says more, or ``exc`` itself."""
    cls = None
    if isinstance(exc, OutOfBoundsError):
        name, index = getattr(exc, "tensor", None), getattr(exc, "index", None)
        if name is not None and name not in tensor_names:
            cls = SharedOutOfBoundsError
        elif isinstance(index, int) and index < 0:
            cls = NegativeIndexError
    elif isinstance(exc, DataRaceError) and getattr(exc, "array", None) in tensor_names:
        cls = OutputRaceError
    if cls is None:
        return exc
    refined = cls.__new__(cls)
    refined.__dict__.update(vars(exc))
    refined.args = exc.args
    return refined


def exercise_device() -> torch.device:
    """Where the kernels run: the CPU, or CUDA when ``$LABOPS_EXERCISE_DEVICE`` is ``cuda``."""
    text = os.environ.get(DEVICE_ENV, "").strip().lower() or "cpu"
    if text not in ("cpu", "cuda"):
        raise ValueError(f"${DEVICE_ENV} must be cpu or cuda, got {text!r}")
    return torch.device(text)


class KernelSubmission:
    """A learner's kernel: ``body`` (CUDA C statements) and ``launch`` (sizes -> grid, block[, shared_mem]).

    ``check`` runs it; it can also be called on one exercise's inputs, ``sub(exercise_id, *inputs)``, which
    returns that exercise's outputs as float64 tensors (on the CPU unless ``$LABOPS_EXERCISE_DEVICE`` says
    cuda).
    """

    __slots__ = ("body", "launch")

    def __init__(self, body: str, launch: Callable):
        if not isinstance(body, str):
            raise TypeError(f"kernel_submission: body must be a str of CUDA C statements, got {type(body).__name__}")
        if not body.strip():
            raise ValueError("kernel_submission: body is empty: write the statements of your kernel")
        if not callable(launch):
            raise TypeError(f"kernel_submission: launch must be a function of the exercise's sizes returning "
                            f"(grid, block) or (grid, block, shared_mem), got {type(launch).__name__}")
        self.body, self.launch = body, launch

    def __call__(self, exercise_id: str, *inputs):
        return run_problem(PROBLEMS, self, exercise_id, inputs)

    def __repr__(self):
        first = next((line.strip() for line in self.body.splitlines() if line.strip()), "")
        return f"kernel_submission({first[:40]!r}..., {getattr(self.launch, '__name__', 'launch')})"


def run_problem(problems: dict, submission, exercise_id: str, inputs):
    """``problems[exercise_id].run(submission, inputs)``: a submission called on one exercise's inputs."""
    if exercise_id not in problems:
        raise ValueError(f"exercise_id must be one of {sorted(problems)}, got {exercise_id!r}")
    return problems[exercise_id].run(submission, inputs)


def kernel_submission(body: str, launch: Callable) -> KernelSubmission:
    """Your kernel for a ``cuda_*`` exercise: the body's CUDA C and the launch it needs.

    Args:
        body: the statements inside the braces of the ``__global__`` function. The exercise's signature
            (``describe(exercise_id)``) names the tensors the body sees.
        launch: a function of the exercise's sizes (keyword arguments, named in its signature) returning
            ``(grid, block)`` or ``(grid, block, shared_mem)``: ints or tuples of 1 to 3 ints, and the
            bytes of ``extern __shared__`` memory.

    Returns:
        a ``KernelSubmission`` to pass to ``check``.

    Example:
        >>> sub = kernel_submission("y[0] = x[0];", lambda n: (1, 1))
        >>> sub.launch(n=5)
        (1, 1)
    """
    return KernelSubmission(body, launch)


def _dim3(value, what: str, where: str) -> tuple:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        dims = [int(value)]
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3 and all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in value):
        dims = [int(d) for d in value]
    else:
        hint = (f" ({value!r} is a float: n / threads is a float in Python; round up with "
                f"(n + threads - 1) // threads)") if isinstance(value, float) else ""
        raise LaunchConfigError(f"{where}: {what} must be an int or a tuple of 1 to 3 ints, got {value!r}{hint}")
    if any(d < 0 for d in dims):
        raise LaunchConfigError(f"{where}: every size in {what} must be >= 1, got {value!r}")
    if any(d == 0 for d in dims):
        cls = EmptyGridError if what == "grid" else LaunchConfigError
        raise cls(f"{where}: {what} = {value!r} has 0 {'blocks' if what == 'grid' else 'threads'} along an axis "
                  f"(every size must be >= 1). n // threads is 0 when n < threads: round up, "
                  f"(n + threads - 1) // threads")
    return tuple(dims + [1] * (3 - len(dims)))


@dataclass(frozen=True)
class Launch:
    """A checked launch: grid and block as 3-tuples, and the dynamic shared memory in bytes."""

    grid: tuple
    block: tuple
    shared_mem: int

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


def _check_launch(config, where: str) -> Launch:
    if not isinstance(config, tuple) or len(config) not in (2, 3):
        raise LaunchConfigError(f"{where} returned {config!r}: launch must return (grid, block) or "
                                f"(grid, block, shared_mem)")
    grid, block = _dim3(config[0], "grid", where), _dim3(config[1], "block", where)
    shared = config[2] if len(config) == 3 else 0
    for axis, (b, limit) in enumerate(zip(block, (1024, 1024, 64))):
        if b > limit:
            raise LaunchConfigError(f"{where}: block.{'xyz'[axis]} = {b}, but CUDA allows at most {limit}")
    for axis, (g, limit) in enumerate(zip(grid, (2**31 - 1, 65535, 65535))):
        if g > limit:
            raise LaunchConfigError(f"{where}: grid.{'xyz'[axis]} = {g}, but CUDA allows at most {limit}")
    launch = Launch(grid, block, 0)
    if launch.threads > MAX_THREADS:
        raise LaunchConfigError(f"{where}: block {config[1]!r} has {launch.threads} threads, but a CUDA block "
                                f"holds at most {MAX_THREADS}")
    if isinstance(shared, bool) or not isinstance(shared, numbers.Integral) or not 0 <= shared <= MAX_SHARED_BYTES:
        raise LaunchConfigError(f"{where}: shared_mem must be an int of bytes from 0 to {MAX_SHARED_BYTES} "
                                f"(48 KiB, what a block may ask for by default), got {shared!r}")
    return Launch(grid, block, int(shared))


@dataclass(frozen=True)
class Problem:
    """How one exercise's case becomes a launch: the kernel's tensors, the sizes ``launch`` is called with,
    the exercise's own launch rule, and what the outputs are filled with before the launch."""

    kernel_name: str
    inputs: tuple
    outputs: tuple
    # case args -> (input tensors in rtc's order with their dtypes, output shapes, sizes for launch)
    setup: Callable
    # (Launch, sizes) -> None, or the rule it breaks (one sentence)
    rule: Callable | None = None
    fill: float = math.nan
    # the outputs (float64, CPU) -> what the case compares
    result: Callable | None = None

    def run(self, submission, args):
        if not isinstance(submission, KernelSubmission):
            raise TypeError(f"this exercise checks a CUDA kernel: pass kernel_submission(body, launch), "
                            f"got {type(submission).__name__}")
        device = exercise_device()
        inputs, out_shapes, sizes = self.setup(*args)
        where = "launch(" + ", ".join(f"{k}={v}" for k, v in sizes.items()) + ")"
        launch = _check_launch(submission.launch(**sizes), where)
        broken = self.rule(launch, sizes) if self.rule is not None else None
        if broken:
            raise LaunchConfigError(f"{where} returned grid={launch.grid}, block={launch.block}: {broken}")
        ins = [t.to(device) for t in inputs]
        outs = [torch.full(shape, self.fill, dtype=torch.float32, device=device) for shape in out_shapes]
        k = rtc.kernel(self.kernel_name, list(self.inputs), list(self.outputs), submission.body)
        try:
            # checked: on the CPU always; on a GPU rtc_cuda_checked.h reports the same bugs
            k(*ins, *outs, grid=launch.grid, block=launch.block, shared_mem=launch.shared_mem, checked=True)
        except (OutOfBoundsError, DataRaceError) as exc:
            refined = _refine(exc, self.inputs + self.outputs)
            if refined is exc:
                raise
            raise refined from None
        results = [o.to("cpu", torch.float64) for o in outs]
        if self.result is not None:
            return self.result(*results)
        return results[0] if len(results) == 1 else tuple(results)


def _f32(t: torch.Tensor) -> torch.Tensor:
    """float64 values that float32 holds exactly: the kernel's inputs and the oracle's are the same numbers."""
    return t.to(torch.float32).to(torch.float64)


def _whole_warps(launch: Launch, sizes) -> str | None:
    if launch.threads % 32:
        return (f"the block has {launch.threads} threads; warp shuffles need whole warps, so a block's thread "
                f"count must be a multiple of 32")
    return None


# ---- comparisons shared by the mistakes ----

def _outputs(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _close(got, wrong) -> bool:
    """``got`` equals the wrong answer ``wrong`` (a tensor or a tuple of them) to within the tolerance."""
    try:
        got, wrong = _outputs(got), _outputs(wrong)
        if len(got) != len(wrong):
            return False
        for g, w in zip(got, wrong):
            g, w = torch.as_tensor(g, dtype=torch.float64), torch.as_tensor(w, dtype=torch.float64)
            if g.shape != w.shape or not bool(torch.isclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True).all()):
                return False
        return True
    except Exception:
        return False


def _unwritten(case, got) -> bool:
    """Some elements still hold the NaN the output was filled with, and every element written is right."""
    got, expected = _outputs(got), _outputs(case.expected)
    if len(got) != len(expected):
        return False
    some_missing = False
    for g, e in zip(got, expected):
        g = torch.as_tensor(g, dtype=torch.float64)
        if g.shape != e.shape:
            return False
        missing = torch.isnan(g) & ~torch.isnan(e)
        some_missing |= bool(missing.any())
        written = ~missing
        if not bool(torch.isclose(g[written], e[written], rtol=RTOL, atol=ATOL).all()):
            return False
    return some_missing


# Which error of the emulator (rtc's, refined by _refine, or the launch rules') catches each kind of mistake a
# kernel or its launch can make. A mistake table names the kind, through _caught, and gives its own sentence.
CAUGHT_BY = {
    "guard": OutOfBoundsError,  # a read or write past the end of a tensor
    "padding": NegativeIndexError,  # a tensor read at a negative index: an unchecked tap in the padding
    "shared_bounds": SharedOutOfBoundsError,  # an index outside a shared array
    "output_race": OutputRaceError,  # two threads wrote one element of an output
    "shared_race": DataRaceError,  # a race on shared memory
    "divergent_barrier": BarrierDivergenceError,  # a __syncthreads() some threads of the block skip
    "uninitialized": UninitializedReadError,  # a read of shared memory no thread wrote
    "unwritten": EmptyGridError,  # a grid of 0 blocks (other launches that fall short: _unwritten)
    "launch_rule": LaunchConfigError,  # a launch configuration CUDA or the exercise refuses
}


def _caught(kind, sentence, **how) -> Mistake:
    """The mistake of ``kind`` (a key of CAUGHT_BY), named by ``sentence``; ``how``: other ways to recognise it."""
    return Mistake(sentence, raises=CAUGHT_BY[kind], **how)


def _guard_mistake(sentence) -> Mistake:
    return _caught("guard", sentence)


UNWRITTEN = ("Some elements were never written (they still hold the NaN the output was filled with) and every "
             "element written is right: the launch does not cover the output. Round the grid up, blocks = "
             "(n + threads - 1) // threads with the block size the kernel is launched with, and let the guard "
             "admit every index < n.")
LAUNCH_RULE = ("Your launch() returned a configuration that CUDA or this exercise does not accept (the error "
               "names the rule): grid and block are ints or tuples of ints (// in Python, not /), a block holds "
               "at most 1024 threads, and the exercise's own rule holds.")


def _unwritten_mistake(sentence=UNWRITTEN) -> Mistake:
    return _caught("unwritten", sentence, test=_unwritten)


def _launch_rule_mistake(sentence=LAUNCH_RULE) -> Mistake:
    return _caught("launch_rule", sentence)


MISTAKES: dict[str, dict[str, Mistake]] = {}
SOLUTIONS: dict[str, KernelSubmission] = {}
PROBLEMS: dict[str, Problem] = {}


def mistake_key(exercise_id: str, sentence: str | None) -> str | None:
    """The key of the mistake of ``exercise_id`` whose sentence is ``sentence`` (None for none)."""
    for key, m in MISTAKES[exercise_id].items():
        if m.sentence == sentence:
            return key
    return None


def _exercise(exercise_id, title, signature, checks, problem, mistakes, solution) -> Exercise:
    PROBLEMS[exercise_id], MISTAKES[exercise_id], SOLUTIONS[exercise_id] = problem, mistakes, solution
    return Exercise(exercise_id, title, signature, checks, mistakes=list(mistakes.values()),
                    call=lambda fn, args: problem.run(fn, args), rtol=RTOL, atol=ATOL)


# ---- reductions as a launch performs them: the wrong answers of a block reduction ----
# A block of B threads reduces L values with thread t taking t, t + B, t + 2B, ...; the functions below
# compute, in float64, what a reduction gives when one step is wrong. B is the learner's, so a mistake's
# test tries every B the exercise allows.

def _strided_partials(values: torch.Tensor, threads: int, assign: bool = False, valid=None) -> torch.Tensor:
    """(rows, L) -> (rows, B): what thread t holds after its slice, t, t + B, ... (when ``assign``, `sum = v`
    where `sum += v` belongs: the last value of the slice, or the last where ``valid``, (rows, L) bool)."""
    rows, n = values.shape
    pad = (-n) % threads if n else threads
    padded = F.pad(values, (0, pad)).reshape(rows, -1, threads)
    if not assign:
        return padded.sum(1)
    valid = torch.ones(rows, n, dtype=torch.bool) if valid is None else valid
    valid = F.pad(valid, (0, pad)).reshape(rows, -1, threads)
    step = torch.arange(1, padded.shape[1] + 1)[None, :, None]
    last = (valid * step).argmax(1, keepdim=True)  # the last valid step of each thread's slice
    return torch.where(valid.any(1), padded.gather(1, last).squeeze(1), torch.zeros(()))


def _shuffle_reduce(lanes: torch.Tensor, offsets, kind: str = "down", op=torch.add) -> torch.Tensor:
    """Values of a warp's 32 lanes (last dim) after `v = op(v, __shfl_<kind>_sync(mask, v, o))` for each
    offset; a down shuffle from past lane 31 returns the lane's own value, as CUDA's does."""
    lane = torch.arange(32)
    for o in offsets:
        src = lane ^ o if kind == "xor" else torch.where(lane + o < 32, lane + o, lane)
        lanes = op(lanes, lanes[..., src])
    return lanes


_FULL_WARP = (16, 8, 4, 2, 1)
_SHORT_WARPS = ((8, 4, 2, 1), (16, 8, 4, 2), (4, 2, 1), (16, 8, 4), (16,))


# =========================================================================================================
# a. cuda_gelu: exact GELU and its derivative, one element per thread
# =========================================================================================================

def _gelu_parts(x):
    cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))        # Phi(x), the standard normal CDF
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)  # phi(x), its density
    return cdf, pdf


def _gelu_derivative(x):
    cdf, pdf = _gelu_parts(x)
    return cdf + x * pdf


def gelu_oracle(x, gy):
    """y = x * Phi(x) and gx = gy * (Phi(x) + x * phi(x)), in float64."""
    return x * _gelu_parts(x)[0], gy * _gelu_derivative(x)


def _gelu_case(label, shape, seed, scale=2.0):
    x, gy = _f32(randn(*shape, seed=seed, scale=scale)), _f32(randn(*shape, seed=seed + 1))
    return Case(f"{label}: x of shape {tuple(shape)}", (x, gy), gelu_oracle(x, gy), ("y", "gx"))


def _gelu_checks(hidden):
    c = _gelu_case
    return [
        Check("random values, n not a multiple of the block", [c("random", (1000,), 401)]
              + ([c("random", (3000,), 402)] if hidden else [])),
        Check("one element", [c("one element", (1,), 403)]),
        Check("ragged sizes and a 2-D tensor", [c("ragged", (257,), 405), c("2-D", (7, 13), 407)]
              + ([c("ragged", (33,), 408)] if hidden else [])),
        Check("large |x| (the tails of erf and exp)", [c("wide range", (301,), 409, scale=6.0)]),
    ]


def _gelu_setup(x, gy):
    return [x.float(), gy.float()], [tuple(x.shape)] * 2, {"n": x.numel()}


def _gelu_y_is(formula):
    """A test: y equals ``formula(x)`` (whatever gx is)."""
    return lambda case, got: _close(got[0], formula(case.args[0]))


def _gelu_gx_is(*formulas):
    """A test: y is right and gx equals one of ``formulas(x, gy)``."""
    def test(case, got):
        x, gy = case.args
        return _close(got[0], case.expected[0]) and any(_close(got[1], f(x, gy)) for f in formulas)
    return test


_SQRT2, _SQRT2PI = math.sqrt(2), math.sqrt(2 * math.pi)

GELU_MISTAKES = {
    "guard": _guard_mistake(
        "A thread read or wrote past the end of a tensor: the grid has more threads than elements, so each "
        "thread must check its index first (if (i < x_numel)) and do nothing when it is past the end."),
    "index": _caught("output_race",
        "Two threads wrote the same element: each thread's element is its global index, i = blockIdx.x * "
        "blockDim.x + threadIdx.x, so that the grid's threads take one element each."),
    "unwritten": _unwritten_mistake(),
    "launch_rule": _launch_rule_mistake(),
    "swapped_outputs": Mistake(
        "y and gx are swapped: y = x * Phi(x) is the forward, gx = gy * (Phi(x) + x * phi(x)) the gradient.",
        test=lambda case, got: _close(got, case.expected[::-1])),
    "tanh": Mistake(
        "That is GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); this exercise "
        "wants the exact GELU, x * Phi(x) with Phi(x) = (1 + erff(x / sqrt(2))) / 2.",
        test=_gelu_y_is(lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))))),
    "sigmoid": Mistake(
        "That is GELU's sigmoid approximation x * sigmoid(1.702 x); this exercise wants the exact GELU, "
        "x * Phi(x) with Phi(x) = (1 + erff(x / sqrt(2))) / 2.",
        test=_gelu_y_is(lambda x: x * torch.sigmoid(1.702 * x))),
    "erf_argument": Mistake(
        "The erf argument is wrong: the normal CDF is Phi(x) = (1 + erf(x / sqrt(2))) / 2, so erff takes x "
        "times 1/sqrt(2) (0.70710678f), not x or x * sqrt(2).",
        test=lambda case, got: any(_close(got[0], case.args[0] * 0.5 * (1 + torch.erf(case.args[0] * s)))
                                   for s in (1.0, _SQRT2))),
    "cdf": Mistake(
        "Phi(x) is wrong: the normal CDF is (1 + erf(x / sqrt(2))) / 2, both the 1 + and the halving.",
        test=lambda case, got: any(_close(got[0], case.args[0] * f(torch.erf(case.args[0] / _SQRT2)))
                                   for f in (lambda e: 1 + e, lambda e: 0.5 * e, lambda e: e))),
    "times_x": Mistake(
        "y is Phi(x): GELU multiplies its input by it, y = x * Phi(x).",
        test=_gelu_y_is(lambda x: _gelu_parts(x)[0])),
    "product_rule": Mistake(
        "The gradient misses a term of the product rule: d/dx [x * Phi(x)] = Phi(x) + x * phi(x), "
        "so gx = gy * (Phi(x) + x * phi(x)).",
        test=_gelu_gx_is(lambda x, gy: gy * _gelu_parts(x)[0], lambda x, gy: gy * x * _gelu_parts(x)[1])),
    "chain_rule": Mistake(
        "The gradient forgot the chain rule: gx is the incoming gradient gy times GELU'(x), "
        "gx = gy * (Phi(x) + x * phi(x)).",
        test=_gelu_gx_is(lambda x, gy: _gelu_derivative(x), lambda x, gy: x * _gelu_derivative(x))),
    "pdf": Mistake(
        "phi(x) is wrong: the normal density is exp(-x*x / 2) / sqrt(2 pi) (0.39894228f), the halved "
        "square in the exponent and the 1/sqrt(2 pi) in front.",
        test=_gelu_gx_is(lambda x, gy: gy * (_gelu_parts(x)[0] + x * torch.exp(-0.5 * x * x)),
                         lambda x, gy: gy * (_gelu_parts(x)[0] + x * torch.exp(-x * x) / _SQRT2PI),
                         lambda x, gy: gy * (_gelu_parts(x)[0] + x * torch.exp(-0.5 * x * x) / _SQRT2))),
}

# The reference: one element per thread. A warp's 32 threads read 32 neighbouring floats and write 32
# neighbouring floats (coalesced); the kernel is bound by memory, and one element per thread keeps every
# load a full 128-byte line.
GELU_BODY = r"""
// GELU and its derivative, one element per thread:
//   y  = x * Phi(x),                   Phi(x) = (1 + erf(x / sqrt 2)) / 2   the standard normal CDF
//   gx = gy * (Phi(x) + x * phi(x)),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)  its density
const float kInvSqrt2 = 0.70710678118654752f;    // 1 / sqrt(2)
const float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi)
const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_numel) {                               // the last block runs past the end
  const float v = x[i];
  const float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
  y[i] = v * cdf;
  gx[i] = gy[i] * (cdf + v * pdf);
}
"""


def gelu_launch(n):
    """256 threads a block (8 warps), enough blocks to cover n: round up."""
    return (n + 255) // 256, 256


CUDA_GELU = _exercise(
    "cuda_gelu", "A CUDA kernel: exact GELU forward and its gradient, one element per thread",
    "kernel_submission(body, launch)   body sees inputs x, gy and outputs y, gx (float32, same shape, "
    "flattened as x_numel elements) and sets y = x * Phi(x), gx = gy * (Phi(x) + x * phi(x)); "
    "launch(n) -> (grid, block)",
    _gelu_checks,
    Problem("gelu", ("x", "gy"), ("y", "gx"), _gelu_setup),
    GELU_MISTAKES,
    kernel_submission(GELU_BODY, gelu_launch),
)


# =========================================================================================================
# b. cuda_global_avg_pool: one block per (n, c) plane, a tree reduction in shared memory
# =========================================================================================================

def _pool_case(label, shape, seed):
    x = _f32(randn(*shape, seed=seed))
    return Case(f"{label}: x of shape {tuple(shape)}", (x,), x.mean((2, 3)), ("y",))


def _pool_checks(hidden):
    c = _pool_case
    return [
        Check("planes smaller than the block", [c("7 x 7 planes", (2, 3, 7, 7), 421)]
              + ([c("3 x 5 planes", (2, 2, 3, 5), 422)] if hidden else [])),
        Check("one element per plane, one plane", [c("1 x 1 planes", (2, 2, 1, 1), 423), c("one plane", (1, 1, 5, 9), 424)]),
        Check("ragged planes", [c("13 x 11 planes", (2, 2, 13, 11), 425)]),
        Check("planes larger than the block (each thread loops)", [c("33 x 40 planes", (1, 2, 33, 40), 427)]
              + ([c("32 x 37 planes", (1, 2, 32, 37), 428)] if hidden else [])),
    ]


def _pool_setup(x):
    n, c, h, w = x.shape
    return [x.float()], [(n, c)], {"n": n, "c": c, "h": h, "w": w}


def _pool_rule(launch, s):
    if launch.grid != (s["n"] * s["c"], 1, 1):
        return f"one block per (n, c) plane: grid must be n * c = {s['n'] * s['c']} blocks (1-D)"
    if launch.block[1:] != (1, 1):
        return "the block must be 1-D, (threads,): the reduction indexes threads by threadIdx.x"
    return None


@functools.lru_cache(maxsize=None)
def _halving_survivors(threads: int) -> tuple:
    """The threads whose partial sums reach partial[0] in the tree that assumes a power of two:
    for (s = blockDim.x / 2; s > 0; s >>= 1) if (t < s) partial[t] += partial[t + s]."""
    reach = [{t} for t in range(threads)]
    s = threads // 2
    while s > 0:
        for t in range(s):
            reach[t] = reach[t] | reach[t + s]
        s //= 2
    return tuple(sorted(reach[0]))


@functools.lru_cache(maxsize=None)
def _assign_tree_source(threads: int) -> int:
    """The thread whose partial ends in partial[0] when the (right) tree step is = instead of +=."""
    source, active = list(range(threads)), threads  # source[t]: whose partial sits in partial[t]
    while active > 1:
        half = (active + 1) // 2
        for t in range(active - half):
            source[t] = source[t + half]
        active = half
    return source[0]


def _pool_planes(case):
    x = case.args[0]
    return x.reshape(x.shape[0] * x.shape[1], -1), x.shape[2] * x.shape[3]


def _pool_any_block(case, got, total_of_partials, assign=False):
    """got == total_of_partials(partials) / (H*W) for some block size of 1..1024 threads."""
    planes, size = _pool_planes(case)
    got = torch.as_tensor(got, dtype=torch.float64).reshape(-1)
    for threads in range(1, MAX_THREADS + 1):
        partials = _strided_partials(planes, threads, assign)
        if _close(got, total_of_partials(partials, threads) / size):
            return True
    return False


def _pool_divisor(case, got):
    """got is the plane sums divided by a whole number that is not H * W (1, H, W, blockDim.x, ...)."""
    planes, size = _pool_planes(case)
    sums = planes.sum(1)
    got = torch.as_tensor(got, dtype=torch.float64).reshape(-1)
    d = float(sums[0] / got[0]) if got[0] != 0 else math.nan
    if not math.isfinite(d) or round(d) < 1 or round(d) == size:
        return False
    return _close(got, sums / round(d))


def _pool_plane_stride(case, got):
    """Plane p read from x + p * S with S = H or W (not H * W)."""
    x = case.args[0]
    flat, (n, c, h, w) = x.reshape(-1), x.shape
    for stride in {h, w} - {h * w}:
        starts = torch.arange(n * c) * stride
        idx = starts[:, None] + torch.arange(h * w)
        if _close(got, flat[idx].mean(1).reshape(n, c)):
            return True
    return False


def _pool_slice(case, got):
    """Each thread took x[t] only (no loop) or x[t], x[t+1], ... (a step of 1)."""
    planes, size = _pool_planes(case)
    got = torch.as_tensor(got, dtype=torch.float64).reshape(-1)
    j = torch.arange(size, dtype=torch.float64)
    for threads in range(1, min(size, MAX_THREADS + 1)):
        if _close(got, planes[:, :threads].sum(1) / size) or \
                _close(got, (planes * torch.clamp(j + 1, max=threads)).sum(1) / size):
            return True
    return False


POOL_MISTAKES = {
    "shared_bounds": _caught("shared_bounds",
        "An index outside the shared array: extern __shared__ memory holds shared_mem bytes, so blockDim.x "
        "floats need shared_mem = blockDim.x * 4 (sizeof(float)), and a static array needs at least blockDim.x "
        "elements."),
    "loop_bound": _guard_mistake(
        "A read past the end of x: a thread's slice of plane p is x[p * H * W + k] for k = threadIdx.x, "
        "threadIdx.x + blockDim.x, ... while k < H * W (not <=)."),
    "output_race": _caught("output_race",
        "Several threads wrote y[plane]: after the reduction one thread (threadIdx.x == 0) writes the block's "
        "result."),
    "shared_race": _caught("shared_race",
        "Threads read partial[] while other threads may still write it (a data race): a __syncthreads() must "
        "separate writing the partial sums from reading them, and each step of the tree from the next."),
    "divergent_barrier": _caught("divergent_barrier",
        "A __syncthreads() that not every thread reaches (inside an if, after a return or a break): every "
        "thread of the block must reach each __syncthreads(), so put it after the if, where all threads pass."),
    "uninitialized": _caught("uninitialized",
        "The tree read a partial sum that no thread wrote: every thread must write partial[threadIdx.x] "
        "(0 when its slice is empty, as when H * W < blockDim.x) before the tree starts."),
    "unwritten": _unwritten_mistake(),
    "launch_rule": _launch_rule_mistake(),
    "power_of_two": Mistake(
        "The tree assumes blockDim.x is a power of two: halving 96 threads gives 48, 24, 12, 6, 3, then 1, and "
        "the third partial of 3 is dropped. Round the half up, half = (active + 1) / 2, and add "
        "partial[t + half] only when t + half < active.",
        test=lambda case, got: _pool_any_block(
            case, got, lambda p, threads: p[:, list(_halving_survivors(threads))].sum(1))),
    "assign": Mistake(
        "An = where += belongs: a thread's running sum (sum += x[...]) and each tree step "
        "(partial[t] += partial[t + half]) add to what is there.",
        test=lambda case, got: _pool_any_block(case, got, lambda p, threads: p.sum(1), assign=True)
        or _pool_any_block(case, got, lambda p, threads: p[:, _assign_tree_source(threads)])),
    "divisor": Mistake(
        "The mean divides by the wrong count (or not at all): y is the sum of the plane's H * W values divided "
        "by H * W, whatever blockDim.x is.", test=_pool_divisor),
    "plane_offset": Mistake(
        "Plane p starts at x + p * H * W (n and c flattened together, p = n * C + c): the offset must step by "
        "the whole plane, not by H or W.", test=_pool_plane_stride),
    "slice": Mistake(
        "Each thread must visit k = threadIdx.x, threadIdx.x + blockDim.x, ... < H * W: without the loop the "
        "values past blockDim.x are dropped, and a step of 1 counts values several times.", test=_pool_slice),
}

POOL_BODY = r"""
// Global average pooling: one block per (n, c) plane; its threads add the plane's H * W values and
// thread 0 writes the mean.
extern __shared__ float partial[];             // blockDim.x floats: the launch passes shared_mem
const long long plane = blockIdx.x;            // = n * C + c
const long long size = x_dims[2] * x_dims[3];  // H * W
const unsigned int t = threadIdx.x;

// 1. Each thread adds a strided slice, k = t, t + blockDim.x, ...: at every step the block's threads read
//    neighbouring addresses (coalesced).
float sum = 0.0f;
for (long long k = t; k < size; k += blockDim.x) sum += x[plane * size + k];
partial[t] = sum;                              // every thread writes its slot, 0 for an empty slice
__syncthreads();

// 2. A tree over the partial sums that works for any blockDim.x: fold the upper half onto the lower half,
//    rounding the half up, until one value is left.
for (unsigned int active = blockDim.x; active > 1; ) {
  const unsigned int half = (active + 1) / 2;
  if (t + half < active) partial[t] += partial[t + half];
  __syncthreads();                             // outside the if: every thread of the block reaches it
  active = half;
}
if (t == 0) y[plane] = partial[0] / (float)size;
"""


def pool_launch(n, c, h, w):
    """One block per plane; 128 threads (4 warps) and their 128 floats of shared memory."""
    threads = 128
    return n * c, threads, threads * 4


CUDA_GLOBAL_AVG_POOL = _exercise(
    "cuda_global_avg_pool", "A CUDA kernel: global average pooling, one block per plane, a shared-memory tree",
    "kernel_submission(body, launch)   body sees input x (N, C, H, W) and output y (N, C) (float32) and sets "
    "y[n][c] = the mean of plane (n, c); launch(n, c, h, w) -> (grid, block[, shared_mem]) with one block per "
    "plane (grid = n * c) and any 1-D block",
    _pool_checks,
    Problem("global_avg_pool", ("x",), ("y",), _pool_setup, rule=_pool_rule),
    POOL_MISTAKES,
    kernel_submission(POOL_BODY, pool_launch),
)


# =========================================================================================================
# c. cuda_softmax: one warp per row, max and sum through warp shuffles
# =========================================================================================================

def _softmax_case(label, shape, seed, row_scales=None):
    x = randn(*shape, seed=seed)
    if row_scales is not None:
        x = x * torch.tensor(row_scales, dtype=torch.float64)[:, None]
    x = _f32(x)
    return Case(f"{label}: x of shape {tuple(shape)}", (x,), torch.softmax(x, 1), ("y",))


def _softmax_checks(hidden):
    c = _softmax_case
    return [
        Check("rows shorter than a warp, rows not a multiple of the warps per block",
              [c("random", (5, 10), 441)] + ([c("random", (6, 20), 442)] if hidden else [])),
        Check("rows longer than a warp (each lane loops)", [c("random", (7, 33), 443), c("random", (3, 100), 445)]),
        Check("one element", [c("one element", (1, 1), 447)]),
        Check("large logits (exp overflows float32 beyond 88)",
              [c("rows scaled by 100", (4, 40), 449, row_scales=[100, 1, 100, 1])]
              + ([c("rows scaled by 300", (3, 7), 450, row_scales=[1, 300, 300])] if hidden else [])),
    ]


def _softmax_setup(x):
    rows, cols = x.shape
    return [x.float()], [(rows, cols)], {"rows": rows, "cols": cols}


def _warp_softmax(x, *, max_offsets=_FULL_WARP, max_kind="xor", max_broadcast=False, sum_offsets=_FULL_WARP,
                  sum_kind="down", sum_broadcast=True, sum_step=32):
    """Softmax as one warp per row computes it: lane l takes columns l, l + 32, ...; the knobs are the
    shuffles (offsets, xor or down, whether lane 0's result is broadcast) and the sum loop's step."""
    rows, cols = x.shape
    groups = -(-cols // 32)
    padded = F.pad(x, (0, groups * 32 - cols), value=-math.inf).reshape(rows, groups, 32)
    valid = (torch.arange(groups * 32) < cols).reshape(groups, 32)
    m = _shuffle_reduce(padded.max(1).values, max_offsets, max_kind, torch.maximum)
    if max_broadcast:
        m = m[:, :1].expand(rows, 32)
    if sum_step == 32:
        s = torch.where(valid, torch.exp(padded - m[:, None, :]), torch.zeros(())).sum(1)
    else:  # lane l adds columns l, l + 1, ..., cols - 1
        s = torch.stack([torch.exp(x[:, l:] - m[:, l:l + 1]).sum(1) for l in range(32)], 1)
    s = _shuffle_reduce(s, sum_offsets, sum_kind, torch.add)
    if sum_broadcast:
        s = s[:, :1].expand(rows, 32)
    lane = torch.arange(cols) % 32
    return torch.exp(x - m[:, lane]) / s[:, lane]


def _softmax_matches(**variants):
    """A test: got is _warp_softmax(x, **one of the variants)."""
    def test(case, got):
        x = case.args[0]
        return any(_close(got, _warp_softmax(x, **v)) for v in variants.values())
    return test


def _softmax_overflow(case, got):
    """NaN exactly where float32 exp(x) / sum(exp(x)) gives NaN: the max was not subtracted."""
    x = case.args[0].float()
    e = torch.exp(x)
    bad = ~torch.isfinite(e / e.sum(1, keepdim=True))
    got = torch.as_tensor(got)
    return bool(bad.any()) and got.shape == bad.shape and torch.equal(~torch.isfinite(got), bad)


def _softmax_formula(case, got, *formulas):
    x = case.args[0]
    m = x.max(1, keepdim=True).values
    return any(_close(got, f(x, m)) for f in formulas)


_SHORT_OFFSETS = {f"max {o}": {"max_offsets": o} for o in _SHORT_WARPS} | \
                 {f"sum {o}": {"sum_offsets": o} for o in _SHORT_WARPS}

SOFTMAX_MISTAKES = {
    "guard": _guard_mistake(
        "A warp read past the end of x: the last block has warps past the last row, so a warp must check "
        "its row first (if (row >= rows) return;) and leave as a whole warp."),
    "output_race": _caught("output_race",
        "Two threads wrote one element of y: each warp owns its own row (row = blockIdx.x * (blockDim.x / 32) "
        "+ threadIdx.x / 32), and its 32 lanes split the columns, j = lane, lane + 32, ..."),
    "no_max": Mistake(
        "NaN at large logits: exp(x) overflows float32 beyond x = 88 and inf / inf is NaN. Subtract the row's "
        "max first: softmax(x) = exp(x - m) / sum(exp(x - m)) with m = max(x).", test=_softmax_overflow),
    "unwritten": _unwritten_mistake(
        "Some rows were never written (they still hold NaN) and every row written is right: the grid must "
        "cover every row. With W = blockDim.x / 32 warps (rows) a block, round up: blocks = (rows + W - 1) // W."),
    "launch_rule": _launch_rule_mistake(),
    "shuffle_offsets": Mistake(
        "The shuffle loop does not cover the warp: with offsets 16, 8, 4, 2, 1 (warpSize / 2 down to 1) every "
        "lane's value reaches the result; starting lower, or stopping before 1, leaves lanes out.",
        test=_softmax_matches(**_SHORT_OFFSETS)),
    "no_broadcast": Mistake(
        "After __shfl_down_sync only lane 0 holds the total: broadcast it to the warp with "
        "__shfl_sync(0xffffffff, s, 0), or reduce with __shfl_xor_sync, which leaves it in every lane.",
        test=_softmax_matches(max_down={"max_kind": "down"}, sum_down={"sum_broadcast": False})),
    "lane_stride": Mistake(
        "A lane must take columns lane, lane + 32, lane + 64, ...: with a step of 1 the lanes add the same "
        "columns several times.", test=_softmax_matches(step_one={"sum_step": 1})),
    "sum_without_max": Mistake(
        "The sum and the numerator do not subtract the same max (one is exp(x), the other exp(x - m)): "
        "y = exp(x - m) / sum(exp(x - m)).",
        test=lambda case, got: _softmax_formula(
            case, got, lambda x, m: torch.exp(x - m) / torch.exp(x).sum(1, keepdim=True),
            lambda x, m: torch.exp(x) / torch.exp(x - m).sum(1, keepdim=True))),
    "no_normalize": Mistake(
        "y is not divided by the row's sum: softmax(x) = exp(x - m) / sum(exp(x - m)).",
        test=lambda case, got: _softmax_formula(
            case, got, lambda x, m: torch.exp(x - m),
            lambda x, m: torch.exp(x - m) * torch.exp(x - m).sum(1, keepdim=True))),
    "swapped": Mistake(
        "Rows and columns are swapped when reading x: x is rows x cols row-major, element (row, j) is "
        "x[row * cols + j].",
        test=lambda case, got: _close(got, torch.softmax(case.args[0].reshape(-1).reshape(
            case.args[0].shape[1], case.args[0].shape[0]).t(), 1))),
}

SOFTMAX_BODY = r"""
// Softmax of each row of x (rows x cols): one warp (32 threads) per row; a block of blockDim.x / 32 warps
// takes that many rows. Stable: exp(x - max) is at most 1 and never overflows.
const long long rows = x_dims[0], cols = x_dims[1];
const unsigned int lane = threadIdx.x % 32;      // my place in the warp
const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
if (row >= rows) return;        // the whole warp leaves together, so its shuffles below stay full-warp
const long long base = row * cols;

// 1. The row's max: lane l scans columns l, l + 32, ... (the warp reads 32 neighbouring floats at a time),
//    then a butterfly: after exchanging with the lanes 16, 8, 4, 2 and 1 away, every lane holds the max.
float m = -INFINITY;
for (long long j = lane; j < cols; j += 32) m = fmaxf(m, x[base + j]);
for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));

// 2. The sum of exp(x - max): a tree down to lane 0 (__shfl_down_sync), then lane 0's total to every lane.
float s = 0.0f;
for (long long j = lane; j < cols; j += 32) s += expf(x[base + j] - m);
for (int offset = 16; offset > 0; offset /= 2) s += __shfl_down_sync(0xffffffffu, s, offset);
s = __shfl_sync(0xffffffffu, s, 0);

// 3. Each lane writes its columns.
const float inv = 1.0f / s;
for (long long j = lane; j < cols; j += 32) y[base + j] = expf(x[base + j] - m) * inv;
"""


def softmax_launch(rows, cols):
    """4 warps (rows) a block: blocks = rows / 4, rounded up."""
    return (rows + 3) // 4, 128


CUDA_SOFTMAX = _exercise(
    "cuda_softmax", "A CUDA kernel: row softmax, one warp per row, max and sum by warp shuffles",
    "kernel_submission(body, launch)   body sees input x (rows, cols) and output y (rows, cols) (float32) and "
    "sets each row of y to the softmax of that row of x; launch(rows, cols) -> (grid, block) with whole warps "
    "(a block's thread count a multiple of 32)",
    _softmax_checks,
    Problem("softmax", ("x",), ("y",), _softmax_setup, rule=_whole_warps),
    SOFTMAX_MISTAKES,
    kernel_submission(SOFTMAX_BODY, softmax_launch),
)


# =========================================================================================================
# d. cuda_sgemm: C = A B with TILE x TILE tiles in shared memory
# =========================================================================================================

def _sgemm_case(label, m, n, k, seed, exact=None):
    """A (m, k) and B (k, n), float64 values that float32 (or ``exact``: float16, for triton_matmul) holds."""
    exact = exact or _f32
    a, b = exact(randn(m, k, seed=seed)), exact(randn(k, n, seed=seed + 1))
    return Case(f"{label}: M = {m}, N = {n}, K = {k}", (a, b), a @ b, ("C",))


def _sgemm_checks(hidden):
    c = _sgemm_case
    return [
        Check("M, N, K multiples of 16", [c("whole tiles", 16, 32, 16, 461)]),
        Check("ragged M, N, K (partial tiles on every edge)", [c("ragged", 20, 18, 23, 463), c("ragged", 33, 17, 40, 465)]
              + ([c("ragged", 17, 3, 70, 466)] if hidden else [])),
        Check("a 1 x 1 product", [c("one element", 1, 1, 1, 467)]),
        Check("wide and flat", [c("M < N", 5, 40, 7, 469)] + ([c("M > N", 40, 5, 17, 470)] if hidden else [])),
    ]


def _sgemm_setup(a, b):
    (m, k), n = a.shape, b.shape[1]
    return [a.float(), b.float()], [(m, n)], {"m": m, "n": n, "k": k}


def _sgemm_rule(launch, s):
    bx, by, bz = launch.block
    if bx != by or bz != 1:
        return "the block is one TILE x TILE tile of C: block = (TILE, TILE), the TILE of the body's shared tiles"
    if launch.grid[2] != 1:
        return "the grid is 2-D: (blocks along the columns of C, blocks along its rows)"
    return None


def _sgemm_k_range(case, got):
    """C summed over a contiguous part of k only (tiles skipped, the sum restarted per tile)."""
    a, b = case.args
    k = a.shape[1]
    return any(_close(got, a[:, k0:k1] @ b[k0:k1]) for k0 in range(k + 1) for k1 in range(k0, k + 1)
               if (k0, k1) != (0, k))


def _sgemm_assign(case, got):
    """acc = As * Bs: C holds one product A[i][k] B[k][j]."""
    a, b = case.args
    return any(_close(got, torch.outer(a[:, k], b[k])) for k in range(a.shape[1]))


SGEMM_MISTAKES = {
    "shared_bounds": _caught("shared_bounds",
        "An index outside a shared tile: the tiles are TILE x TILE, so the block must be (TILE, TILE) with the "
        "body's TILE, and the inner loop runs k = 0 .. TILE - 1 (k < TILE)."),
    "guard": _guard_mistake(
        "A read or write outside A, B or C: a tile that runs past the matrix loads 0 there (A[row][t + tx] only "
        "when row < M and t + tx < K; B[t + ty][col] only when t + ty < K and col < N), and only threads with "
        "row < M and col < N store."),
    "output_race": _caught("output_race",
        "Two threads wrote one element of C: row = blockIdx.y * TILE + threadIdx.y and col = blockIdx.x * TILE "
        "+ threadIdx.x give each thread of the grid its own element, and a thread outside C (row >= M or "
        "col >= N) must not store (its row * N + col is another thread's element)."),
    "shared_race": _caught("shared_race",
        "A thread read a tile while others could still be writing it, or overwrote it while others could still "
        "be reading it: __syncthreads() after loading the tiles, and again after using them, before the next "
        "loads."),
    "divergent_barrier": _caught("divergent_barrier",
        "A __syncthreads() not every thread reaches: threads outside C (row >= M or col >= N) must still load "
        "their element of each tile and reach every barrier; guard only the final store."),
    "uninitialized": _caught("uninitialized",
        "A thread read a tile element no thread wrote: each thread writes one element of each tile, 0 where the "
        "tile runs past the matrix (do not skip the write), and the block has exactly TILE x TILE threads."),
    "unwritten": _unwritten_mistake(
        "Some elements of C were never written (they still hold NaN) and every element written is right: the "
        "grid must cover C, grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE): x along the columns, y "
        "along the rows, both rounded up."),
    "launch_rule": _launch_rule_mistake(),
    "transposed": Mistake(
        "C is stored transposed: C is M x N row-major, so element (row, col) goes to C[row * N + col].",
        test=lambda case, got: _close(got, case.expected.t().reshape(case.expected.shape))),
    "assign": Mistake(
        "acc = As[ty][k] * Bs[k][tx] keeps only the last product: the inner loop accumulates, acc += ...",
        test=_sgemm_assign),
    "k_range": Mistake(
        "Only part of the K dimension was added: C[i][j] sums A[i][k] B[k][j] over every k. Loop over all "
        "(K + TILE - 1) / TILE tiles starting at 0 (t < K, t += TILE), and set acc = 0 once, before the loop.",
        test=_sgemm_k_range),
}

SGEMM_BODY = r"""
// C = A B for row-major A (M x K), B (K x N), C (M x N): one thread per element of C, one block per
// TILE x TILE tile of C. The block walks along K one tile at a time: it loads a tile of A and a tile of B
// into shared memory (each thread one element of each), then every thread reads TILE values of each from
// there, so each global value is read once per block instead of TILE times.
constexpr int TILE = 16;                       // = blockDim.x = blockDim.y: the launch must match
__shared__ float As[TILE][TILE];
__shared__ float Bs[TILE][TILE];
const long long M = A_dims[0], K = A_dims[1], N = B_dims[1];
const int tx = threadIdx.x, ty = threadIdx.y;
const long long row = (long long)blockIdx.y * TILE + ty;   // C's row from y ...
const long long col = (long long)blockIdx.x * TILE + tx;   // ... its column from x: a warp's threads read
                                                           // and write neighbouring addresses (coalesced)
float acc = 0.0f;
for (long long t = 0; t < K; t += TILE) {
  // Zero outside the matrices: a partial tile at an edge adds nothing. Every thread loads, even one
  // outside C, because its neighbours need the element and every thread must reach the barriers.
  As[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;
  Bs[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f;
  __syncthreads();                             // both tiles complete before anyone reads them
  for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
  __syncthreads();                             // everyone done with them before the next loads
}
if (row < M && col < N) C[row * N + col] = acc;
"""


def sgemm_launch(m, n, k):
    """A 16 x 16 block per tile of C: x along the N columns, y along the M rows, both rounded up."""
    return ((n + 15) // 16, (m + 15) // 16), (16, 16)


CUDA_SGEMM = _exercise(
    "cuda_sgemm", "A CUDA kernel: tiled SGEMM, C = A B with TILE x TILE tiles in shared memory",
    "kernel_submission(body, launch)   body sees inputs A (M, K), B (K, N) and output C (M, N) (float32, "
    "row-major) and sets C = A B; launch(m, n, k) -> (grid, block) with block = (TILE, TILE)",
    _sgemm_checks,
    Problem("sgemm", ("A", "B"), ("C",), _sgemm_setup, rule=_sgemm_rule),
    SGEMM_MISTAKES,
    kernel_submission(SGEMM_BODY, sgemm_launch),
)


# =========================================================================================================
# e-f. cuda_im2col, cuda_col2im (gather), cuda_col2im_atomic (scatter)
# =========================================================================================================
# The geometry: an image (C, H, W), a kh x kw window moved by stride (sh, sw) over the image padded by
# (ph, pw) zeros; oh x ow windows. cols is the (C*kh*kw) x (oh*ow) matrix, given to the kernel as a
# (C, kh, kw, oh, ow) tensor of the same memory, so that cols_dims holds every size; geom is an int64
# tensor (sh, sw, ph, pw).

_GEOMETRIES = {  # name: (C, H, W, kh, kw, sh, sw, ph, pw)
    "3 x 2 window, stride 1, padding 1": (2, 5, 6, 3, 2, 1, 1, 1, 1),
    "one pixel, a 1 x 1 window": (1, 1, 1, 1, 1, 1, 1, 0, 0),
    "3 x 2 window, stride (2, 1), padding (1, 0)": (3, 7, 5, 3, 2, 2, 1, 1, 0),
    "5 x 3 window, stride (3, 2), padding (2, 1)": (1, 6, 9, 5, 3, 3, 2, 2, 1),
    "3 x 3, stride 2, padding 1 (overlapping windows)": (3, 12, 10, 3, 3, 2, 2, 1, 1),
    "2 x 4 window, stride (1, 3), padding (0, 2)": (2, 4, 11, 2, 4, 1, 3, 0, 2),
}


def _out_size(size, window, stride, pad):
    return (size + 2 * pad - window) // stride + 1


def _conv_checks(make_case):
    def checks(hidden):
        g = list(_GEOMETRIES)
        return [
            Check("stride 1, padding 1, a 3 x 2 window", [make_case(g[0], 481)]),
            Check("one pixel, a 1 x 1 window", [make_case(g[1], 483)]),
            Check("rows and columns with their own window, stride and padding", [make_case(g[2], 485), make_case(g[3], 487)]
                  + ([make_case(g[5], 488)] if hidden else [])),
            Check("stride 2, overlapping windows", [make_case(g[4], 489)]),
        ]
    return checks


def _geom(sh, sw, ph, pw):
    return torch.tensor([sh, sw, ph, pw], dtype=torch.int64)


_ORDER = ("c", "i", "j", "oy", "ox")


def _taps(shape, sh, sw, ph, pw, *, order=_ORDER, swap_ij=False, img_hw=None):
    """For each element k of cols (C, kh, kw, oh, ow): the flat index of the image pixel its tap reads and
    whether that pixel is inside the image, as a kernel computes them that decodes k in ``order`` (slowest
    first), uses tap j for rows and i for columns (``swap_ij``) or takes the image as ``img_hw``."""
    (C, H, W), (kh, kw, oh, ow) = shape[0], shape[1]
    radix = {"c": C, "i": kh, "j": kw, "oy": oh, "ox": ow}
    rest, digit = torch.arange(C * kh * kw * oh * ow), {}
    for name in reversed(order):
        digit[name], rest = rest % radix[name], rest // radix[name]
    i, j = (digit["j"], digit["i"]) if swap_ij else (digit["i"], digit["j"])
    rows, cols_ = img_hw or (H, W)
    iy, ix = digit["oy"] * sh - ph + i, digit["ox"] * sw - pw + j
    inside = (iy >= 0) & (iy < rows) & (ix >= 0) & (ix < cols_)
    return (digit["c"] * rows + iy) * cols_ + ix, inside


def _im2col_formula(img, kh, kw, oh, ow, sh, sw, ph, pw, **knobs):
    C, H, W = img.shape
    src, inside = _taps(((C, H, W), (kh, kw, oh, ow)), sh, sw, ph, pw, **knobs)
    values = torch.where(inside, img.reshape(-1)[src.clamp(0, img.numel() - 1)], torch.zeros(()))
    return values.reshape(C * kh * kw, oh * ow)


def _scatter_formula(cols, H, W, sh, sw, ph, pw, first=None, **knobs):
    """col2im as the scatter computes it (of cols' first ``first`` elements only, when given)."""
    C, kh, kw, oh, ow = cols.shape
    src, inside = _taps(((C, H, W), (kh, kw, oh, ow)), sh, sw, ph, pw, **knobs)
    if first is not None:
        inside = inside & (torch.arange(cols.numel()) < first)
    out = torch.zeros(C * H * W, dtype=torch.float64)
    return out.index_add_(0, src[inside], cols.reshape(-1)[inside]).reshape(C, H, W)


def _geometry_knobs(kind, sh, sw, ph, pw, H, W):
    """The parameter sets of the wrong windows: stride ignored, window start wrong, rows and columns swapped,
    cols decoded in another order."""
    if kind == "stride":
        return [dict(sh=1), dict(sw=1), dict(sh=1, sw=1)]
    if kind == "window_start":
        rows, cols_ = {ph, -ph, ph * sh, 0}, {pw, -pw, pw * sw, 0}
        return [dict(ph=r, pw=c) for r in rows for c in cols_ if (r, c) != (ph, pw)]
    if kind == "swap_hw":
        return [dict(sh=sw, sw=sh), dict(ph=pw, pw=ph), dict(img_hw=(W, H)), dict(swap_ij=True)]
    if kind == "order":
        return [dict(order=o) for o in itertools.permutations(_ORDER) if o != _ORDER]
    raise AssertionError(kind)


def _im2col_case(name, seed):
    C, H, W, kh, kw, sh, sw, ph, pw = _GEOMETRIES[name]
    img = _f32(randn(C, H, W, seed=seed))
    cols = F.unfold(img[None], (kh, kw), padding=(ph, pw), stride=(sh, sw))[0]
    return Case(f"{name}: image {(C, H, W)}", (img, kh, kw, sh, sw, ph, pw), cols, ("cols",))


def _im2col_setup(img, kh, kw, sh, sw, ph, pw):
    C, H, W = img.shape
    oh, ow = _out_size(H, kh, sh, ph), _out_size(W, kw, sw, pw)
    sizes = {"c": C, "h": H, "w": W, "kh": kh, "kw": kw, "oh": oh, "ow": ow}
    return [img.float(), _geom(sh, sw, ph, pw)], [(C, kh, kw, oh, ow)], sizes


def _im2col_is(kind):
    def test(case, got):
        img, kh, kw, sh, sw, ph, pw = case.args
        C, H, W = img.shape
        oh, ow = _out_size(H, kh, sh, ph), _out_size(W, kw, sw, pw)
        base = dict(sh=sh, sw=sw, ph=ph, pw=pw)
        return any(_close(got, _im2col_formula(img, kh, kw, oh, ow, **(base | knobs)))
                   for knobs in _geometry_knobs(kind, sh, sw, ph, pw, H, W))
    return test


def _scatter_is(kind):
    def test(case, got):
        cols, H, W, sh, sw, ph, pw = case.args
        base = dict(sh=sh, sw=sw, ph=ph, pw=pw)
        return any(_close(got, _scatter_formula(cols, H, W, **(base | knobs)))
                   for knobs in _geometry_knobs(kind, sh, sw, ph, pw, H, W))
    return test


def _padding_unwritten(case, got):
    """NaN exactly at the padding taps, every other element right: the zeros were never written."""
    img, kh, kw, sh, sw, ph, pw = case.args
    C, H, W = img.shape
    _, inside = _taps(((C, H, W), (kh, kw, _out_size(H, kh, sh, ph), _out_size(W, kw, sw, pw))), sh, sw, ph, pw)
    got = torch.as_tensor(got, dtype=torch.float64).reshape(-1)
    return bool((~inside).any()) and torch.equal(torch.isnan(got), ~inside) and \
        _close(got[inside], case.expected.reshape(-1)[inside])


# ---- the mistakes the three kernels share ----

def _window_mistakes(test_of):
    return {
        "stride": Mistake(
            "The stride is missing: window (oy, ox) starts at row oy * stride_h - pad_h and column "
            "ox * stride_w - pad_w, so tap (i, j) covers pixel (oy * stride_h - pad_h + i, "
            "ox * stride_w - pad_w + j).", test=test_of("stride")),
        "window_start": Mistake(
            "The window starts in the wrong place: the padding shifts it up and left, so tap (i, j) of window "
            "(oy, ox) covers pixel (oy * stride_h - pad_h + i, ox * stride_w - pad_w + j), the padding "
            "subtracted once, after the stride.", test=test_of("window_start")),
        "swap_hw": Mistake(
            "A row quantity is used for a column (or the reverse): rows use i, stride_h, pad_h and the bound H; "
            "columns use j, stride_w, pad_w and the bound W; the image is read at (c * H + iy) * W + ix.",
            test=test_of("swap_hw")),
    }


COLUMN_ORDER = ("cols is ordered channel, tap row, tap column, output row, output column (slowest first): "
                "element k = (((c * kh + i) * kw + j) * oh + oy) * ow + ox, so ox = k % ow, oy = (k / ow) % oh, "
                "j = (k / (ow * oh)) % kw, i = (k / (ow * oh * kw)) % kh, c = k / (ow * oh * kw * kh).")
PADDING = ("A tap in the zero padding read the image at a negative index: a tap outside the image is 0, so read "
           "img only when 0 <= iy < H and 0 <= ix < W.")

# The opening of the two kernels that give each element of cols a thread (im2col, and col2im by
# scattering): thread k reads the sizes and decodes k into its channel, tap and window, in the order
# COLUMN_ORDER states. One text for both, so that the decode cannot differ between them.
_COLS_THREAD = r"""const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
if (k >= cols_numel) return;
const long long H = img_dims[1], W = img_dims[2];
const long long kh = cols_dims[1], kw = cols_dims[2], oh = cols_dims[3], ow = cols_dims[4];
const long long sh = geom[0], sw = geom[1], ph = geom[2], pw = geom[3];
// k = (((c * kh + i) * kw + j) * oh + oy) * ow + ox: channel c, tap (i, j), window (oy, ox)
const long long ox = k % ow, oy = (k / ow) % oh;
const long long j = (k / (ow * oh)) % kw, i = (k / (ow * oh * kw)) % kh, c = k / (ow * oh * kw * kh);
"""

IM2COL_MISTAKES = {
    "padding": _caught("padding", PADDING),
    "guard": _guard_mistake(
        "A thread read or wrote past the end of a tensor: the grid has more threads than cols has elements, so "
        "each thread checks its index first (if (k >= cols_numel) return;)."),
    "index": _caught("output_race",
        "Two threads wrote one element of cols: thread k = blockIdx.x * blockDim.x + threadIdx.x writes "
        "cols[k], one element each."),
    "padding_unwritten": Mistake(
        "The padding taps were never written (they still hold NaN): cols holds a 0 for every tap outside the "
        "image, so write 0 there.", test=_padding_unwritten),
    "unwritten": _unwritten_mistake(),
    "launch_rule": _launch_rule_mistake(),
    **_window_mistakes(_im2col_is),
    "order": Mistake(COLUMN_ORDER, test=_im2col_is("order")),
}


IM2COL_BODY = r"""
// im2col: one thread per element of cols, the (C*kh*kw) x (oh*ow) matrix whose column (oy, ox) holds the
// window of output pixel (oy, ox). Thread k writes cols[k]: neighbouring threads write neighbouring
// addresses (coalesced).
""" + _COLS_THREAD + r"""// the pixel that tap (i, j) of window (oy, ox) covers; outside the image it is the zero padding
const long long iy = oy * sh - ph + i, ix = ox * sw - pw + j;
const bool inside = 0 <= iy && iy < H && 0 <= ix && ix < W;
cols[k] = inside ? img[(c * H + iy) * W + ix] : 0.0f;
"""


def im2col_launch(c, h, w, kh, kw, oh, ow):
    """One thread per element of cols, 256 a block, rounded up."""
    n = c * kh * kw * oh * ow
    return (n + 255) // 256, 256


CUDA_IM2COL = _exercise(
    "cuda_im2col", "A CUDA kernel: im2col, one thread per element of the columns matrix",
    "kernel_submission(body, launch)   body sees inputs img (C, H, W) (float32) and geom (int64: stride_h, "
    "stride_w, pad_h, pad_w) and output cols (C, kh, kw, oh, ow) (float32: the (C*kh*kw) x (oh*ow) columns "
    "matrix) and sets every column to its window; launch(c, h, w, kh, kw, oh, ow) -> (grid, block)",
    _conv_checks(_im2col_case),
    Problem("im2col", ("img", "geom"), ("cols",), _im2col_setup,
            result=lambda cols: cols.reshape(cols.shape[0] * cols.shape[1] * cols.shape[2], -1)),
    IM2COL_MISTAKES,
    kernel_submission(IM2COL_BODY, im2col_launch),
)


# ---- col2im by gathering ----

def _col2im_case(name, seed):
    C, H, W, kh, kw, sh, sw, ph, pw = _GEOMETRIES[name]
    oh, ow = _out_size(H, kh, sh, ph), _out_size(W, kw, sw, pw)
    cols = _f32(randn(C, kh, kw, oh, ow, seed=seed))
    img = F.fold(cols.reshape(1, C * kh * kw, oh * ow), (H, W), (kh, kw), padding=(ph, pw), stride=(sh, sw))[0]
    return Case(f"{name}: image {(C, H, W)}", (cols, H, W, sh, sw, ph, pw), img, ("img",))


def _col2im_setup(cols, H, W, sh, sw, ph, pw):
    C, kh, kw, oh, ow = cols.shape
    sizes = {"c": C, "h": H, "w": W, "kh": kh, "kw": kw, "oh": oh, "ow": ow}
    return [cols.float(), _geom(sh, sw, ph, pw)], [(C, H, W)], sizes


def _gather_formula(cols, H, W, sh, sw, ph, pw, *, exact=(True, True), check_negative=(True, True), assign=False,
                    reset_per_row=False, tap_sign=(-1, -1), order=_ORDER, img_hw=None, wrap_rows=True):
    """col2im as a one-thread-per-pixel gather computes it: pixel (py, px) adds cols[c, i, j, oy, ox] for
    every tap with oy = (py + ph - i) / sh (and the same for columns), in the order i, then j. The knobs:
    ``exact`` (the divisibility tests, rows and columns), ``check_negative`` (the tests ty >= 0 and tx >= 0;
    C's / and % round toward 0),
    ``assign`` (sum = v), ``reset_per_row`` (sum = 0 inside the i loop), ``tap_sign`` (ty = py + ph + i),
    ``order`` (cols indexed in another order), ``img_hw`` and ``wrap_rows`` (the pixel's decode).
    None where that kernel would index outside cols."""
    C, kh, kw, oh, ow = cols.shape
    rows, cols_ = img_hw or (H, W)
    p = torch.arange(C * H * W)
    c, py, px = p // (rows * cols_), (p // cols_) % rows if wrap_rows else p // cols_, p % cols_
    radix = {"c": C, "i": kh, "j": kw, "oy": oh, "ox": ow}
    flat_cols, out = cols.reshape(-1), torch.zeros(C * H * W, dtype=torch.float64)

    def axis(pixel, pad, tap, sign, stride, size, exact, check_negative):
        t = pixel + pad + sign * tap
        o = torch.div(t, stride, rounding_mode="trunc")
        ok = o < size
        if exact:
            ok &= torch.fmod(t, stride) == 0
        if check_negative:
            ok &= t >= 0
        return o, ok

    for i in range(kh):
        if reset_per_row:
            out = torch.zeros_like(out)
        oy, ok_y = axis(py, ph, i, tap_sign[0], sh, oh, exact[0], check_negative[0])
        for j in range(kw):
            ox, ok_x = axis(px, pw, j, tap_sign[1], sw, ow, exact[1], check_negative[1])
            ok = ok_y & ok_x
            digit, index = {"c": c, "i": torch.full_like(p, i), "j": torch.full_like(p, j), "oy": oy, "ox": ox}, 0
            for name in order:
                index = index * radix[name] + digit[name]
            if bool((ok & ((index < 0) | (index >= cols.numel()))).any()):
                return None
            value = torch.where(ok, flat_cols[index.clamp(0, cols.numel() - 1)], torch.zeros(()))
            out = torch.where(ok, value, out) if assign else out + value
    return out.reshape(C, H, W)


def _gather_is(kind):
    def test(case, got):
        cols, H, W, sh, sw, ph, pw = case.args
        base = dict(sh=sh, sw=sw, ph=ph, pw=pw)
        if kind == "window_start":
            knobs = [dict(tap_sign=t, ph=r, pw=c) for t in itertools.product((-1, 1), repeat=2)
                     for r in (ph, -ph, 0) for c in (pw, -pw, 0) if (t, r, c) != ((-1, -1), ph, pw)]
        elif kind == "swap_hw":
            knobs = [dict(sh=sw, sw=sh), dict(ph=pw, pw=ph), dict(img_hw=(W, H))]
        elif kind == "order":
            knobs = [dict(order=o) for o in itertools.permutations(_ORDER) if o != _ORDER]
        else:
            knobs = _geometry_knobs(kind, sh, sw, ph, pw, H, W)
        return any(_close(got, _gather_formula(cols, H, W, **(base | k))) for k in knobs)
    return test


def _gather_knob(**knobs):
    def test(case, got):
        cols, H, W, sh, sw, ph, pw = case.args
        return _close(got, _gather_formula(cols, H, W, sh, sw, ph, pw, **knobs))
    return test


COL2IM_MISTAKES = {
    "guard": _guard_mistake(
        "A thread read or wrote past the end of a tensor: the grid has more threads than img has pixels, so "
        "each thread checks its index first (if (p >= img_numel) return;)."),
    "index": _caught("output_race",
        "Two threads wrote one pixel of img: thread p = blockIdx.x * blockDim.x + threadIdx.x owns pixel p and "
        "is the only one that writes it."),
    "unwritten": _unwritten_mistake(),
    "launch_rule": _launch_rule_mistake(),
    "assign": Mistake(
        "The pixel keeps one column entry instead of their sum: set sum = 0 once, before the loops over the "
        "taps, and add every covering entry (sum += ...); col2im adds the overlaps.",
        test=lambda case, got: _gather_knob(assign=True)(case, got) or _gather_knob(reset_per_row=True)(case, got)),
    "divisibility": Mistake(
        "A tap counted for a pixel it does not cover: with a stride, tap i covers row py only when "
        "py + pad_h - i is a multiple of stride_h; test (py + pad_h - i) % stride_h == 0 before dividing.",
        test=lambda case, got: any(_gather_knob(exact=e)(case, got) for e in ((False, True), (True, False),
                                                                              (False, False)))),
    "negative": Mistake(
        "A tap above or left of the first window was counted: C's / and % round toward zero (-1 / 2 == 0, "
        "-1 % 1 == 0), so test py + pad_h - i >= 0 (and px + pad_w - j >= 0) first.",
        test=lambda case, got: any(_gather_knob(check_negative=n)(case, got)
                                   for n in ((False, True), (True, False), (False, False)))),
    "pixel_decode": Mistake(
        "Pixel p of img is (c, py, px) with p = (c * H + py) * W + px: c = p / (H * W), py = (p / W) % H, "
        "px = p % W.", test=_gather_knob(wrap_rows=False)),
    **_window_mistakes(_gather_is),
    "order": Mistake(COLUMN_ORDER, test=_gather_is("order")),
}

COL2IM_BODY = r"""
// col2im by gathering: one thread per image pixel adds every column entry whose tap covers the pixel.
// One thread makes each pixel's sum, in one fixed order, so every run gives the same bits; neighbouring
// threads write neighbouring pixels (coalesced).
const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
if (p >= img_numel) return;
const long long H = img_dims[1], W = img_dims[2];
const long long kh = cols_dims[1], kw = cols_dims[2], oh = cols_dims[3], ow = cols_dims[4];
const long long sh = geom[0], sw = geom[1], ph = geom[2], pw = geom[3];
const long long c = p / (H * W), py = (p / W) % H, px = p % W;
// Tap i of window row oy covers image row oy * sh - ph + i. So it covers py when oy = (py + ph - i) / sh
// divides exactly and 0 <= oy < oh; the same for columns.
float sum = 0.0f;
for (long long i = 0; i < kh; ++i) {
  const long long ty = py + ph - i;
  if (ty < 0 || ty % sh != 0 || ty / sh >= oh) continue;
  const long long oy = ty / sh;
  for (long long j = 0; j < kw; ++j) {
    const long long tx = px + pw - j;
    if (tx < 0 || tx % sw != 0 || tx / sw >= ow) continue;
    const long long ox = tx / sw;
    sum += cols[(((c * kh + i) * kw + j) * oh + oy) * ow + ox];
  }
}
img[p] = sum;
"""


def col2im_launch(c, h, w, kh, kw, oh, ow):
    """One thread per image pixel, 256 a block, rounded up."""
    return (c * h * w + 255) // 256, 256


CUDA_COL2IM = _exercise(
    "cuda_col2im", "A CUDA kernel: col2im by gathering, one thread per image pixel (deterministic)",
    "kernel_submission(body, launch)   body sees inputs cols (C, kh, kw, oh, ow) (float32: the columns "
    "matrix) and geom (int64: stride_h, stride_w, pad_h, pad_w) and output img (C, H, W) (float32) and sets "
    "each pixel to the sum of the column entries whose taps cover it; launch(c, h, w, kh, kw, oh, ow) -> "
    "(grid, block)",
    _conv_checks(_col2im_case),
    Problem("col2im", ("cols", "geom"), ("img",), _col2im_setup),
    COL2IM_MISTAKES,
    kernel_submission(COL2IM_BODY, col2im_launch),
)


# ---- col2im by scattering with atomicAdd ----

def _scatter_prefix(case, got):
    """img holds the scatter of cols' first L elements only, L < n: the grid or the guard stopped short."""
    cols, H, W, sh, sw, ph, pw = case.args
    return any(_close(got, _scatter_formula(cols, H, W, sh, sw, ph, pw, first=f)) for f in range(cols.numel()))


COL2IM_ATOMIC_MISTAKES = {
    "padding": _caught("padding", PADDING),
    "guard": _guard_mistake(
        "A thread read past the end of cols: the grid has more threads than cols has elements, so each thread "
        "checks its index first (if (k >= cols_numel) return;)."),
    "plain_add": _caught("output_race",
        "Two threads updated one pixel of img with a plain += (or =): overlapping windows add into the same "
        "pixel, and a plain read-add-write loses one of two updates that meet. Use atomicAdd(&img[...], v)."),
    "unwritten": _caught("unwritten",
        "The last column entries were never added: the grid must cover all of cols, blocks = "
        "(n + threads - 1) // threads, rounded up.", test=_scatter_prefix),
    "launch_rule": _launch_rule_mistake(),
    **_window_mistakes(_scatter_is),
    "order": Mistake(COLUMN_ORDER, test=_scatter_is("order")),
}

COL2IM_ATOMIC_BODY = r"""
// col2im by scattering: one thread per column entry adds it into the pixel its tap covers. Several taps of
// overlapping windows cover one pixel, so the add is atomic. img arrives filled with zeros.
// The order in which a pixel's additions land depends on the GPU's scheduling, and float addition is not
// associative: two runs can differ in the last bits (the gather in cuda_col2im does not).
""" + _COLS_THREAD + r"""const long long iy = oy * sh - ph + i, ix = ox * sw - pw + j;
if (0 <= iy && iy < H && 0 <= ix && ix < W)     // a tap in the padding adds nothing
  atomicAdd(&img[(c * H + iy) * W + ix], cols[k]);
"""


def col2im_atomic_launch(c, h, w, kh, kw, oh, ow):
    """One thread per element of cols, 256 a block, rounded up."""
    return (c * kh * kw * oh * ow + 255) // 256, 256


CUDA_COL2IM_ATOMIC = _exercise(
    "cuda_col2im_atomic", "A CUDA kernel: col2im by scattering with atomicAdd, one thread per column entry",
    "kernel_submission(body, launch)   body sees inputs cols (C, kh, kw, oh, ow) (float32) and geom (int64: "
    "stride_h, stride_w, pad_h, pad_w) and output img (C, H, W) (float32, filled with zeros) and adds every "
    "column entry into the pixel its tap covers; launch(c, h, w, kh, kw, oh, ow) -> (grid, block). The "
    "result is right to within rounding but not bitwise the same from run to run on a GPU: the atomic adds "
    "land in the order the threads happen to run (cuda_col2im's gather is deterministic)",
    _conv_checks(_col2im_case),
    Problem("col2im_atomic", ("cols", "geom"), ("img",), _col2im_setup, fill=0.0),
    COL2IM_ATOMIC_MISTAKES,
    kernel_submission(COL2IM_ATOMIC_BODY, col2im_atomic_launch),
)


# =========================================================================================================
# g. cuda_depthwise_weight_grad: one block per weight, warp shuffles then shared memory
# =========================================================================================================
# Depthwise convolution (groups = C, one filter per channel) of x (N, C, H, W) with w (C, 1, kh, kw) gives
# y (N, C, oh, ow); its weight gradient sums, over every image and output position, gy times the input
# pixel the tap covered: gw[c][0][i][j] = sum over n, oy, ox of gy[n][c][oy][ox] * x[n][c][iy][ix],
# iy = oy * sh - ph + i, ix = ox * sw - pw + j (0 outside the image).

_DEPTHWISE = {  # name: (N, C, H, W, kh, kw, sh, sw, ph, pw)
    "3 x 3, stride 1, padding 1": (2, 3, 6, 5, 3, 3, 1, 1, 1, 1),
    "one pixel, a 1 x 1 filter": (1, 1, 1, 1, 1, 1, 1, 1, 0, 0),
    "3 x 2 filter, stride (2, 1), padding (1, 0)": (3, 2, 9, 7, 3, 2, 2, 1, 1, 0),
    "more positions than threads": (4, 2, 12, 11, 3, 3, 1, 1, 1, 1),
    "5 x 5, stride 2, padding 2": (2, 4, 8, 8, 5, 5, 2, 2, 2, 2),
}


def _depthwise_case(name, seed):
    N, C, H, W, kh, kw, sh, sw, ph, pw = _DEPTHWISE[name]
    oh, ow = _out_size(H, kh, sh, ph), _out_size(W, kw, sw, pw)
    x, gy = _f32(randn(N, C, H, W, seed=seed)), _f32(randn(N, C, oh, ow, seed=seed + 1))
    gw = torch.nn.grad.conv2d_weight(x, (C, 1, kh, kw), gy, stride=(sh, sw), padding=(ph, pw), groups=C)
    return Case(f"{name}: x {(N, C, H, W)}", (x, gy, kh, kw, sh, sw, ph, pw), gw, ("gw",))


def _depthwise_checks(hidden):
    c, g = _depthwise_case, list(_DEPTHWISE)
    return [
        Check("3 x 3, stride 1, padding 1", [c(g[0], 501)]),
        Check("one pixel, a 1 x 1 filter", [c(g[1], 503)]),
        Check("non-square filter, stride and padding per axis", [c(g[2], 505)] + ([c(g[4], 506)] if hidden else [])),
        Check("more positions than threads (each thread loops)", [c(g[3], 507)]),
    ]


def _depthwise_setup(x, gy, kh, kw, sh, sw, ph, pw):
    N, C, H, W = x.shape
    oh, ow = gy.shape[2:]
    sizes = {"n": N, "c": C, "h": H, "w": W, "kh": kh, "kw": kw, "oh": oh, "ow": ow}
    return [x.float(), gy.float(), _geom(sh, sw, ph, pw)], [(C, 1, kh, kw)], sizes


def _depthwise_rule(launch, s):
    weights = s["c"] * s["kh"] * s["kw"]
    if launch.grid != (weights, 1, 1):
        return f"one block per weight: grid must be c * kh * kw = {weights} blocks (1-D)"
    if launch.block[1:] != (1, 1):
        return "the block must be 1-D, (threads,): the reduction indexes threads by threadIdx.x"
    return _whole_warps(launch, s)


def _depthwise_products(x, gy, kh, kw, sh, sw, ph, pw, inside_only=False):
    """(C * kh * kw, N * oh * ow): the products gy * x that weight (c, i, j) adds, position p =
    (n * oh + oy) * ow + ox (or, with ``inside_only``, whether the tap is inside the image)."""
    N, C, H, W = x.shape
    oh, ow = gy.shape[2:]
    oy, ox = torch.arange(oh), torch.arange(ow)
    rows = []
    for i in range(kh):
        for j in range(kw):
            iy, ix = oy * sh - ph + i, ox * sw - pw + j
            inside = ((iy >= 0) & (iy < H))[:, None] & ((ix >= 0) & (ix < W))[None, :]
            taps = x[:, :, iy.clamp(0, H - 1)][:, :, :, ix.clamp(0, W - 1)] * inside
            rows.append((inside.expand_as(gy) if inside_only else taps * gy).transpose(0, 1).reshape(C, -1))
    return torch.stack(rows, 1).reshape(C * kh * kw, -1)


def _depthwise_formula(x, gy, kh, kw, sh, sw, ph, pw):
    C = x.shape[1]
    return _depthwise_products(x, gy, kh, kw, sh, sw, ph, pw).sum(1).reshape(C, 1, kh, kw)


def _depthwise_knobs(kind):
    def test(case, got):
        x, gy, kh, kw, sh, sw, ph, pw = case.args
        base = dict(sh=sh, sw=sw, ph=ph, pw=pw)
        return any(_close(got, _depthwise_formula(x, gy, kh, kw, **(base | k)))
                   for k in _geometry_knobs(kind, sh, sw, ph, pw, *x.shape[2:]))
    return test


def _depthwise_block(total):
    """A test: got == total(products, inside, threads) for some block of whole warps; products and inside
    are (weights, positions)."""
    def test(case, got):
        x, gy, kh, kw, sh, sw, ph, pw = case.args
        products = _depthwise_products(x, gy, kh, kw, sh, sw, ph, pw)
        inside = _depthwise_products(x, gy, kh, kw, sh, sw, ph, pw, inside_only=True)
        got = torch.as_tensor(got, dtype=torch.float64).reshape(-1)
        return any(_close(got, total(products, inside, threads)) for threads in range(32, MAX_THREADS + 1, 32))
    return test


def _two_level(partials, first=_FULL_WARP, second=_FULL_WARP, op=torch.add):
    """What thread 0 holds after each warp's shuffle-down tree (offsets ``first``, each step
    ``v = op(v, shuffled)``) and warp 0's tree over the warps' sums (``second``)."""
    weights, threads = partials.shape
    warp_sums = _shuffle_reduce(partials.reshape(weights, threads // 32, 32), first, op=op)[..., 0]
    return _shuffle_reduce(F.pad(warp_sums, (0, 32 - threads // 32)), second, op=op)[..., 0]


def _take_other(mine, other):
    return other


def _depthwise_order(case, got):
    """Block b computed weight (c, i, j) decoded from b in another order."""
    C, _, kh, kw = case.expected.shape
    expected, got = case.expected.reshape(-1), torch.as_tensor(got, dtype=torch.float64).reshape(-1)
    radix = {"c": C, "i": kh, "j": kw}
    for order in itertools.permutations("cij"):
        if order == ("c", "i", "j"):
            continue
        rest, digit = torch.arange(C * kh * kw), {}
        for name in reversed(order):
            digit[name], rest = rest % radix[name], rest // radix[name]
        if _close(got, expected[(digit["c"] * kh + digit["i"]) * kw + digit["j"]]):
            return True
    return False


DEPTHWISE_MISTAKES = {
    "padding": _caught("padding", PADDING),
    "guard": _guard_mistake(
        "A read past the end of x or gy: read x only when 0 <= iy < H and 0 <= ix < W, and stop the loop over "
        "output positions at p < N * oh * ow."),
    "output_race": _caught("output_race",
        "Several threads wrote the block's weight: after the reduction one thread (threadIdx.x == 0) writes "
        "gw[blockIdx.x]."),
    "shared_race": _caught("shared_race",
        "A data race on warp_sums: lane 0 of each warp (and no other lane) writes its warp's sum to "
        "warp_sums[warp], then __syncthreads(), and only then does warp 0 read them."),
    "divergent_barrier": _caught("divergent_barrier",
        "A __syncthreads() not every thread reaches (inside if (lane == 0) or if (warp == 0)): every thread "
        "of the block must reach it, so put it between the two ifs."),
    "uninitialized": _caught("uninitialized",
        "Warp 0 read a warp_sums slot that no warp wrote: the block has blockDim.x / 32 warps, so lanes past "
        "the last warp take 0 (lane < warps ? warp_sums[lane] : 0.0f)."),
    "launch_rule": _launch_rule_mistake(),
    "second_level": Mistake(
        "Only the first warp's sum reached the result: after each warp's tree, lane 0 of every warp stores "
        "its sum in shared memory, and warp 0 adds those.",
        test=_depthwise_block(lambda p, v, t: _strided_partials(p, t)[:, :32].sum(1))),
    "shuffle_offsets": Mistake(
        "A shuffle loop does not cover the warp: __shfl_down_sync with offsets 16, 8, 4, 2, 1 brings all 32 "
        "lanes' values to lane 0, in the warps' tree and in warp 0's tree over the warps' sums.",
        test=lambda case, got: any(
            _depthwise_block(lambda p, v, t, a=a, b=b: _two_level(_strided_partials(p, t), a, b))(case, got)
            for a, b in [(s, _FULL_WARP) for s in _SHORT_WARPS] + [(_FULL_WARP, s) for s in _SHORT_WARPS])),
    "assign": Mistake(
        "An = where += belongs: the thread's running sum over its positions adds (sum += ...), as does each "
        "shuffle step (sum += __shfl_down_sync(...)).",
        test=lambda case, got: _depthwise_block(
            lambda p, v, t: _strided_partials(p, t, assign=True, valid=v).sum(1))(case, got)
        or _depthwise_block(lambda p, v, t: _two_level(_strided_partials(p, t), op=_take_other))(case, got)),
    "no_batch": Mistake(
        "Only the first image was added: the weight gradient sums over all N images and all output "
        "positions, N * oh * ow terms.",
        test=lambda case, got: _close(got, _depthwise_formula(case.args[0][:1], case.args[1][:1], *case.args[2:]))),
    "flip": Mistake(
        "The filter is flipped: deep-learning convolution is a cross-correlation, tap (i, j) covers pixel "
        "(oy * stride_h - pad_h + i, ox * stride_w - pad_w + j), not kh - 1 - i.",
        test=lambda case, got: any(_close(got, case.expected.flip(d)) for d in ((2,), (3,), (2, 3)))),
    **{k: v for k, v in _window_mistakes(_depthwise_knobs).items() if k != "swap_hw"},
    "order": Mistake(
        "Block b computes weight (c, i, j) with b = (c * kh + i) * kw + j: c = b / (kh * kw), "
        "i = (b / kw) % kh, j = b % kw.", test=_depthwise_order),
}

DEPTHWISE_BODY = r"""
// The depthwise weight gradient: one block per weight gw[c][0][i][j] (b = (c * kh + i) * kw + j). Its threads
// add gy[n][c][oy][ox] * x[n][c][iy][ix] over the N * oh * ow output positions: each thread a strided slice,
// then each warp with shuffles, then warp 0 over the warps' sums.
__shared__ float warp_sums[32];                // one slot per warp: at most 1024 / 32 warps
const long long N = x_dims[0], C = x_dims[1], H = x_dims[2], W = x_dims[3];
const long long oh = gy_dims[2], ow = gy_dims[3], kh = gw_dims[2], kw = gw_dims[3];
const long long sh = geom[0], sw = geom[1], ph = geom[2], pw = geom[3];
const long long c = blockIdx.x / (kh * kw), i = (blockIdx.x / kw) % kh, j = blockIdx.x % kw;
const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;

// 1. Position p = (n * oh + oy) * ow + ox, p = threadIdx.x, threadIdx.x + blockDim.x, ...: neighbouring
//    threads read neighbouring elements of gy (coalesced).
float sum = 0.0f;
for (long long p = threadIdx.x; p < N * oh * ow; p += blockDim.x) {
  const long long n = p / (oh * ow), oy = (p / ow) % oh, ox = p % ow;
  const long long iy = oy * sh - ph + i, ix = ox * sw - pw + j;   // the pixel tap (i, j) covered
  if (0 <= iy && iy < H && 0 <= ix && ix < W)                     // 0 in the padding
    sum += gy[((n * C + c) * oh + oy) * ow + ox] * x[((n * C + c) * H + iy) * W + ix];
}

// 2. Each warp's 32 partial sums -> its lane 0, with no shared memory and no barrier.
for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
if (lane == 0) warp_sums[warp] = sum;
__syncthreads();                               // every warp's sum is stored before warp 0 reads them

// 3. Warp 0 adds the warps' sums (lanes past the last warp add 0); thread 0 writes the weight.
if (warp == 0) {
  sum = lane < warps ? warp_sums[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) gw[blockIdx.x] = sum;
}
"""


def depthwise_launch(n, c, h, w, kh, kw, oh, ow):
    """One block per weight, 4 warps a block."""
    return c * kh * kw, 128


CUDA_DEPTHWISE_WEIGHT_GRAD = _exercise(
    "cuda_depthwise_weight_grad", "A CUDA kernel: the depthwise convolution's weight gradient as block reductions",
    "kernel_submission(body, launch)   body sees inputs x (N, C, H, W), gy (N, C, oh, ow) (float32) and geom "
    "(int64: stride_h, stride_w, pad_h, pad_w) and output gw (C, 1, kh, kw) (float32) and sets each weight's "
    "gradient, the sum over n, oy, ox of gy[n][c][oy][ox] * x[n][c][oy * stride_h - pad_h + i][ox * stride_w "
    "- pad_w + j]; launch(n, c, h, w, kh, kw, oh, ow) -> (grid, block) with one block per weight "
    "(grid = c * kh * kw) and whole warps",
    _depthwise_checks,
    Problem("depthwise_weight_grad", ("x", "gy", "geom"), ("gw",), _depthwise_setup, rule=_depthwise_rule),
    DEPTHWISE_MISTAKES,
    kernel_submission(DEPTHWISE_BODY, depthwise_launch),
)


# ---- fast references: the same exercises, written for speed (timed by tools/gpu_exercises.py) ----
# Each passes its exercise's checks (tests/test_cuda_exercises.py). What makes it faster than the readable
# reference is said at its top.

FAST_GELU_BODY = r"""
// Four elements per thread, blockDim.x apart (each load still coalesced): all eight loads are issued before
// the first result is needed, so each thread keeps four times the memory requests in flight.
const float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
const long long first = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
float v[4], g[4];
for (int u = 0; u < 4; ++u) {
  const long long i = first + (long long)u * blockDim.x;
  v[u] = i < x_numel ? x[i] : 0.0f;
  g[u] = i < x_numel ? gy[i] : 0.0f;
}
for (int u = 0; u < 4; ++u) {
  const long long i = first + (long long)u * blockDim.x;
  if (i < x_numel) {
    const float cdf = 0.5f * (1.0f + erff(v[u] * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * v[u] * v[u]);
    y[i] = v[u] * cdf;
    gx[i] = g[u] * (cdf + v[u] * pdf);
  }
}
"""

FAST_POOL_BODY = r"""
// 16-byte loads when the plane's size is a multiple of 4 (then every plane starts 16-byte aligned): each
// thread keeps two of them in flight and four running sums. Then warp shuffles: one barrier, not one per
// level of a shared-memory tree. Needs whole warps.
__shared__ float warp_sums[32];
const long long plane = blockIdx.x, size = x_dims[2] * x_dims[3], base = plane * size;
const unsigned int t = threadIdx.x, lane = t % 32, warp = t / 32, warps = blockDim.x / 32;
const long long step = blockDim.x;
float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
if (size % 4 == 0) {
  const float4* quads = reinterpret_cast<const float4*>((const float*)(x + base));  // a plain pointer
  const long long n_quads = size / 4;
  long long k = t;
  for (; k + step < n_quads; k += 2 * step) {
    const float4 u = quads[k], v = quads[k + step];
    a0 += u.x + u.y;
    a1 += u.z + u.w;
    a2 += v.x + v.y;
    a3 += v.z + v.w;
  }
  if (k < n_quads) {
    const float4 u = quads[k];
    a0 += u.x + u.y;
    a1 += u.z + u.w;
  }
} else {
  long long k = t;
  for (; k + 3 * step < size; k += 4 * step) {
    a0 += x[base + k];
    a1 += x[base + k + step];
    a2 += x[base + k + 2 * step];
    a3 += x[base + k + 3 * step];
  }
  for (; k < size; k += step) a0 += x[base + k];
}
float sum = (a0 + a1) + (a2 + a3);
for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
if (lane == 0) warp_sums[warp] = sum;
__syncthreads();
if (warp == 0) {
  sum = lane < warps ? warp_sums[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) y[plane] = sum / (float)size;
}
"""

FAST_SOFTMAX_BODY = r"""
// One warp per row, the row read once: up to 1024 columns stay in registers (32 per lane) between the max,
// the sum and the write; longer rows are read three times, as in the readable reference.
const long long rows = x_dims[0], cols = x_dims[1];
const unsigned int lane = threadIdx.x % 32;
const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
if (row >= rows) return;
const long long base = row * cols;
float m = -INFINITY, s = 0.0f;
if (cols <= 1024) {
  float v[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const long long col = lane + 32 * j;
    v[j] = col < cols ? x[base + col] : -INFINITY;
    m = fmaxf(m, v[j]);
  }
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    v[j] = expf(v[j] - m);  // exp(-inf) = 0 past the row's end
    s += v[j];
  }
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  const float inv = 1.0f / s;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const long long col = lane + 32 * j;
    if (col < cols) y[base + col] = v[j] * inv;
  }
} else {
  for (long long j = lane; j < cols; j += 32) m = fmaxf(m, x[base + j]);
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  for (long long j = lane; j < cols; j += 32) s += expf(x[base + j] - m);
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  const float inv = 1.0f / s;
  for (long long j = lane; j < cols; j += 32) y[base + j] = expf(x[base + j] - m) * inv;
}
"""

FAST_SOLUTIONS: dict[str, KernelSubmission] = {
    "cuda_gelu": kernel_submission(FAST_GELU_BODY, lambda n: ((n + 1023) // 1024, 256)),
    "cuda_global_avg_pool": kernel_submission(FAST_POOL_BODY, lambda n, c, h, w: (n * c, 256)),
    "cuda_softmax": kernel_submission(FAST_SOFTMAX_BODY, lambda rows, cols: ((rows + 3) // 4, 128)),
}


EXERCISES = [CUDA_GELU, CUDA_GLOBAL_AVG_POOL, CUDA_SOFTMAX, CUDA_SGEMM, CUDA_IM2COL, CUDA_COL2IM, CUDA_COL2IM_ATOMIC,
             CUDA_DEPTHWISE_WEIGHT_GRAD]
EXERCISES_BY_ID = {ex.id: ex for ex in EXERCISES}
