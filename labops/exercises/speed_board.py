"""The class's speed leaderboard: every student's CUDA kernels timed on one GPU, as a share of the roof.

``labops speed-board --course notebooks/exercises --assignment <assignment>``, after the class handed in
(nbgrader's layout: ``submitted/<student>/<assignment>/*.ipynb``). For each ``check("cuda_...", <name>)``
cell of each notebook:

1. **The student's cells run in the grader's child** (``sandbox.run_steps``, a ``KernelStep``): bounded,
   in bubblewrap where installed, the course folder and the instructor's secret hidden. It hands back
   plain data only: the body's UTF-8 bytes and ``launch(**sizes)`` at the benchmark size, as int64.
2. **This process never runs the student's Python.** ``kernel_from_child`` refuses a body that would make
   the preprocessor read a file (the body is compiled here, and NVRTC's error log quotes an included
   file: the secret, another student's notebook) and checks the launch again, with CUDA's rules and the
   exercise's own.
3. ``time_kernel`` compiles the body with ``labops.rtc`` (NVRTC), runs it once *checked*
   (``rtc_cuda_checked.h``) on the benchmark inputs, so that a bug is found (verdict "wrong") before an
   unchecked launch can read or write outside the kernel's tensors, then times it with ``speed.time_submission``
   (``launch_is_ours=True``: the grader launches it; its rules answer caching by pointer, skipping
   repeated inputs and reading warm L2) against native torch, every rep checked. The score is
   ``speed.memory_score`` against the copy bandwidth measured in the same run, or, for the GEMM,
   cuBLAS's float32 time over its time.
4. ``speed.write_leaderboard`` writes the CSV (beside nbgrader's ``grades.csv``, joined on
   ``student_id``). A kernel that is wrong, refused or does not compile gets a row with that verdict and
   no score; the table printed says why.

What a hostile kernel can still do is the GPU's: one that faults on an input the checked launch did not
see breaks this process's CUDA context (the board then times nothing more and says whose kernel it was:
run it again with ``--skip`` that student), and one that never ends cannot be stopped from Python (after
``kernel_time_limit_s`` the board writes what it has, names the kernel and exits).

The benchmark sizes (``benchmarks``) are also what ``tools/gpu_exercises.py`` times the references at.
"""

from __future__ import annotations

import bisect
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from labops import rtc

from . import cuda, cuda_corpus, speed, triton_kernels
from .grading import DEFAULT_SECRET_FILE, notebook_steps, secret_folder
from .sandbox import LARGEST_KERNEL_BODY, GradeStep, KernelStep, Limits, run_steps

__all__ = ["CudaContextLost", "KernelScore", "RefusedKernel", "Roofs", "benchmarks", "board", "checked_launch",
           "kernel_from_child", "preprocessor_file_read", "relative_error", "submission_runner", "time_kernel",
           "time_triton_kernel", "triton_from_child"]

_HERE = "labops.exercises.speed_board."

# ---- the benchmarks: each exercise at a size where memory (or the GEMM's arithmetic) is the limit ----

N_GELU = 2**26
POOL = (64, 256, 56, 56)
SOFTMAX = (2**16, 1024)
GEMM = 4096
CONV = dict(C=256, H=112, W=112, k=3)
DEPTHWISE = dict(N=32, C=256, H=56, W=56, k=3)
CHECK_LIMIT = 1e-4  # relative error of each output against native torch (float32 both)


