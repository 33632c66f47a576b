"""A CUDA launch, emulated in plain Python, for learners without a GPU.

A CUDA kernel is one function that the GPU runs once per thread. Threads come
in blocks (``blockDim`` threads each) and blocks in a grid (``gridDim``
blocks). This module runs a Python kernel body once for every
(blockIdx, threadIdx) of a launch, one thread after another, and records a
*trace*: which thread touched which element on which trip of its loop.

    def kernel(ctx, x, y, n):
        for i in simt.kernel_loop(ctx, n):     # LABOPS_KERNEL_LOOP(i, n)
            y[i] = 2 * x[i]

    trace = simt.launch(kernel, grid=2, block=4, x=x, y=y, n=20)
    trace.owner(9)   # Access(element=9, block=0, thread=1, iteration=1)

What it reproduces exactly: the index arithmetic of ``csrc/common/loop.h``
(``LABOPS_KERNEL_LOOP`` is CUDA_KERNEL_LOOP with a 64-bit index, and
``get_blocks`` with its 65535 cap). What it does not: threads here never run
at the same time, so there is no ``__syncthreads``, no shared memory and no
race; kernels whose threads talk to each other need a real GPU.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

__all__ = [
    "MAX_BLOCKS",
    "THREADS_PER_BLOCK",
    "WARP_SIZE",
    "Access",
    "Dim3",
    "ThreadContext",
    "Trace",
    "WatchedArray",
    "get_blocks",
    "kernel_loop",
    "launch",
    "loop_indices",
]

# The constants of csrc/common/loop.h (tests/test_simt.py reads that file to
# check they still agree).
THREADS_PER_BLOCK = 256
MAX_BLOCKS = 65535
WARP_SIZE = 32


def get_blocks(n: int, threads: int = THREADS_PER_BLOCK) -> int:
    """GET_BLOCKS: blocks of ``threads`` to give each of ``n`` elements a thread, capped at 65535.

    Past the cap, the grid-stride loop makes each thread handle several elements.

    Args:
        n: number of elements; threads: threads per block.

    Returns:
        int, the number of blocks (at least 1).

    Example:
        >>> get_blocks(1000), get_blocks(10**9)
        (4, 65535)
    """
    return max(1, min((n + threads - 1) // threads, MAX_BLOCKS))


@dataclass(frozen=True)
class Dim3:
    """CUDA's dim3: x, y, z sizes (or indices), 1 where unused.

    Example:
        >>> Dim3.of((4, 2)), Dim3.of((4, 2)).size
        (Dim3(x=4, y=2, z=1), 8)
    """

    x: int
    y: int = 1
    z: int = 1

    @classmethod
    def of(cls, value) -> "Dim3":
        """Accept an int, a tuple of 1 to 3 ints, or a Dim3."""
        if isinstance(value, Dim3):
            return value
        if isinstance(value, (int, np.integer)):
            value = (int(value),)
        value = tuple(int(v) for v in value)
        if not 1 <= len(value) <= 3 or any(v < 1 for v in value):
            raise ValueError(f"simt: a grid or block size must be 1 to 3 positive ints, got {value}")
        return cls(*value)

    @property
    def size(self) -> int:
        return self.x * self.y * self.z

    def linear(self, index: "Dim3") -> int:
        """Row-major rank of ``index`` inside this shape (x fastest), as CUDA numbers threads."""
        return index.x + self.x * (index.y + self.y * index.z)


@dataclass(frozen=True)
class Access:
    """One element touched by one thread: blocks and threads are linear ranks (x fastest).

    Example:
        >>> Access(element=5, block=1, thread=0, iteration=0)
        Access(element=5, block=1, thread=0, iteration=0)
    """

    element: int
    block: int
    thread: int
    iteration: int


@dataclass
class Trace:
    """Every element access of one launch, in the order the emulator ran them.

    Example:
        >>> trace = launch(lambda ctx, n: list(kernel_loop(ctx, n)), 1, 2, 3)
        >>> trace.owner(2).thread, trace.elements_of(0, 1)
        (0, [1])
    """

    grid: Dim3
    block: Dim3
    accesses: list[Access] = field(default_factory=list)

    @property
    def threads(self) -> int:
        """Threads in the whole launch (gridDim * blockDim)."""
        return self.grid.size * self.block.size

    def by_element(self) -> dict[int, list[Access]]:
        """element -> every access to it (more than one means two threads did the same work)."""
        out: dict[int, list[Access]] = {}
        for a in self.accesses:
            out.setdefault(a.element, []).append(a)
        return out

    def owner(self, element: int) -> Access:
        """The one access of ``element``; raises if it was touched zero or several times."""
        hits = self.by_element().get(element, [])
        if len(hits) != 1:
            raise LookupError(f"element {element} was touched {len(hits)} times")
        return hits[0]

    def elements_of(self, block: int, thread: int) -> list[int]:
        """The elements one thread handled, in loop order."""
        return [a.element for a in self.accesses if a.block == block and a.thread == thread]

    def arrays(self, n: int) -> dict[str, np.ndarray]:
        """Per element 0..n-1: block, thread, iteration (-1 where untouched) and touch count."""
        block = np.full(n, -1, dtype=np.int64)
        thread = np.full(n, -1, dtype=np.int64)
        iteration = np.full(n, -1, dtype=np.int64)
        count = np.zeros(n, dtype=np.int64)
        for a in self.accesses:
            if 0 <= a.element < n:
                block[a.element], thread[a.element], iteration[a.element] = a.block, a.thread, a.iteration
                count[a.element] += 1
        return {"block": block, "thread": thread, "iteration": iteration, "count": count}


class ThreadContext:
    """What a CUDA thread can see: blockIdx, threadIdx, blockDim, gridDim (each a Dim3).

    Example:
        >>> ctxs = []
        >>> _ = launch(lambda ctx: ctxs.append(ctx), 2, 2)
        >>> ctxs[3].block_rank, ctxs[3].thread_rank
        (1, 1)
    """

    def __init__(self, block_idx: Dim3, thread_idx: Dim3, block_dim: Dim3, grid_dim: Dim3, trace: Trace):
        self.blockIdx = block_idx
        self.threadIdx = thread_idx
        self.blockDim = block_dim
        self.gridDim = grid_dim
        self._trace = trace

    @property
    def block_rank(self) -> int:
        return self.gridDim.linear(self.blockIdx)

    @property
    def thread_rank(self) -> int:
        return self.blockDim.linear(self.threadIdx)

    @property
    def warp(self) -> int:
        """Warp of this thread within its block: 32 consecutive threads issue together."""
        return self.thread_rank // WARP_SIZE

    @property
    def lane(self) -> int:
        return self.thread_rank % WARP_SIZE

    def record(self, element: int, iteration: int) -> None:
        """Note that this thread handled ``element`` on trip ``iteration`` of its loop."""
        self._trace.accesses.append(Access(int(element), self.block_rank, self.thread_rank, int(iteration)))

    def __repr__(self):
        b, t = self.blockIdx, self.threadIdx
        return f"ThreadContext(blockIdx=({b.x}, {b.y}, {b.z}), threadIdx=({t.x}, {t.y}, {t.z}))"


def loop_indices(block_idx: int, thread_idx: int, block_dim: int, grid_dim: int, n: int,
                 index_bits: int = 64, max_iterations: int | None = None) -> list[int]:
    """The indices one thread's grid-stride loop visits, computed as C would.

    ``index_bits=64`` is LABOPS_KERNEL_LOOP (``int64_t i``). ``index_bits=32``
    is the original CUDA_KERNEL_LOOP with ``int i``: ``i += blockDim.x *
    gridDim.x`` wraps around past 2^31 - 1 to a negative number, which is
    still ``< n``, so the thread writes outside the tensor (and, when n is at
    least 2^31, never leaves the loop: ``max_iterations`` stops the
    emulation). Only the indices are computed; no array is allocated.

    Example:
        >>> loop_indices(block_idx=0, thread_idx=1, block_dim=4, grid_dim=2, n=20)
        [1, 9, 17]
    """
    if index_bits not in (32, 64):
        raise ValueError(f"simt.loop_indices: index_bits must be 32 or 64, got {index_bits}")
    stride = block_dim * grid_dim
    out = []
    if index_bits == 64:
        # static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x: no wrap-around.
        i = block_idx * block_dim + thread_idx
        while i < n and (max_iterations is None or len(out) < max_iterations):
            out.append(i)
            i += stride
        return out
    # int i = blockIdx.x * blockDim.x + threadIdx.x (unsigned 32-bit arithmetic, then cast to int);
    # i < n; i += stride  -- with int32 wrap-around (NumPy int32 arrays wrap silently).
    first = (block_idx * block_dim + thread_idx) % 2**32
    i = np.array([first], dtype=np.int64).astype(np.int32)
    step = np.array([stride], dtype=np.int64).astype(np.int32)
    while int(i[0]) < n and (max_iterations is None or len(out) < max_iterations):
        out.append(int(i[0]))
        i = i + step  # int32 + int32 stays int32: 2^31 - 1 + 1 == -2^31
    return out


def kernel_loop(ctx: ThreadContext, n: int) -> Iterator[int]:
    """LABOPS_KERNEL_LOOP(i, n) for the thread ``ctx``: yields i and records each access.

        for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)

    Like the macro, it uses only the x dimensions.

    Args:
        ctx: the thread's context (as ``launch`` passes it to a kernel).
        n: number of elements.

    Yields:
        the element indices this thread handles, recorded in the launch's trace.

    Example:
        >>> def scale(ctx, x, n):
        ...     for i in kernel_loop(ctx, n):
        ...         x[i] *= 2
        >>> x = np.ones(10)
        >>> trace = launch(scale, 2, 4, x, 10)
        >>> float(x.sum()), trace.elements_of(0, 0)
        (20.0, [0, 8])
    """
    for iteration, i in enumerate(loop_indices(ctx.blockIdx.x, ctx.threadIdx.x, ctx.blockDim.x,
                                               ctx.gridDim.x, n)):
        ctx.record(i, iteration)
        yield i


class WatchedArray:
    """A 1-D NumPy array that records which thread wrote each element.

    Pass it to ``launch`` in place of an output array; afterwards ``writes``
    is a Trace of the writes (``iteration`` counts a thread's own writes), so
    ``viz.thread_map(a.writes, n)`` shows elements never written or written
    twice. Reads are plain. A write outside ``0 <= i < len`` raises
    IndexError naming the thread: NumPy would quietly wrap a negative index.

    Example:
        >>> def body(ctx, y, n):  # one element per thread, no loop: the classic bug
        ...     i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
        ...     if i < n:
        ...         y[i] = 1.0
        >>> y = WatchedArray(np.zeros(10))
        >>> _ = launch(body, 2, 4, y, 10)
        >>> sorted(set(range(10)) - set(y.writes.by_element()))  # never written
        [8, 9]
    """

    def __init__(self, data):
        self.data = np.asarray(data)
        if self.data.ndim != 1:
            raise ValueError(f"simt.WatchedArray: expects a 1-D array, got shape {self.data.shape}")
        self.writes: Trace | None = None
        self._ctx: ThreadContext | None = None
        self._count: dict[tuple[int, int], int] = {}

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]

    def __setitem__(self, i, value):
        ctx = self._ctx
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"simt.WatchedArray: write one element at an integer index, got {i!r}")
        if not 0 <= i < len(self.data):
            who = f" by block {ctx.block_rank}, thread {ctx.thread_rank}" if ctx else ""
            raise IndexError(f"write to element {int(i)} of an array of {len(self.data)}{who}")
        if ctx is not None:
            key = (ctx.block_rank, ctx.thread_rank)
            self.writes.accesses.append(Access(int(i), key[0], key[1], self._count.get(key, 0)))
            self._count[key] = self._count.get(key, 0) + 1
        self.data[i] = value


def launch(kernel: Callable, grid, block, *args, **kwargs) -> Trace:
    """Run ``kernel(ctx, *args, **kwargs)`` for every thread of a grid; return the trace.

    ``grid`` and ``block`` are ints or tuples of up to three ints, as in
    ``kernel<<<grid, block>>>(args)``. Blocks run in order of their linear
    rank and, inside a block, threads in order of theirs (x fastest); a real
    GPU runs them concurrently and in no fixed order. Every ``WatchedArray``
    argument records the writes of this launch in its ``writes`` trace.
    """
    grid, block = Dim3.of(grid), Dim3.of(block)
    if block.size > 1024:
        raise ValueError(f"simt.launch: a block has at most 1024 threads, got {block.size}")
    trace = Trace(grid, block)
    watched = [a for a in (*args, *kwargs.values()) if isinstance(a, WatchedArray)]
    for a in watched:
        a.writes, a._count = Trace(grid, block), {}
    for bz, by, bx in itertools.product(range(grid.z), range(grid.y), range(grid.x)):
        for tz, ty, tx in itertools.product(range(block.z), range(block.y), range(block.x)):
            ctx = ThreadContext(Dim3(bx, by, bz), Dim3(tx, ty, tz), block, grid, trace)
            for a in watched:
                a._ctx = ctx
            kernel(ctx, *args, **kwargs)
    for a in watched:
        a._ctx = None
    return trace
