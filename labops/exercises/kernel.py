"""The grid-stride loop exercise: a CUDA-style kernel body run by ``labops.simt``.

The learner writes ``kernel(ctx, x, y, n, alpha)`` that sets ``y[i] = alpha *
x[i]`` for every ``i < n``, computing its indices from ``ctx.blockIdx``,
``ctx.threadIdx``, ``ctx.blockDim`` and ``ctx.gridDim`` as a CUDA thread does.
``y`` is a ``simt.WatchedArray``, so the check knows which thread wrote each
element: it grades with a grid deliberately smaller than the data (each thread
must loop) and with one larger (the surplus threads must write nothing).
"""

from __future__ import annotations

import numpy as np
import torch

from labops import simt

from ._core import Case, Check, Exercise, Mistake, randn

__all__ = ["EXERCISES", "GRID_STRIDE_LOOP"]


def _case(label, n, grid, block, seed, alpha=2.5):
    x = randn(n, seed=seed)
    expected = (alpha * x, torch.ones(n, dtype=torch.float64))
    return Case(f"{label}: n = {n}, grid {grid} x block {block}", (x, n, alpha, grid, block), expected,
                ("y", "writes per element"))


def _launch(fn, args):
    x, n, alpha, grid, block = args
    y = simt.WatchedArray(np.full(n, np.nan))
    simt.launch(fn, grid, block, x.numpy(), y, n, alpha)
    counts = np.bincount([a.element for a in y.writes.accesses], minlength=n)
    return y, torch.from_numpy(y.data.copy()), torch.from_numpy(counts.astype(np.float64))


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
    "grid_stride_loop", "A kernel body with a grid-stride loop (CUDA_KERNEL_LOOP), run by labops.simt",
    "kernel(ctx, x, y, n, alpha) -> None   (sets y[i] = alpha * x[i] for every 0 <= i < n; "
    "ctx has blockIdx, threadIdx, blockDim, gridDim, each with .x)",
    _checks,
    call=lambda fn, args: _launch(fn, args)[1:],
    mistakes=[
        Mistake("The loop writes past the end: its condition must be i < n, checked before every write "
                "(threads beyond n must do nothing).", raises=IndexError),
        Mistake("A grid-stride loop that skips elements: each thread must start at "
                "blockIdx.x * blockDim.x + threadIdx.x and step by blockDim.x * gridDim.x (every thread of the "
                "grid) until i >= n; with fewer threads than elements, one index per thread is not enough.",
                test=lambda case, got: bool((_counts(got) == 0).any()) and not bool((_counts(got) > 1).any())),
        Mistake("A grid-stride loop that repeats elements: two threads reach the same index. The start must "
                "include blockIdx.x * blockDim.x, and the step must be blockDim.x * gridDim.x, not blockDim.x.",
                test=lambda case, got: bool((_counts(got) > 1).any())),
        Mistake("Every element written once, but with the wrong value: y[i] = alpha * x[i].",
                test=lambda case, got: bool((_counts(got) == 1).all())),
    ],
)


def draw(fn, hidden=False):
    """The learner's thread -> element map on the first case (a grid smaller than the data)."""
    from labops import viz

    case = _checks(hidden)[0].cases[0]
    x, n, alpha, grid, block = case.args
    y = simt.WatchedArray(np.full(n, np.nan))
    try:
        simt.launch(fn, grid, block, x.numpy(), y, n, alpha)
    except BaseException:  # draw what was written before the error
        pass
    counts = np.bincount([a.element for a in y.writes.accesses], minlength=n)[:n]
    missed, twice = int((counts == 0).sum()), int((counts > 1).sum())
    title = (f"your kernel: {grid} blocks x {block} threads, n = {n}: "
             f"{missed} element(s) never written, {twice} written more than once")
    return viz.thread_map(y.writes, n=n, row_length=grid * block, title=title)


GRID_STRIDE_LOOP.draw = draw

EXERCISES = [GRID_STRIDE_LOOP]