def out_size(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def benchmarks(device="cpu") -> dict:
    """Per exercise: ``args``, the case arguments of its setup at the benchmark size (random, on ``device``;
    ``"meta"`` gives the shapes without the numbers), ``native``, native torch of the kernel's inputs, and
    ``bytes``, its minimal traffic (each input read once, each output written once), or ``gemm``, (m, n, k)."""
    C, H, W, k = CONV["C"], CONV["H"], CONV["W"], CONV["k"]
    oh, ow = out_size(H, k, 1, 1), out_size(W, k, 1, 1)
    n, c, h, w = DEPTHWISE["N"], DEPTHWISE["C"], DEPTHWISE["H"], DEPTHWISE["W"]
    dk = DEPTHWISE["k"]

    def randn(*shape):
        return torch.randn(*shape, device=device)

    def fold(cols, geom):
        return F.fold(cols.reshape(1, C * k * k, oh * ow), (H, W), (k, k), padding=1)[0]

    return {
        "cuda_gelu": dict(args=(randn(N_GELU), randn(N_GELU)),
                          native=lambda x, gy: (F.gelu(x), torch.ops.aten.gelu_backward(gy, x)),
                          bytes=4 * N_GELU * 4),
        "cuda_global_avg_pool": dict(args=(randn(*POOL),), native=lambda x: x.mean((2, 3)),
                                     bytes=4 * (POOL[0] * POOL[1] * POOL[2] * POOL[3] + POOL[0] * POOL[1])),
        "cuda_softmax": dict(args=(randn(*SOFTMAX),), native=lambda x: torch.softmax(x, -1),
                             bytes=2 * 4 * SOFTMAX[0] * SOFTMAX[1]),
        "cuda_sgemm": dict(args=(randn(GEMM, GEMM), randn(GEMM, GEMM)), native=torch.mm, gemm=(GEMM, GEMM, GEMM)),
        "cuda_im2col": dict(args=(randn(C, H, W), k, k, 1, 1, 1, 1),
                            native=lambda img, geom: F.unfold(img[None], (k, k), padding=1).view(C, k, k, oh, ow),
                            bytes=4 * (C * H * W + C * k * k * oh * ow)),
        "cuda_col2im": dict(args=(randn(C, k, k, oh, ow), H, W, 1, 1, 1, 1), native=fold,
                            bytes=4 * (C * H * W + C * k * k * oh * ow)),
        "cuda_col2im_atomic": dict(args=(randn(C, k, k, oh, ow), H, W, 1, 1, 1, 1), native=fold,
                                   bytes=4 * (C * H * W + C * k * k * oh * ow)),
        # The Triton exercises, at the sizes of their CUDA twins (x of the softmax with a row stride of cols).
        "triton_gelu": dict(args=(randn(N_GELU), randn(N_GELU)),
                            native=lambda x, gy: (F.gelu(x), torch.ops.aten.gelu_backward(gy, x)),
                            bytes=4 * N_GELU * 4),
        "triton_softmax": dict(args=(randn(*SOFTMAX), randn(SOFTMAX[0], 0)), native=lambda x: torch.softmax(x, -1),
                               bytes=2 * 4 * SOFTMAX[0] * SOFTMAX[1]),
        # float16 in, float32 out: checked against cuBLAS on float32 copies (exact products, TF32 off), scored
        # against cuBLAS's float16 GEMM.
        "triton_matmul": dict(args=(randn(GEMM, GEMM).half(), randn(GEMM, GEMM).half()),
                              native=lambda a, b: torch.mm(a.float(), b.float()), gemm=(GEMM, GEMM, GEMM),
                              dtype=torch.float16),
        "cuda_depthwise_weight_grad": dict(
            args=(randn(n, c, h, w), randn(n, c, out_size(h, dk, 1, 1), out_size(w, dk, 1, 1)), dk, dk, 1, 1, 1, 1),
            native=lambda x, gy, geom: torch.nn.grad.conv2d_weight(x, (c, 1, dk, dk), gy, padding=1, groups=c),
            bytes=4 * (n * c * h * w * 2 + c * dk * dk)),
    }


def _exercise(exercise_id, where):
    if exercise_id not in cuda.PROBLEMS:
        raise ValueError(f"{_HERE}{where}: exercise_id must be one of {sorted(cuda.PROBLEMS)}, got {exercise_id!r}")
    return cuda.PROBLEMS[exercise_id]


def benchmark_sizes(exercise_id) -> dict:
    """The sizes ``launch`` is called with at the benchmark size (what a KernelStep passes the child)."""
    if exercise_id in triton_kernels.PROBLEMS:
        return {k: int(v) for k, v in triton_kernels.PROBLEMS[exercise_id].setup(
            *benchmarks("meta")[exercise_id]["args"])[3].items()}
    problem = _exercise(exercise_id, "benchmark_sizes")
    return {k: int(v) for k, v in problem.setup(*benchmarks("meta")[exercise_id]["args"])[2].items()}


def relative_error(limit):
    """A check for ``speed.time_submission``: each output's relative error (2-norm) under ``limit``."""
    def check(outputs, expected):
        outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        for k, (got, want) in enumerate(zip(outputs, expected)):
            got, want = got.double(), want.double()
            if got.shape != want.shape:
                return f"output {k}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
            error = ((got - want).norm() / want.norm()).item()
            if not error < limit:
                return f"output {k}: relative error {error:.2e} >= {limit:.0e}"
        return None
    return check


def _runner(exercise_id, args, body, launch: cuda.Launch):
    """(make_inputs, run) for ``body`` launched as ``launch`` on the setup of ``args`` (real or "meta"):
    make_inputs draws the floating inputs afresh on the GPU (the others are the setup's), run(inputs,
    checked=False) allocates the outputs and launches. The outputs are filled as the exercise fills them
    (NaN: an element no thread writes shows) when the exercise needs it (zeros to add into) or the launch
    is checked; an unchecked launch's are left as allocated (each rep's inputs are new, so a stale output
    is still wrong)."""
    problem = cuda.PROBLEMS[exercise_id]
    inputs, out_shapes, _ = problem.setup(*args)
    kernel = rtc.kernel(problem.kernel_name, list(problem.inputs), list(problem.outputs), body)
    shapes = [(t.shape, t.dtype) for t in inputs]
    constants = [None if t.dtype.is_floating_point else t.to("cuda") for t in inputs]

    def make_inputs(generator):
        return tuple(torch.randn(shape, generator=generator, device="cuda") if dtype.is_floating_point else constant
                     for (shape, dtype), constant in zip(shapes, constants))

    def run(ins, checked=False):
        outs = [torch.full(s, problem.fill, device="cuda") if problem.fill == 0.0 or checked else
                torch.empty(s, device="cuda") for s in out_shapes]
        kernel(*ins, *outs, grid=launch.grid, block=launch.block, shared_mem=launch.shared_mem, checked=checked)
        return tuple(outs)
    return make_inputs, run


def submission_runner(exercise_id, args, solution=None):
    """(make_inputs, run) for ``solution`` (default: the exercise's reference) on the setup of ``args``; for a
    ``triton_*`` exercise, its ``triton_submission`` compiled for the GPU (``triton_kernels.gpu_runner``)."""
    if exercise_id.startswith("triton_"):
        from . import triton_corpus, triton_kernels

        return triton_kernels.gpu_runner(exercise_id, args, solution or triton_corpus.SOLUTIONS[exercise_id])
    problem, solution = cuda.PROBLEMS[exercise_id], solution or cuda.SOLUTIONS[exercise_id]
    sizes = problem.setup(*args)[2]
    return _runner(exercise_id, args, solution.body, cuda._check_launch(solution.launch(**sizes), "launch"))


# ---- what comes back from the child, checked here ----

class RefusedKernel(ValueError):
    """A kernel the board does not compile or time; the message says why."""


class CudaContextLost(RuntimeError):
    """A kernel broke this process's CUDA context (an illegal address, say): no later CUDA call works."""


_SPLICE = re.compile(r"(?:\\|\?\?/)[ \t\f\v]*\r?\n")  # a line continuation (the trigraph too)
_UCN = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")
_HASH = re.compile(r"#|%:|\?\?=")  # a directive's #, as a digraph, as a trigraph
_GAP = re.compile(r"\s+|//[^\n]*|/\*")
_WORD = re.compile(r"\w+")
_READS_A_FILE = re.compile(r"include\w*|import|embed")
_HAS_FILE = re.compile(r"__has_(?:include\w*|embed)")


def _ucn(match):
    code = int(match.group(1) or match.group(2), 16)
    return chr(code) if code < 0x110000 else "?"


def preprocessor_file_read(body: str) -> str | None:
    """How ``body`` would make the preprocessor read (or look for) a file -- ``#include``, ``#embed``,
    ``#import``, ``__has_include`` in any spelling the preprocessor accepts: line continuations, comments
    between ``#`` and the name, ``%:`` -- or None. Erring on the side of refusing: a ``#include`` inside a
    string or a comment counts too.

    Example::

        >>> preprocessor_file_read('y[0] = x[0];')
        >>> preprocessor_file_read('%: /* hidden */ include "/etc/hostname"')
        '%:include'
    """
    if not isinstance(body, str):
        raise TypeError(f"{_HERE}preprocessor_file_read: body must be a str, got {type(body).__name__}")
    text = _UCN.sub(_ucn, _SPLICE.sub("", body))
    found = _HAS_FILE.search(text)
    if found:
        return found.group()
    comment_ends = [m.start() for m in re.finditer(r"\*/", text)]
    for mark in _HASH.finditer(text):
        at = mark.end()
        while (gap := _GAP.match(text, at)) is not None:  # whitespace and comments, as the preprocessor skips
            if gap.group() == "/*":
                end = bisect.bisect_left(comment_ends, gap.end())
                at = comment_ends[end] + 2 if end < len(comment_ends) else len(text)
            else:
                at = gap.end()
        word = _WORD.match(text, at)
        if word and _READS_A_FILE.fullmatch(word.group()):
            return f"{mark.group()}{word.group()}"
    return None


def _refuse_file_reads(body):
    found = preprocessor_file_read(body)
    if found:
        raise RefusedKernel(f"the body uses the preprocessor to read a file ({found}): the grader compiles it in "
                            f"its own process, where a compile error would print that file. A kernel body needs "
                            f"no #include, #embed, #import or __has_include: remove it")


def checked_launch(exercise_id, config, sizes) -> cuda.Launch:
    """``config`` ((grid, block[, shared_mem]) or a ``cuda.Launch``) checked by CUDA's rules and the
    exercise's own, as ``check`` checks a launch; a RefusedKernel says which rule it breaks."""
    problem = _exercise(exercise_id, "checked_launch")
    if isinstance(config, cuda.Launch):
        config = (config.grid, config.block, config.shared_mem)
    where = "launch(" + ", ".join(f"{k}={v}" for k, v in sizes.items()) + ")"
    try:
        launch = cuda._check_launch(config, where)
    except cuda.LaunchConfigError as exc:
        raise RefusedKernel(str(exc)) from None
    broken = problem.rule(launch, sizes) if problem.rule is not None else None
    if broken:
        raise RefusedKernel(f"{where} returned grid={launch.grid}, block={launch.block}: {broken}")
    return launch


def kernel_from_child(exercise_id, outcome, sizes) -> tuple[str, cuda.Launch]:
    """(body, launch) from what a ``KernelStep`` handed back (its ``Outcome``), checked in this process:
    the body is UTF-8 of at most ``sandbox.LARGEST_KERNEL_BODY`` bytes and reads no file through the
    preprocessor, the launch passes ``checked_launch`` at ``sizes``. Else a RefusedKernel says why
    (what the child raised, when it raised)."""
    _exercise(exercise_id, "kernel_from_child")
    if outcome.raised is not None:
        raise RefusedKernel(f"the check's argument {outcome.raised.text}")
    got = outcome.got
    if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(a, np.ndarray) for a in got)
            and got[0].dtype == np.uint8 and got[0].ndim == 1 and got[1].dtype == np.int64
            and got[1].shape == (7,)):
        raise RefusedKernel(f"the grading process handed back {got!r:.200}, not a kernel's body and launch")
    data, numbers = got
    if data.size > LARGEST_KERNEL_BODY:
        raise RefusedKernel(f"the body is {data.size} bytes; at most {LARGEST_KERNEL_BODY} are taken")
    try:
        body = data.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RefusedKernel(f"the body is not UTF-8 text ({exc})") from None
    if "\x00" in body:
        raise RefusedKernel("the body holds a NUL character")
    _refuse_file_reads(body)
    grid, block = tuple(int(v) for v in numbers[:3]), tuple(int(v) for v in numbers[3:6])
    return body, checked_launch(exercise_id, (grid, block, int(numbers[6])), sizes)


