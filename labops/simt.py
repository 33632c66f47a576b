"""What a CUDA launch does with its indices, as data: the grid, and which thread touched which element.

A CUDA kernel is one function that the GPU runs once per thread. Threads come in blocks (``blockDim``
threads each) and blocks in a grid (``gridDim`` blocks). The kernels themselves run in ``labops.rtc``, from
the same CUDA C body on a GPU and on the CPU; on the CPU, ``record=True`` logs every access to a tensor and
returns a ``Recording``, whose ``Trace`` per tensor says which thread touched which element, on its how-many-th
access (``viz.thread_map`` draws one)::

    loop = rtc.kernel("touch", [], ["y"], "for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                      "i < y_numel; i += (long long)blockDim.x * gridDim.x) y[i] = 1.0f;")
    trace = loop(torch.zeros(20), grid=2, block=4, record=True).writes["y"]
    trace.owner(9)   # Access(element=9, block=0, thread=1, iteration=1)

This module also holds the index arithmetic of ``csrc/common/loop.h`` in Python: ``get_blocks`` with its
65535 cap, and ``loop_indices``, the indices one thread's grid-stride loop visits with a 64-bit or a 32-bit
index, computed without running anything (the 32-bit loop goes wrong only past 2^31 elements).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["MAX_BLOCKS", "THREADS_PER_BLOCK", "WARP_SIZE", "Access", "Dim3", "Recording", "Trace", "get_blocks",
           "loop_indices"]

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
    """The accesses of one launch to one tensor (reads or writes), in the order the threads made them.

    ``iteration`` counts a thread's own accesses: in a grid-stride loop that writes once per trip, it is the trip.

    Example:
        >>> trace = Trace(Dim3(1), Dim3(2), [Access(0, 0, 0, 0), Access(1, 0, 1, 0), Access(2, 0, 0, 1)])
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


def loop_indices(block_idx: int, thread_idx: int, block_dim: int, grid_dim: int, n: int,
                 index_bits: int = 64, max_iterations: int | None = None) -> list[int]:
    """The indices one thread's grid-stride loop visits, computed as C would.

    ``index_bits=64`` is LABOPS_KERNEL_LOOP (``int64_t i``). ``index_bits=32``
    is the original CUDA_KERNEL_LOOP with ``int i``: ``i += blockDim.x *
    gridDim.x`` wraps around past 2^31 - 1 to a negative number, which is
    still ``< n``, so the thread writes outside the tensor (and, when n is at
    least 2^31, never leaves the loop: ``max_iterations`` stops the
    computation). Only the indices are computed; no array is allocated.

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


class Recording:
    """The access log of one recorded ``labops.rtc`` launch (``k(..., record=True)``), per tensor.

    ``reads[name]`` and ``writes[name]`` are a ``Trace`` for every tensor of the kernel (empty if untouched);
    ``log`` is the raw log, one row per access in the order made: tensor number, element, global thread
    (``block * threads_per_block + thread``, blocks and threads as linear ranks, x fastest), 1 for a write.
    An atomic counts as a write.

    Example:
        >>> rec = Recording(Dim3(2), Dim3(2), ("x", "y"), np.array([[0, 3, 3, 0], [1, 3, 3, 1]]))
        >>> rec.reads["x"].owner(3), rec.writes["y"].elements_of(1, 1)
        (Access(element=3, block=1, thread=1, iteration=0), [3])
    """

    def __init__(self, grid: Dim3, block: Dim3, names, log: np.ndarray):
        self.grid, self.block, self.names = grid, block, tuple(names)
        self.log = np.asarray(log, dtype=np.int64).reshape(-1, 4)
        self.reads = {name: self._trace(k, 0) for k, name in enumerate(self.names)}
        self.writes = {name: self._trace(k, 1) for k, name in enumerate(self.names)}

    def _trace(self, tensor: int, write: int) -> Trace:
        rows = self.log[(self.log[:, 0] == tensor) & (self.log[:, 3] == write)]
        thread = rows[:, 2]
        # iteration: how many accesses of this kind to this tensor the same thread made before this one
        order = np.argsort(thread, kind="stable")
        ranks = np.empty(len(rows), dtype=np.int64)
        sorted_threads = thread[order]
        starts = np.r_[0, np.flatnonzero(np.diff(sorted_threads)) + 1] if len(rows) else np.zeros(0, np.int64)
        run_start = np.repeat(starts, np.diff(np.r_[starts, len(rows)]))
        ranks[order] = np.arange(len(rows)) - run_start
        per_block = self.block.size
        return Trace(self.grid, self.block,
                     [Access(int(e), int(g) // per_block, int(g) % per_block, int(i))
                      for e, g, i in zip(rows[:, 1], thread, ranks)])

    def __repr__(self):
        counts = ", ".join(f"{n}: {len(self.reads[n].accesses)} reads, {len(self.writes[n].accesses)} writes"
                           for n in self.names)
        return f"Recording(grid={self.grid}, block={self.block}; {counts})"
