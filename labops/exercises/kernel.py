"""The grid-stride loop exercise: a CUDA C kernel body, run by ``labops.rtc`` on the CPU.

The learner writes the body of ``scale(x, alpha -> y)`` as a string of CUDA C statements that sets ``y[i] =
alpha[0] * x[i]`` for every ``i < y_numel``, computing its indices from ``blockIdx``, ``threadIdx``,
``blockDim`` and ``gridDim`` as any CUDA thread does. The launch is recorded (``record=True``), so the
check knows which thread wrote each element: it grades with a grid deliberately smaller than the data (each
thread must loop) and with one larger (the surplus threads must write nothing). A grid-stride loop gives
element ``i`` to the thread of global index ``i % (gridDim.x * blockDim.x)``, and the check compares that
owner too: the values alone do not show whether the kernel is a grid-stride loop.
"""

from __future__ import annotations

import numpy as np
import torch

from labops import rtc, simt

from ._core import Case, Check, Exercise, Mistake, randn

__all__ = ["EXERCISES", "GRID_STRIDE_LOOP"]


def _case(label, n, grid, block, seed, alpha=2.5):
    x = randn(n, seed=seed)
    owner = torch.arange(n, dtype=torch.float64) % (grid * block)
    expected = (alpha * x, torch.ones(n, dtype=torch.float64), owner)
    return Case(f"{label}: n = {n}, grid {grid} x block {block}", (x, n, alpha, grid, block), expected,
                ("y", "writes per element", "thread that wrote the element"))


def _launch(body, args):
    """Run the body on every thread; y, writes per element, the writer's global thread index (-1: none)
    and every write as rows (element, block, thread, iteration), which only the figure uses."""
    if not isinstance(body, str):
        raise TypeError(f"grid_stride_loop: hand in the kernel's body as a str of CUDA C statements, got "
                        f"{type(body).__name__}")
    x, n, alpha, grid, block = args
    y = torch.full((n,), float("nan"), dtype=torch.float64)
    recording = rtc.kernel("scale", ["x", "alpha"], ["y"], body)(
        x, torch.tensor([alpha], dtype=torch.float64), y, grid=grid, block=block, record=True)
    writes = np.array([(a.element, a.block, a.thread, a.iteration) for a in recording.writes["y"].accesses],
                      dtype=np.int64).reshape(-1, 4)
    counts = np.bincount(writes[:, 0], minlength=n)[:n]
    owner = np.full(n, -1, dtype=np.int64)
    owner[writes[:, 0]] = writes[:, 1] * block + writes[:, 2]
    return y.numpy().copy(), counts.astype(np.float64), owner.astype(np.float64), writes


def _checks(hidden):
    return [
        Check("grid smaller than the data (each thread loops)",
              [_case("fewer threads than elements", 50, 2, 8, 201)]
              + ([_case("fewer threads than elements", 1000, 3, 32, 202)] if hidden else [])),
        Check("n not a multiple of the thread count", [_case("a ragged last trip", 37, 2, 8, 203)]),
        Check("one block", [_case("one block", 10, 1, 4, 205)]),
        Check("grid larger than the data (surplus threads write nothing)",
              [_case("more threads than elements", 13, 4, 8, 207)]
              + ([_case("more threads than elements", 1, 2, 32, 208)] if hidden else [])),
    ]


def _counts(got):
    return np.asarray(got[1])


GRID_STRIDE_LOOP = Exercise(
    "grid_stride_loop", "A CUDA C kernel body with a grid-stride loop (CUDA_KERNEL_LOOP), run by labops.rtc",
    "body: str, the CUDA C statements of scale(x, alpha -> y), which sets y[i] = alpha[0] * x[i] for every "
    "0 <= i < y_numel (x, y: double; blockIdx, threadIdx, blockDim, gridDim as in CUDA)",
    _checks,
    call=_launch,
    extras=1,
    takes="body",
    mistakes=[
        Mistake("The loop reads or writes past the end: its condition must be i < y_numel, checked before "
                "every access (threads beyond the last element must do nothing).", raises=IndexError),
        Mistake("A grid-stride loop that skips elements: each thread must start at "
                "blockIdx.x * blockDim.x + threadIdx.x and step by blockDim.x * gridDim.x (every thread of the "
                "grid) until i >= y_numel; with fewer threads than elements, one index per thread is not enough.",
                test=lambda case, got: bool((_counts(got) == 0).any()) and not bool((_counts(got) > 1).any())),
        Mistake("A grid-stride loop that repeats elements: two threads reach the same index. The start must "
                "include blockIdx.x * blockDim.x, and the step must be blockDim.x * gridDim.x, not blockDim.x.",
                test=lambda case, got: bool((_counts(got) > 1).any())),
        Mistake("Every element written once, but not in grid-stride order: thread t (global index "
                "blockIdx.x * blockDim.x + threadIdx.x) takes i = t, t + T, t + 2T, ... with T = blockDim.x * "
                "gridDim.x, so element i belongs to thread i % T.",
                test=lambda case, got: bool((_counts(got) == 1).all())
                and not np.array_equal(np.asarray(got[2]), case.expected[2].numpy())),
        Mistake("Every element written once, but with the wrong value: y[i] = alpha[0] * x[i].",
                test=lambda case, got: bool((_counts(got) == 1).all())),
    ],
)


def draw(case, got):
    """The learner's thread -> element map, drawn from the writes the first case recorded (never by
    running the kernel again)."""
    from labops import viz

    x, n, alpha, grid, block = case.args
    writes = np.asarray(got[-1], dtype=np.int64).reshape(-1, 4) if isinstance(got, tuple) and got else \
        np.zeros((0, 4), dtype=np.int64)
    trace = simt.Trace(simt.Dim3.of(grid), simt.Dim3.of(block),
                       [simt.Access(int(e), int(b), int(t), int(i)) for e, b, t, i in writes])
    counts = trace.arrays(n)["count"]
    missed, twice = int((counts == 0).sum()), int((counts > 1).sum())
    title = (f"your kernel: {grid} blocks x {block} threads, n = {n}: "
             f"{missed} element(s) never written, {twice} written more than once")
    return viz.thread_map(trace, n=n, row_length=grid * block, title=title)


GRID_STRIDE_LOOP.draw = draw

EXERCISES = [GRID_STRIDE_LOOP]