def triton_from_child(exercise_id, outcome, sizes_list):
    """The ``triton_submission`` a Triton ``KernelStep`` handed back (its ``Outcome``), rebuilt in this process
    from the kernel's source alone: ``triton_kernels.harness`` keeps only ``@triton.jit`` definitions, which are
    defined here (no other line of the student's runs), and ``check_source`` refuses a kernel that names
    anything but triton.language and its own helpers. Else a RefusedKernel says why."""
    import linecache

    if outcome.raised is not None:
        raise RefusedKernel(f"the check's argument {outcome.raised.text}")
    try:
        cell = triton_kernels.harness(exercise_id, outcome.got, sizes_list)
        filename = f"<the student's {exercise_id} kernel>"
        linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
        namespace = {"__name__": "student_kernel"}
        exec(compile(cell, filename, "exec"), namespace)
        submission = namespace["_submission"]
        triton_kernels.check_source(submission.kernel.fn)
    except triton_kernels.TritonIRError as exc:
        raise RefusedKernel(str(exc)) from None
    return submission


# ---- timing, on a GPU ----

@dataclass
class Roofs:
    """What a board's kernels are scored against, measured once on this GPU in this run: the copy
    bandwidth (bytes/s), cuBLAS's float32 time per GEMM shape, native torch's median time per exercise."""

    bandwidth: float | None = None
    cublas_s: dict = field(default_factory=dict)
    native_s: dict = field(default_factory=dict)


@dataclass(frozen=True)
class KernelScore:
    """One kernel's result: ``verdict`` (one of ``speed.VERDICTS``), ``percent_of_roof`` and
    ``time_over_native`` (None unless it was timed), and ``reason`` (why it is wrong, flagged or an error)."""

    verdict: str
    percent_of_roof: float | None = None
    time_over_native: float | None = None
    reason: str = ""


def _timed(run, make_inputs, reference):
    return speed.time_submission(run, make_inputs, reference, check=relative_error(CHECK_LIMIT), min_total_s=0.2,
                                 min_reps=5, warmup=2, launch_is_ours=True)


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def time_kernel(exercise_id, body, config, *, roofs: Roofs | None = None) -> KernelScore:
    """Time ``body`` launched as ``config`` (checked by ``checked_launch`` at the benchmark sizes) at the
    exercise's benchmark size on this GPU, and score it (see the module's docstring).

    A kernel that does not compile gets verdict ``"error"``; one that a checked launch finds a bug in, or
    whose output differs from native torch's on any rep, ``"wrong"``. A body that reads a file through the
    preprocessor, or a launch that breaks a rule, raises RefusedKernel; a kernel that breaks the CUDA
    context raises CudaContextLost. ``roofs``: the measurements to reuse (filled on first use).
    """
    problem = _exercise(exercise_id, "time_kernel")
    if not isinstance(body, str):
        raise TypeError(f"{_HERE}time_kernel: body must be a str of CUDA C statements, got {type(body).__name__}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"{_HERE}time_kernel needs a CUDA GPU (torch.cuda.is_available() is False): a kernel "
                           f"is timed with CUDA events and scored against this GPU's copy bandwidth and cuBLAS")
    _refuse_file_reads(body)
    spec = benchmarks("meta")[exercise_id]
    launch = checked_launch(exercise_id, config, problem.setup(*spec["args"])[2])
    roofs = roofs if roofs is not None else Roofs()
    make_inputs, run = _runner(exercise_id, spec["args"], body, launch)

    def reference(ins):
        return _as_tuple(spec["native"](*ins))

    try:
        with speed.fp32_matmul():
            ins = make_inputs(torch.Generator(device="cuda").manual_seed(1))
            try:  # checked once: a bug is reported before an unchecked launch can make it
                wrong = relative_error(CHECK_LIMIT)(run(ins, checked=True), reference(ins))
            except rtc.CompileError as exc:
                first = next((line for line in exc.log.splitlines() if "error" in line), "")
                return KernelScore("error", reason=f"does not compile: {first.strip()}\n{exc}")
            except rtc.KernelBugError as exc:
                return KernelScore("wrong", reason=f"the checked launch at the benchmark size: {exc}")
            if wrong:
                return KernelScore("wrong", reason=f"the checked launch at the benchmark size: {wrong}")
            return _timed_and_scored(exercise_id, spec, run, make_inputs, reference, roofs)
    except Exception as exc:
        _raise_if_context_lost(exc)
        raise


def _raise_if_context_lost(exc):
    try:
        torch.cuda.synchronize()
    except Exception:
        raise CudaContextLost(f"the kernel broke this process's CUDA context: {exc}") from exc


def _timed_and_scored(exercise_id, spec, run, make_inputs, reference, roofs) -> KernelScore:
    """Time ``run`` (checked already), then score it against its roof, measured once per board in ``roofs``."""
    timing = _timed(run, make_inputs, reference)
    if not timing.passed:
        return KernelScore("wrong", reason="; ".join(timing.reasons))
    if exercise_id not in roofs.native_s:
        roofs.native_s[exercise_id] = _timed(reference, make_inputs, reference).median_s
    if "gemm" in spec:
        key = (*spec["gemm"], spec.get("dtype", torch.float32))
        if key not in roofs.cublas_s:
            roofs.cublas_s[key] = speed.cublas_sgemm_time(*spec["gemm"], dtype=key[3])
        percent = speed.gemm_score(timing.median_s, *spec["gemm"], cublas_s=roofs.cublas_s[key])
    else:
        if roofs.bandwidth is None:
            roofs.bandwidth = speed.copy_bandwidth()
        percent = speed.memory_score(timing.median_s, spec["bytes"], roofs.bandwidth)
    return KernelScore(speed.verdict(timing), percent, timing.median_s / roofs.native_s[exercise_id],
                       "; ".join(timing.reasons))


def time_triton_kernel(exercise_id, submission, *, roofs: Roofs | None = None) -> KernelScore:
    """Time a ``triton_submission`` at the exercise's benchmark size on this GPU, compiled by Triton, and score
    it as ``time_kernel`` scores a CUDA kernel. It runs once first as ``check`` runs it (guard zones around every
    tensor, the outputs filled with NaN), so a store outside a tensor is found ("wrong") before a launch
    without them; a kernel that does not compile gets "error"."""
    if exercise_id not in triton_kernels.PROBLEMS:
        raise ValueError(f"{_HERE}time_triton_kernel: exercise_id must be one of {sorted(triton_kernels.PROBLEMS)}, "
                         f"got {exercise_id!r}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"{_HERE}time_triton_kernel needs a CUDA GPU (torch.cuda.is_available() is False)")
    problem = triton_kernels.PROBLEMS[exercise_id]
    roofs = roofs if roofs is not None else Roofs()
    spec = benchmarks("meta")[exercise_id]
    try:
        make_inputs, run = triton_kernels.gpu_runner(exercise_id, spec["args"], submission)
    except cuda.LaunchConfigError as exc:
        raise RefusedKernel(str(exc)) from None

    def reference(ins):
        return _as_tuple(spec["native"](*ins))

    try:
        with speed.fp32_matmul():
            args = tuple(torch.randn(a.shape, device="cuda").to(a.dtype) for a in spec["args"])
            inputs = problem.setup(*args)[0]
            try:  # as check runs it: a store outside a tensor is found before an unguarded launch can make it
                with cuda_corpus._device("cuda"):
                    got = _as_tuple(problem.run(submission, args))
            except (triton_kernels.TritonIRError, triton_kernels.OutOfBoundsWriteError, cuda.LaunchConfigError) as exc:
                return KernelScore("wrong", reason=f"the guarded launch at the benchmark size: {exc}")
            except Exception as exc:  # Triton's compile errors
                _raise_if_context_lost(exc)
                return KernelScore("error", reason=f"{type(exc).__name__}: {exc}"[:2000])
            wrong = relative_error(CHECK_LIMIT)(got, tuple(t.to("cpu", torch.float64) for t in reference(
                [t.to("cuda") for t in inputs])))
            if wrong:
                return KernelScore("wrong", reason=f"the guarded launch at the benchmark size: {wrong}")
            return _timed_and_scored(exercise_id, spec, lambda ins: run(ins), make_inputs, reference, roofs)
    except Exception as exc:
        _raise_if_context_lost(exc)
        raise


# ---- the board ----

def _kernel_steps(steps, seen: set) -> list:
    """A notebook's steps for the board: its student cells, and a KernelStep per cuda_* check not in ``seen``
    (which it adds to: a student's first check of an exercise is the one timed)."""
    kept = []
    for step in steps:
        if isinstance(step, GradeStep):
            if step.exercise in cuda.PROBLEMS and step.exercise not in seen:
                seen.add(step.exercise)
                kept.append(KernelStep(step.exercise, step.fn_name, benchmark_sizes(step.exercise)))
            elif step.exercise in triton_kernels.PROBLEMS and step.exercise not in seen:
                seen.add(step.exercise)
                kept.append(KernelStep(step.exercise, step.fn_name, [benchmark_sizes(step.exercise)],
                                       language="triton"))
        else:
            kept.append(step)
    return kept


def _read_notebook(path):
    try:
        import nbformat
    except ImportError:
        raise ImportError("labops speed-board reads notebooks with nbformat: pip install labops[teach]") from None
    return nbformat.read(str(path), as_version=4)


def _row(student, exercise_id, verdict, percent=None, over_native=None, reason=""):
    return {"student_id": student, "exercise_id": exercise_id, "percent_of_roof": percent,
            "time_over_native": over_native, "verdict": verdict, "reason": reason}


def _write(rows, out_csv):
    columns = speed.LEADERBOARD_COLUMNS
    return speed.write_leaderboard([{k: r[k] for k in columns} for r in rows], out_csv)


def _default_limits(course: Path) -> Limits:
    return Limits(hidden_paths=[os.path.realpath(course), secret_folder(DEFAULT_SECRET_FILE)])


def board(course_dir, assignment, out_csv=None, limits: Limits | None = None, *, timer=None, skip=(),
          kernel_time_limit_s: float = 600.0, show: bool = True) -> list[dict]:
    """Time every student's ``cuda_*`` kernels of ``assignment`` and write the leaderboard CSV.

    Args:
        course_dir: the nbgrader course folder (hand-ins at ``submitted/<student>/<assignment>/*.ipynb``).
        assignment: the assignment's name.
        out_csv: where the CSV goes (default ``<course_dir>/speed_<assignment>.csv``, beside nbgrader's
            ``grades.csv``).
        limits: the child's limits (default: ``sandbox.Limits`` with the course folder and the secret's
            folder hidden).
        timer: ``timer(exercise_id, body, launch) -> KernelScore`` (default: ``time_kernel`` with one
            ``Roofs`` for the whole board; a test passes a fake).
        skip: students not to time (a row with verdict "error" says so).
        kernel_time_limit_s: how long one kernel's compile, checked launch and timing may take before the
            board writes what it has and ends this process (a kernel running on the GPU cannot be stopped).
        show: print a table.

    Returns:
        the rows, each with the leaderboard's columns and ``reason``.
    """
    course = Path(course_dir)
    if not isinstance(assignment, str) or not assignment or "/" in assignment:
        raise ValueError(f"{_HERE}board: assignment must be an assignment's folder name, got {assignment!r}")
    submitted = course / "submitted"
    if not submitted.is_dir():
        raise FileNotFoundError(f"{_HERE}board: no {submitted}: course_dir must be the nbgrader course folder "
                                f"(hand-ins at submitted/<student>/{assignment}/*.ipynb)")
    if isinstance(kernel_time_limit_s, bool) or not isinstance(kernel_time_limit_s, (int, float)) \
            or not kernel_time_limit_s > 0:
        raise ValueError(f"{_HERE}board: kernel_time_limit_s must be a number of seconds > 0, got "
                         f"{kernel_time_limit_s!r}")
    if timer is None:
        if not torch.cuda.is_available():
            raise RuntimeError(f"{_HERE}board needs a CUDA GPU to time the kernels (torch.cuda.is_available() is "
                               f"False): run it on the GPU machine")
        roofs = Roofs()

        def timer(exercise_id, body, launch):
            if exercise_id in triton_kernels.PROBLEMS:
                return time_triton_kernel(exercise_id, body, roofs=roofs)
            return time_kernel(exercise_id, body, launch, roofs=roofs)
    out_csv = Path(out_csv) if out_csv is not None else course / f"speed_{assignment}.csv"
    limits = limits or _default_limits(course)
    rows: list[dict] = []
    broken = None  # whose kernel broke the CUDA context: nothing after it is timed
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        student, seen = student_dir.name, set()
        for notebook in sorted((student_dir / assignment).glob("*.ipynb")):
            try:
                steps = _kernel_steps(notebook_steps(_read_notebook(notebook).cells)[0], seen)
            except ImportError:
                raise
            except Exception as exc:  # not a notebook nbformat can read: it has no kernel to time
                print(f"labops speed-board: {notebook} skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            kernels = [(s, step) for s, step in enumerate(steps) if isinstance(step, KernelStep)]
            if student in skip or broken is not None:
                why = "skipped (--skip)" if student in skip else f"not timed: {broken}"
                rows += [_row(student, step.exercise, "error", reason=why) for _, step in kernels]
                continue
            outcomes = run_steps(steps, limits)[0] if kernels else {}
            for s, step in kernels:
                if broken is not None:
                    rows.append(_row(student, step.exercise, "error", reason=f"not timed: {broken}"))
                    continue
                try:
                    rows.append(_score(student, step, outcomes[(s, 0, 0)], timer, rows, out_csv,
                                       kernel_time_limit_s))
                except CudaContextLost as exc:
                    rows.append(_row(student, step.exercise, "error", reason=f"{exc}"))
                    broken = (f"{student}'s {step.exercise} kernel broke this process's CUDA context; run the "
                              f"board again with --skip {student}")
    _write(rows, out_csv)
    if show:
        print(table(rows))
        print(f"wrote {out_csv}")
    return rows


def _score(student, step, outcome, timer, rows, out_csv, time_limit_s) -> dict:
    try:
        if step.language == "triton":
            body, launch = triton_from_child(step.exercise, outcome, step.sizes), None
        else:
            body, launch = kernel_from_child(step.exercise, outcome, step.sizes)
    except RefusedKernel as exc:  # what the notebook raised, or what this process refuses
        refused = "" if outcome.raised is not None else "refused: "
        return _row(student, step.exercise, "error", reason=f"{refused}{exc}")

    def hung():  # the main thread waits on the GPU; a kernel that runs forever cannot be stopped from Python
        _write(rows, out_csv)
        print(f"labops speed-board: {student}'s {step.exercise} kernel did not finish within {time_limit_s:g} s; "
              f"the rows before it are in {out_csv}. Run the board again with --skip {student}.",
              file=sys.stderr, flush=True)
        os._exit(3)

    watchdog = threading.Timer(time_limit_s, hung)
    watchdog.daemon = True
    watchdog.start()
    try:
        score = timer(step.exercise, body, launch)
    except CudaContextLost:
        raise
    except Exception as exc:  # a compile error raised by a timer, a refused launch: this kernel's row says so
        return _row(student, step.exercise, "error", reason=f"{type(exc).__name__}: {exc}")
    finally:
        watchdog.cancel()
    return _row(student, step.exercise, score.verdict, score.percent_of_roof, score.time_over_native, score.reason)


def table(rows) -> str:
    """The rows as a short text table: one line each, the reason's first line cut at 70 characters."""
    lines = [f"{'student':16} {'exercise':28} {'% roof':>7} {'x native':>8}  {'verdict':8} reason"]
    for r in rows:
        percent = "" if r["percent_of_roof"] is None else f"{r['percent_of_roof']:.1f}"
        native = "" if r["time_over_native"] is None else f"{r['time_over_native']:.2f}"
        reason = (r["reason"].strip().splitlines() or [""])[0]
        reason = reason if len(reason) <= 70 else reason[:67] + "..."
        lines.append(f"{r['student_id']:16} {r['exercise_id']:28} {percent:>7} {native:>8}  {r['verdict']:8} {reason}")
    return "\n".join(lines)
