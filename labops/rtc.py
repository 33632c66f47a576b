"""CUDA-style kernels written as Python strings, compiled at run time (in the spirit of MXNet's ``mx.rtc``).

A kernel is a name, the names of its input and output tensors, and a *body*: the statements inside the
braces of a CUDA ``__global__`` function. The body sees, for each tensor name ``x``:

* ``x``: a pointer to its first element (``const`` for inputs), of the tensor's element type (on the CPU,
  a pointer that checks every index: see below);
* ``x_type``: that element type (``float``, ``double``, ``__half``, ``int``, ``long long``);
* ``x_ndim`` (``int``), ``x_dims[]`` (``long long``, ``x_dims[0]`` is ``x.shape[0]``) and ``x_numel``;

and ``blockIdx``, ``threadIdx``, ``blockDim``, ``gridDim`` with ``.x/.y/.z``, as in CUDA. Tensors must be
contiguous: the body indexes them as dense row-major arrays.

* **CUDA**: the body becomes an ``extern "C" __global__`` function, compiled by NVRTC through NVIDIA's
  ``cuda-core`` package (``pip install labops[gpu]``) for this GPU's architecture and launched on
  PyTorch's current stream.
* **CPU**: the same body becomes a plain C++ function compiled by the host compiler (``c++``, no torch
  headers: about a second) into a small shared library, with CUDA's execution model from ``rtc_cpu.h``
  beside this file. Blocks run one after another. The threads of a block run as *fibers* on one core: each
  runs until it waits (``__syncthreads``, ``__syncwarp``, a warp shuffle or vote), then the next one runs,
  and once all wait they go on together. So ``__shared__`` arrays (static, or ``extern __shared__`` sized
  by ``shared_mem=``), barriers, ``__shfl_sync``/``_xor``/``_down``/``_up``, ``__ballot_sync``,
  ``__syncthreads_count``, atomics (``atomicAdd``, ``atomicMax``, ``atomicCAS``, ...) and ``__half``
  (float16 tensors; converted as ``cuda_fp16.h`` does, arithmetic through float) behave as on a GPU. A body that never waits runs each thread to its end before the next starts, without fibers.

A mistake in a body must not take Python down, so on the CPU each launch runs in a small process of its
own, on copies of the tensors (the outputs are copied back when it went right). It also reports what a GPU
never tells you, each as an exception naming the array, the index and the threads (all are
``KernelBugError``; the launch stops at the first):

* **A data race** (``DataRaceError``): two threads touched one element of a ``__shared__`` array or an
  output with nothing ordering them (no barrier between, or different blocks), one of them writing: a
  missing ``__syncthreads``, or a plain ``+=`` where an ``atomicAdd`` is needed. Every access is recorded
  (who, and after how many barriers), so the race is found whatever order the threads ran in.
* **A barrier not every thread reaches** (``BarrierDivergenceError``): a ``__syncthreads`` inside a branch
  some threads skip, or after some threads returned; on a GPU it hangs or gives garbage.
* **A read of shared memory that no thread wrote** (``UninitializedReadError``): each block's shared
  memory starts as garbage on a GPU; here it starts unwritten, and holds NaN (or -1) bits.
* **An index outside a tensor** (past its end, far past it, or negative) never touches memory: the name
  ``x`` checks every index (a ``__shared__`` array checks each dimension's). The launch stops there and
  raises ``OutOfBoundsError`` (an ``IndexError``) that names the kernel, the tensor, the index, the valid
  range, the thread, and whether it was a read or a write. ``x + i`` is checked the same way; a plain
  pointer made from it (``const float* row = x + i``) is not: just past the tensor's end it meets a guard
  page and raises the same error, further off it may crash the launch's process (``KernelCrashError``,
  naming the signal) or land in another tensor unnoticed.
* **An endless loop** is killed after ``CPU_TIME_LIMIT_S`` seconds (30, or ``$LABOPS_RTC_CPU_TIME_LIMIT_S``
  read at import; a launch can pass ``time_limit_s=``) with a ``TimeoutError``; Ctrl-C kills it at once
  and raises ``KeyboardInterrupt``.

**Recording what each thread did** (``record=True``, CPU only): the launch also logs every read and write of a
tensor, in the order the threads made them, and returns a ``labops.simt.Recording``: ``rec.writes["y"]`` is a
``simt.Trace`` of which thread wrote which element of ``y`` (``viz.thread_map`` draws it), ``rec.reads["x"]``
the same for reads. Indices are checked as always; races on tensors are not (an element written twice shows
in the record instead), so a wrong loop can still be drawn. At most ``RECORD_LIMIT`` accesses are kept.

After any of these the outputs keep their old values and no process is left behind. The price is a
process start and a copy of every tensor per launch. **On a GPU nothing is checked**: an out-of-bounds
access may read or write another tensor's memory unnoticed, or stop the kernel with an illegal-address
error, which poisons the CUDA context: every later CUDA call in the process fails, and only a new process
(for a notebook, a restarted kernel) can use the GPU again.

Example (CPU: one thread too many reads one element past ``x``)::

    >>> off_by_one = kernel("off_by_one", ["x"], ["y"], "y[threadIdx.x] = 2 * x[threadIdx.x];")
    >>> off_by_one(torch.ones(4), torch.empty(4), grid=1, block=5)
    Traceback (most recent call last):
        ...
    labops.rtc.OutOfBoundsError: labops.rtc: kernel 'off_by_one' read x[4], but x has 4 elements (valid 0..3) (thread (4, 0, 0) of block (0, 0, 0))

Compiled code is cached per (source, dtypes, device): in this process, and for the CPU also on disk
under labops's cache directory. ``cache_info()`` counts compiles and cache hits.

Layers written with this module (write-up 004's softmax, cross-entropy and reorg, course notebook 11)
are in ``labops.rtc_layers``.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import mmap
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "BarrierDivergenceError", "CPU_TIME_LIMIT_S", "CompileError", "DataRaceError", "GpuOnlyError", "Kernel",
    "KernelBugError", "KernelCrashError", "MAX_DIMS", "OutOfBoundsError", "RECORD_LIMIT", "SharedArray",
    "UninitializedReadError",
    "cache_info", "clear_cache", "cpu_source", "cuda_source", "gpu_only_features", "kernel", "shared_arrays",
]

MAX_DIMS = 8  # x_dims has this many slots; tensors of higher rank are refused
RECORD_LIMIT = 1 << 18  # accesses a recorded launch (record=True) keeps: 8 MiB of log

# dtype -> (C type on CUDA, C type on the CPU, or None when the CPU cannot run it)
_DTYPES = {
    torch.float32: ("float", "float"),
    torch.float64: ("double", "double"),
    torch.float16: ("__half", "__half"),
    torch.int32: ("int", "int"),
    torch.int64: ("long long", "long long"),
}
_SUPPORTED = ", ".join(str(d).replace("torch.", "") for d in _DTYPES)

# Features that need the threads of a block (or a warp) to run at the same time, or to race.
_GPU_ONLY = re.compile(r"\b(__match\w*_sync|__reduce\w*_sync|cooperative_groups|__nanosleep|clock64|__half2)\b")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = {"blockIdx", "threadIdx", "blockDim", "gridDim", "warpSize", "dim3", "uint3", "INFINITY", "NAN",
             "min", "max", "abs", "exp", "log", "sqrt", "pow"}
# Launch limits of every CUDA GPU since compute capability 3.0; the CPU path enforces them too, so a
# launch that runs on the CPU also runs on a GPU.
_MAX_BLOCK = (1024, 1024, 64)
_MAX_THREADS_PER_BLOCK = 1024
_MAX_GRID = (2**31 - 1, 65535, 65535)
_MAX_DYNAMIC_SHARED = 48 * 1024


def _time_limit_from_environment(default):
    text = os.environ.get("LABOPS_RTC_CPU_TIME_LIMIT_S")
    if text is None:
        return default
    try:
        return _check_time_limit(float(text), "$LABOPS_RTC_CPU_TIME_LIMIT_S")
    except ValueError:
        raise ValueError(f"labops.rtc: $LABOPS_RTC_CPU_TIME_LIMIT_S must be a number of seconds > 0 (inf for no "
                         f"limit), got {text!r}") from None


def _check_time_limit(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"labops.rtc: {what} must be a number of seconds > 0 (math.inf for no limit), "
                         f"got {value!r}")
    return float(value)


# Seconds a CPU launch may run before it is stopped with a TimeoutError (an endless loop); a launch can pass
# its own time_limit_s. $LABOPS_RTC_CPU_TIME_LIMIT_S, read at import, replaces the default.
CPU_TIME_LIMIT_S = _time_limit_from_environment(30.0)


class CompileError(RuntimeError):
    """The compiler rejected a kernel. ``log`` is its message; line numbers are those of the body."""

    def __init__(self, message: str, log: str, source: str):
        super().__init__(message)
        self.log = log
        self.source = source


class GpuOnlyError(RuntimeError):
    """The body uses a feature that only a GPU can run (threads of a block running together)."""


class KernelBugError(RuntimeError):
    """A bug the CPU path found in a kernel while it ran: the launch stopped there and its outputs were not
    written. ``kernel`` names it. The subclasses say which bug; on a GPU each of them goes unreported."""

    def __init__(self, message, *, kernel):
        super().__init__(message)
        self.kernel = kernel


class OutOfBoundsError(IndexError, KernelBugError):
    """A CPU launch read or wrote an element outside a tensor or a ``__shared__`` array. The access never
    reached memory (or stopped at the guard page after the tensor). ``tensor`` (the tensor's or the shared
    array's name in the kernel), ``index`` (flat), ``numel`` and ``access`` ("read", "wrote", or "read or
    wrote" where the CPU does not say) describe the first such access."""

    def __init__(self, message, *, kernel, tensor, index, numel, access):
        IndexError.__init__(self, message)
        self.kernel, self.tensor, self.index, self.numel, self.access = kernel, tensor, index, numel, access


class DataRaceError(KernelBugError):
    """Two threads touched one element of a ``__shared__`` array or an output with nothing ordering them,
    at least one with a plain write: on a GPU the result depends on timing. ``array``, ``index`` (flat),
    ``kind`` ("read before the write", "write after read", "two writes"), ``threads`` (global thread indices
    block * threads per block + thread, the first None when several threads had read) and ``shared``."""

    def __init__(self, message, *, kernel, array, index, kind, threads, shared):
        super().__init__(message, kernel=kernel)
        self.array, self.index, self.kind, self.threads, self.shared = array, index, kind, threads, shared


class BarrierDivergenceError(KernelBugError):
    """A ``__syncthreads()`` (or a warp shuffle or ``__syncwarp``) that not every thread reached: some
    finished, or wait at another one. ``line`` is its line in the body; ``other_line`` where the other
    thread waits (None: it finished)."""

    def __init__(self, message, *, kernel, line, other_line):
        super().__init__(message, kernel=kernel)
        self.line, self.other_line = line, other_line


class UninitializedReadError(KernelBugError):
    """A read of a ``__shared__`` element that no thread of the block had written (shared memory starts as
    garbage in every block). ``array`` and ``index`` (flat)."""

    def __init__(self, message, *, kernel, array, index):
        super().__init__(message, kernel=kernel)
        self.array, self.index = array, index


class KernelCrashError(RuntimeError):
    """The process that ran a CPU launch ended before every thread had run. ``signal`` is the signal that
    ended it (a number such as ``signal.SIGSEGV``; the body's ``abort()`` is ``SIGABRT``), or None when the
    body called ``exit``. Python goes on; the outputs were not written."""

    def __init__(self, message, signal_number):
        super().__init__(message)
        self.signal = signal_number


_stats = {"compiles": 0, "disk_loads": 0, "memory_hits": 0}
_compiled: dict = {}  # (source hash, dtypes, device) -> a launcher
_lock = threading.Lock()


def cache_info() -> dict:
    """Counts since the process started: ``compiles`` (compiler runs), ``disk_loads`` (CPU libraries
    found on disk), ``memory_hits`` (launches that found their code in this process).

    Example::

        >>> sorted(cache_info())
        ['compiles', 'disk_loads', 'memory_hits']
    """
    return dict(_stats)


def clear_cache() -> None:
    """Forget the compiled code held in this process (the CPU libraries on disk stay).

    Example::

        >>> clear_cache()   # the next launch loads from disk (CPU) or recompiles (CUDA)
    """
    with _lock:
        _compiled.clear()


# ---------------------------------------------------------------------------------------------------------
# Source generation (pure Python: testable without a compiler or a GPU)
# ---------------------------------------------------------------------------------------------------------

# A comment or a string or character literal of a body: names inside one are not uses.
_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', re.S)


def _strip_comments_and_strings(body: str) -> str:
    return _COMMENT_OR_STRING.sub(" ", body)


def _in_comment_or_string(body: str):
    """A test of a position of ``body``: is it inside a comment or a string?"""
    spans = [m.span() for m in _COMMENT_OR_STRING.finditer(body)]
    return lambda position: any(a <= position < b for a, b in spans)


def gpu_only_features(body: str) -> list[str]:
    """The names a body uses that only a GPU runs (comments and strings ignored), in order of first use.

    Example::

        >>> gpu_only_features("__shared__ float s[32]; __syncthreads(); namespace cg = cooperative_groups;")
        ['cooperative_groups']
    """
    found = []
    for m in _GPU_ONLY.finditer(_strip_comments_and_strings(body)):
        if m.group(1) not in found:
            found.append(m.group(1))
    return found


def _check_names(name, inputs, outputs, body):
    if not isinstance(name, str) or not _IDENTIFIER.match(name) or name.startswith("__") or \
            name.startswith("labops_rtc"):
        raise ValueError(f"labops.rtc.kernel: name must be a C identifier (letters, digits, _; not starting "
                         f"with a digit, '__' or 'labops_rtc'), got {name!r}")
    for arg, names in (("inputs", inputs), ("outputs", outputs)):
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise TypeError(f"labops.rtc.kernel: {arg} must be a list of tensor names, got {type(names).__name__}")
        for n in names:
            if not isinstance(n, str) or not _IDENTIFIER.match(n) or n.startswith("__") or n in _RESERVED:
                raise ValueError(f"labops.rtc.kernel: every name in {arg} must be a C identifier that is not "
                                 f"reserved ({', '.join(sorted(_RESERVED))}), got {n!r}")
    if len(outputs) == 0:
        raise ValueError("labops.rtc.kernel: outputs must name at least one tensor (the kernel's result)")
    generated = {}
    for n in list(inputs) + list(outputs):
        for g in (n, f"{n}_ndim", f"{n}_dims", f"{n}_numel", f"{n}_type", f"{n}_rank",
                  *(f"{n}_d{i}" for i in range(MAX_DIMS))):
            if g in generated:
                raise ValueError(f"labops.rtc.kernel: tensor names must be distinct, and a name must not equal "
                                 f"another's generated names ({n!r} clashes with {generated[g]!r} on {g!r})")
            generated[g] = n
    if not isinstance(body, str) or not body.strip():
        raise ValueError("labops.rtc.kernel: body must be a non-empty string of C++ statements")


# What a CPU launch hands back to Python, in memory shared by Python, the runner process and the kernel
# library. The same text goes into both C++ sources; _Report below is its ctypes twin (keep them in step).
_REPORT_STRUCT = r"""namespace labops_rtc {
struct report {
  long long finished;         // 1 once every thread has run
  long long fault_signal;     // SIGSEGV or SIGBUS caught by the runner, or 0
  long long fault_offset;     //   the faulting address, in bytes from the shared region's start (-1: outside)
  long long fault_write;      //   1 for a write, 0 for a read, -1 when the CPU does not say
  long long bug_kind;         // the first bug found (rtc_cpu.h's bug_kind), or 0
  long long bug_index;        //   the element (flat index), or the other thread's line for a divergence
  long long bug_extent;       //   the array's size, or the shared bytes for too_much_shared
  long long bug_write;        //   out of bounds: 1 a write, 0 a read; data race: 1 for a __shared__ array
  long long bug_line;         //   the barrier's line
  long long bug_race;         //   the kind of race (rtc_cpu.h's race_kind); divergence: 1 for a warp op
  long long bug_thread_a;     //   global thread indices (block * threads per block + thread): the first
  long long bug_thread_b;     //   access (or the waiting thread) and the second (or the one elsewhere)
  long long bug_depth;        //   the indices of a __shared__ array's element, one per dimension
  long long bug_indices[4];
  char bug_array[64];         //   the tensor or __shared__ array
  char error[256];            // why the runner could not run the launch
};
}  // namespace labops_rtc
"""

# CUDA's execution model for the CPU path: fibers, __shared__ arrays, barriers, shuffles, atomics, and the
# checks (rtc_cpu.h). LABOPS_RTC_FIBERS is 0 for a body without barriers or warp ops: each thread then runs
# to its end before the next, with no fiber to switch.
_CPU_RUNTIME = (Path(__file__).with_name("rtc_cpu.h")).read_text()

_CUDA_PRELUDE = r"""// Generated by labops.rtc for NVRTC.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
"""


def _tensors(inputs, outputs, dtypes, device_type):
    """Each tensor of a kernel, inputs first, as (name, C element type) for that device."""
    column = 0 if device_type == "cuda" else 1
    return [(n, _DTYPES[d][column]) for n, d in zip(list(inputs) + list(outputs), dtypes)]


# `__shared__ float tile[16][17];`, `extern __shared__ float s[];`, `__shared__ float a[4], b;` (with
# `static`, `volatile` or `__align__(n)` around): one declaration, up to its semicolon.
_SHARED_DECLARATION = re.compile(r"(?P<extern>\bextern\s+)?(?:\bstatic\s+)?\b__shared__\b(?P<declarators>[^;{}]*);")
_DECLARATOR = re.compile(r"^\s*(?P<type>.*?\S)?\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$", re.S)
_QUALIFIERS = re.compile(r"\b(?:volatile|static|__align__\s*\([^)]*\)|alignas\s*\([^)]*\))\s*")


@dataclass(frozen=True)
class SharedArray:
    """A ``__shared__`` declaration of a body: its ``name``, element ``type``, ``dims`` (the bracketed
    sizes as written; ``[]`` for ``extern``, none for a scalar) and whether it is ``extern``."""

    name: str
    type: str
    dims: tuple
    extern: bool


def _split_top_level(text, separator=","):
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += c in "([{<"
        depth -= c in ")]}>"
        if c == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def shared_arrays(body: str) -> list[SharedArray]:
    """The ``__shared__`` declarations of a body (comments and strings ignored), in order.

    Example::

        >>> [(a.name, a.type, a.dims) for a in shared_arrays("__shared__ float tile[16][16 + 1], total;")]
        [('tile', 'float', ('16', '16 + 1')), ('total', 'float', ())]
    """
    return [array for _, array in _shared_declarations(body)]


def _shared_declarations(body):
    """((start, end) of each declaration in ``body``, SharedArray) for every declarator."""
    ignored = _in_comment_or_string(body)
    found = []
    for m in _SHARED_DECLARATION.finditer(body):
        if ignored(m.start()):
            continue
        declarators = _split_top_level(m.group("declarators"))
        element_type = None
        for k, text in enumerate(declarators):
            text = _QUALIFIERS.sub("", text)
            d = _DECLARATOR.match(text)
            if d is None or (k == 0) != (d.group("type") is not None) or "*" in text or "&" in text:
                raise CompileError(f"labops.rtc: cannot read the __shared__ declaration {m.group(0).strip()!r}: "
                                   f"write it as `__shared__ float name[SIZE];` (sizes known when compiling; "
                                   f"no pointers)", "", body)
            if k == 0:
                element_type = " ".join(d.group("type").split())
            dims = tuple(x.strip() for x in re.findall(r"\[([^\]]*)\]", d.group("dims")))
            extern = bool(m.group("extern"))
            if extern != (dims == ("",)) or (not extern and "" in dims):
                raise CompileError(f"labops.rtc: in {m.group(0).strip()!r}: an `extern __shared__` array is "
                                   f"declared with empty brackets (`extern __shared__ float s[];`, sized by "
                                   f"shared_mem= at launch), every other __shared__ array with a size in each "
                                   f"bracket", "", body)
            found.append((m.span(), SharedArray(d.group("name"), element_type, dims, extern)))
    return found


def _rewrite_shared(body, device="cpu", first_name=0):
    """The body with each __shared__ declaration replaced by a checked array (rtc_cpu.h on the CPU,
    rtc_cuda_checked.h on a GPU) and a view of it under the same name, on the same line, so that line
    numbers stay the body's. ``first_name``: the number of the first array in the report's list of names."""
    pieces, last = [], 0
    spans = {}
    for span, array in _shared_declarations(body):
        spans.setdefault(span, []).append(array)
    number = first_name
    for k, (span, arrays) in enumerate(spans.items()):
        statements = []
        for j, a in enumerate(arrays):
            storage = f"labops_rtc_shared_{k}_{j}"
            if a.extern and device == "cuda":
                statements.append(
                    f"extern __shared__ {a.type} {storage}[]; __shared__ labops_rtc::array_info {storage}_info; "
                    f"auto {a.name} = labops_rtc::enter_dynamic(labops_rtc_context, {storage}, {number}, "
                    f"labops_rtc_dynamic_marks, labops_rtc_dynamic_bytes, {storage}_info);")
            else:
                if a.extern:
                    kind = f"labops_rtc::dynamic_shared<{a.type}>"
                elif not a.dims:
                    kind = f"labops_rtc::shared_scalar<{a.type}>"
                else:
                    kind = f"labops_rtc::shared_array<{a.type}, " + ", ".join(f"({d})" for d in a.dims) + ">"
                if device == "cuda":
                    statements.append(f"__shared__ {kind} {storage}; "
                                      f"auto {a.name} = {storage}.enter(labops_rtc_context, {number});")
                else:
                    statements.append(f'static {kind} {storage}("{a.name}"); auto {a.name} = {storage}.enter();')
            number += 1
        pieces += [body[last:span[0]], " ".join(statements)]
        last = span[1]
    return "".join(pieces) + body[last:]


_BARRIER_CALL = re.compile(r"\b__syncthreads(_count|_and|_or)?\s*\(")


def _number_barriers(body):
    """Each __syncthreads call gets its own number (NVRTC has no __COUNTER__): ``__syncthreads()`` becomes
    ``labops_rtc_syncthreads_at(3)``, ``__syncthreads_count(p)`` ``labops_rtc_syncthreads_count_at(4, p)``.
    Two barriers on one line are then told apart."""
    ignored = _in_comment_or_string(body)
    pieces, last, site = [], 0, 0
    for m in _BARRIER_CALL.finditer(body):
        if ignored(m.start()):
            continue
        suffix = m.group(1) or ""
        empty = re.match(r"\s*\)", body[m.end():]) is not None
        pieces += [body[last:m.start()], f"labops_rtc_syncthreads{suffix}_at({site}" + ("" if empty and not suffix
                                                                                     else ", ")]
        last = m.end()
        site += 1
    return "".join(pieces) + body[last:]


# A body that never waits for another thread runs each thread to its end, without fibers.
_WAITS = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*_sync|__ballot_sync|__any_sync|__all_sync)\b")


def cpu_source(name, inputs, outputs, body, dtypes) -> str:
    """The C++ file the CPU path compiles for these dtypes (one per tensor, inputs first).

    Example::

        >>> source = cpu_source("copy", ["x"], ["y"], "y[0] = x[0];", [torch.float32] * 2)
        >>> '#line 1 "copy"' in source, "launch_grid" in source
        (True, True)
    """
    tensors = _tensors(inputs, outputs, dtypes, "cpu")
    params, unpack, args = [], [], []
    for k, (n, t) in enumerate(tensors):
        const = "const " if k < len(inputs) else ""
        params.append(f"labops_rtc::checked_ptr<{const}{t}> {n}, const int {n}_ndim, const long long* {n}_dims, "
                      f"const long long {n}_numel")
        marks = (f"static_cast<labops_rtc::shadow*>(calloc(numels[{k}] ? numels[{k}] : 1, "
                 f"sizeof(labops_rtc::shadow)))" if k >= len(inputs) else "nullptr")
        unpack.append(f'  static labops_rtc::array_info {n}_info = {{"{n}", numels[{k}], {marks}, false, {k}}};\n'
                      f"  labops_rtc::checked_ptr<{const}{t}> {n}(ptrs[{k}], &{n}_info);")
        args.append(f"{n}, ndims[{k}], dims + {k * MAX_DIMS}, numels[{k}]")
    typedefs = "".join(f"  typedef {t} {n}_type;\n" for n, t in tensors)
    silence = "".join(f"  (void){n}; (void){n}_ndim; (void){n}_dims; (void){n}_numel;\n" for n, _ in tensors)
    thread_params = ",\n    ".join(["const uint3 blockIdx, const uint3 threadIdx, const dim3 blockDim, "
                                    "const dim3 gridDim"] + params)
    launch_args = ", ".join(["block, thread, blockDim, gridDim"] + args)
    fibers = 1 if _WAITS.search(_strip_comments_and_strings(body)) else 0
    return (
        f"// Generated by labops.rtc for the CPU.\n#define LABOPS_RTC_FIBERS {fibers}\n"
        f"{_REPORT_STRUCT}{_CPU_RUNTIME}\n"
        f"static inline void labops_rtc_thread(\n    {thread_params}) {{\n{typedefs}{silence}"
        f"  (void)blockIdx; (void)threadIdx; (void)blockDim; (void)gridDim;\n"
        f'#line 1 "{name}"\n{_number_barriers(_rewrite_shared(body))}\n}}\n\n'
        f'extern "C" void labops_rtc_launch(void* const* ptrs, const int* ndims, const long long* dims,\n'
        f"                                  const long long* numels, const unsigned int* config,\n"
        f"                                  labops_rtc::report* labops_rtc_report) {{\n"
        f"  labops_rtc::shared_report = labops_rtc_report;\n"
        + "\n".join(unpack) + "\n"
        f"  const dim3 gridDim = {{config[0], config[1], config[2]}};\n"
        f"  const dim3 blockDim = {{config[3], config[4], config[5]}};\n"
        f"  if (config[7]) {{  // record=True: the access log is one more tensor, after the kernel's own\n"
        f"    labops_rtc::access_log = static_cast<long long*>(ptrs[{len(tensors)}]);\n"
        f"    labops_rtc::access_log_capacity = (numels[{len(tensors)}] - 1) / 4;\n"
        f"  }}\n"
        f"  auto body = [&](uint3 block, uint3 thread) {{ labops_rtc_thread({launch_args}); }};\n"
        f"  labops_rtc::launch_grid(gridDim, blockDim, config[6], body);\n"
        f"}}\n"
    )


_CUDA_CHECKED_RUNTIME = (Path(__file__).with_name("rtc_cuda_checked.h")).read_text()


def cuda_source(name, inputs, outputs, body, dtypes, checked=False) -> str:
    """The CUDA C++ source NVRTC compiles for these dtypes (one per tensor, inputs first).

    Each tensor ``x`` becomes the kernel parameters ``x`` (pointer), ``x_rank``, ``x_d0 ... x_d7`` and
    ``x_numel``, all 64-bit so that the launch passes plain Python ints (cuda.core's fastest argument);
    ``x_ndim`` and the array ``x_dims`` are locals made from them. ``checked``: the source of a checked
    launch (rtc_cuda_checked.h): ``x`` is then a checked proxy made from the pointer, and the parameters
    end with each output's marks, the report, and the marks and bytes of dynamic shared memory.

    Example::

        >>> source = cuda_source("copy", ["x"], ["y"], "y[0] = x[0];", [torch.float32] * 2)
        >>> '#line 1 "copy"' in source, "__global__" in source
        (True, True)
    """
    tensors = _tensors(inputs, outputs, dtypes, "cuda")
    params, locals_ = [], []
    for k, (n, t) in enumerate(tensors):
        const = "const " if k < len(inputs) else ""
        dims = ", ".join(f"long long {n}_d{i}" for i in range(MAX_DIMS))
        pointer = f"labops_rtc_{n}" if checked else n
        params.append(f"{const}{t}* {pointer}, long long {n}_rank, {dims}, long long {n}_numel")
        locals_.append(f"  const int {n}_ndim = (int){n}_rank;\n"
                       f"  const long long {n}_dims[{MAX_DIMS}] = {{"
                       + ", ".join(f"{n}_d{i}" for i in range(MAX_DIMS)) + "};\n"
                       f"  typedef {t} {n}_type;\n")
        if checked:
            marks = f"labops_rtc_{n}_marks" if k >= len(inputs) else "nullptr"
            locals_.append(f"  const labops_rtc::array_info {n}_info = {{{k}, {n}_numel, {marks}, false}};\n"
                           f"  const labops_rtc::checked_ptr<{const}{t}> {n}({pointer}, &{n}_info, &labops_rtc_context);\n")
        locals_.append(f"  (void){n}; (void){n}_ndim; (void){n}_dims; (void){n}_numel;\n")
    include = "#include <cuda_fp16.h>\n" if torch.float16 in dtypes else ""
    if not checked:
        return (f"{_CUDA_PRELUDE}{include}\n"
                f'extern "C" __global__ void {name}(\n    ' + ",\n    ".join(params) + ") {\n"
                + "".join(locals_) + f'#line 1 "{name}"\n{body}\n}}\n')
    params += [f"labops_rtc::shadow* labops_rtc_{n}_marks" for n in outputs]
    params += ["labops_rtc::report* labops_rtc_report", "labops_rtc::shadow* labops_rtc_dynamic_marks",
               "long long labops_rtc_dynamic_bytes"]
    context = ("  labops_rtc::thread_context labops_rtc_context;\n"
               "  labops_rtc_context.out = labops_rtc_report;\n"
               "  labops_rtc_context.threads = blockDim.x * blockDim.y * blockDim.z;\n"
               "  labops_rtc_context.me = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;\n"
               "  labops_rtc_context.block = ((long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;\n"
               "  labops_rtc_context.self = labops_rtc_context.block * labops_rtc_context.threads + labops_rtc_context.me;\n"
               "  labops_rtc_context.epoch = 0; labops_rtc_context.warp_epoch = 0; labops_rtc_context.pending_name = -1;\n"
               "  labops_rtc_context.pending_index = 0;\n"
               "  (void)labops_rtc_dynamic_marks; (void)labops_rtc_dynamic_bytes;\n")
    # the checks take registers: bound them so that a block of 1024 threads still launches
    return (f"{_CUDA_PRELUDE}{include}{_CUDA_CHECKED_RUNTIME}\n"
            f'extern "C" __global__ void __launch_bounds__(1024) {name}(\n    ' + ",\n    ".join(params) + ") {\n"
            + context + "".join(locals_)
            + f'#line 1 "{name}"\n{_number_barriers(_rewrite_shared(body, "cuda", len(tensors)))}\n'
            + "  labops_rtc::check_pending(labops_rtc_context);\n}\n")


# ---------------------------------------------------------------------------------------------------------
# Argument checks (before any compile or launch)
# ---------------------------------------------------------------------------------------------------------

def _dim3(value, arg):
    if isinstance(value, bool) or not isinstance(value, (int, tuple, list)):
        raise TypeError(f"labops.rtc: {arg} must be an int or a tuple of 1 to 3 ints, got {type(value).__name__}")
    dims = [value] if isinstance(value, int) else list(value)
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) for d in dims):
        raise TypeError(f"labops.rtc: {arg} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    if any(d < 1 for d in dims):
        raise ValueError(f"labops.rtc: every size in {arg} must be >= 1, got {value!r}")
    return tuple(dims + [1] * (3 - len(dims)))


def _check_launch(grid, block, shared_mem):
    grid, block = _dim3(grid, "grid"), _dim3(block, "block")
    for axis, (g, b, gmax, bmax) in enumerate(zip(grid, block, _MAX_GRID, _MAX_BLOCK)):
        xyz = "xyz"[axis]
        if b > bmax:
            raise ValueError(f"labops.rtc: block.{xyz} must be <= {bmax} (a CUDA limit), got {b}")
        if g > gmax:
            raise ValueError(f"labops.rtc: grid.{xyz} must be <= {gmax} (a CUDA limit), got {g}")
    threads = block[0] * block[1] * block[2]
    if threads > _MAX_THREADS_PER_BLOCK:
        raise ValueError(f"labops.rtc: a block holds at most {_MAX_THREADS_PER_BLOCK} threads (a CUDA limit), "
                         f"got block={block} = {threads}")
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or not 0 <= shared_mem <= _MAX_DYNAMIC_SHARED:
        raise ValueError(f"labops.rtc: shared_mem must be an int from 0 to {_MAX_DYNAMIC_SHARED} (bytes of dynamic "
                         f"shared memory; more needs an opt-in that labops.rtc does not make), got {shared_mem!r}")
    return grid, block


def _check_tensors(kernel_name, names, n_inputs, tensors):
    if len(tensors) != len(names):
        raise TypeError(f"labops.rtc: kernel '{kernel_name}' takes {len(names)} tensors "
                        f"({', '.join(names)}: inputs first, then outputs), got {len(tensors)}")
    for n, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"labops.rtc: {n} must be a torch.Tensor, got {type(t).__name__}")
    first = tensors[0].device
    for n, t in zip(names, tensors):
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"labops.rtc: {n} must be on a cpu or cuda device, got {t.device}")
        if t.device != first:
            raise ValueError(f"labops.rtc: all tensors must be on one device; {names[0]} is on {first}, "
                             f"{n} on {t.device}")
    for n, t in zip(names, tensors):
        if t.dtype not in _DTYPES:
            raise TypeError(f"labops.rtc: {n} has dtype {t.dtype}; supported: {_SUPPORTED}")
        if first.type == "cpu" and _DTYPES[t.dtype][1] is None:
            raise TypeError(f"labops.rtc: {n} is {t.dtype}, which runs on CUDA only (C++ on the CPU has no "
                            f"portable half type); use float32 on the CPU")
        if t.dim() > MAX_DIMS:
            raise ValueError(f"labops.rtc: {n} must have at most {MAX_DIMS} dims, got {t.dim()}")
        if not t.is_contiguous():
            raise ValueError(f"labops.rtc: {n} must be contiguous (the body indexes it as a dense row-major "
                             f"array); pass {n}.contiguous()")
    for k, (n, t) in enumerate(zip(names, tensors)):
        if k >= n_inputs and t.requires_grad and torch.is_grad_enabled() and t.is_leaf:
            raise ValueError(f"labops.rtc: output {n} is a leaf that requires grad; a kernel cannot write "
                             f"into it (allocate outputs with torch.empty)")
    return first


def _shape_args(t):
    dims = list(t.shape) + [1] * (MAX_DIMS - t.dim())
    return t.dim(), dims, t.numel()


# ---------------------------------------------------------------------------------------------------------
# CPU: the host compiler, and a process of its own for each launch
# ---------------------------------------------------------------------------------------------------------
# Note [a launch in its own process]: a learner's body is C++ with plain memory access. Called in
# Python's process, an index off by one could crash Python or quietly corrupt it, and a loop that never
# ends could only be stopped by killing Python (a C loop ignores Ctrl-C). So Python copies the tensors
# into memory it shares with a small runner program (_RUNNER_SOURCE), starts the runner, and waits for it
# with a time limit; on Ctrl-C or at the limit it kills the runner. Inside the runner a tensor's name is a
# checked_ptr (rtc_cpu.h), and each tensor's copy ends at a guard page, so a bad access is reported with
# the tensor and the index. The outputs are copied back only after a launch that went right. The cost is
# a process start and a copy of every tensor, per launch. The runner is a program of its own rather than a
# fork of Python because a fork copies the page tables of all of Python's memory (torch's included) and
# costs several times more; the runner needs none of that memory.

_CPU_FLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC", "-fno-math-errno", "-fdiagnostics-color=never"]
_compiler_id: dict = {}


def _compiler():
    name = os.environ.get("CXX", "c++")
    path = shutil.which(name)
    if path is None:
        raise CompileError(f"labops.rtc: no C++ compiler for the CPU path ('{name}' not found): install g++, "
                           f"e.g. `apt install g++`, or set CXX", "", "")
    if path not in _compiler_id:
        version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.splitlines()
        _compiler_id[path] = version[0] if version else path
    return path, _compiler_id[path]


def _rtc_cache_dir():
    from labops import _build

    return _build.cache_root() / "rtc"


class _Report(ctypes.Structure):
    """_REPORT_STRUCT, field for field."""

    _fields_ = [("finished", ctypes.c_longlong), ("fault_signal", ctypes.c_longlong),
                ("fault_offset", ctypes.c_longlong), ("fault_write", ctypes.c_longlong),
                *((f, ctypes.c_longlong) for f in ("bug_kind", "bug_index", "bug_extent", "bug_write", "bug_line",
                                                    "bug_race", "bug_thread_a", "bug_thread_b", "bug_depth")),
                ("bug_indices", ctypes.c_longlong * 4), ("bug_array", ctypes.c_char * 64), ("error", ctypes.c_char * 256)]


_RUNNER_SOURCE = r"""// labops.rtc's runner: one CPU launch of a kernel library, in a process of its own (see
// Note [a launch in its own process] in labops/rtc.py). Its arguments:
//   LIBRARY FD REGION_BYTES PAGE_BYTES PARENT_PID GRID_X GRID_Y GRID_Z BLOCK_X BLOCK_Y BLOCK_Z SHARED_BYTES RECORD TENSORS,
//   for each tensor OFFSET NDIM NUMEL and MAX_DIMS dims, then GUARDS and the offset of each guard page.
// FD is the shared memory: the report, then each tensor's copy. It prints nothing: Python reads the report.
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <ucontext.h>
#endif

""" + _REPORT_STRUCT + r"""
static const int max_dims = MAX_DIMS_VALUE;
static labops_rtc::report* shared;
static char* region;
static long long region_bytes;

typedef void (*launch_function)(void* const*, const int*, const long long*, const long long*, const unsigned int*,
                                labops_rtc::report*);

// A SIGSEGV or SIGBUS: record where, so that Python can tell whose guard page it was. SA_RESETHAND has put
// the default action back, so returning runs the access again and it ends this process with the signal.
static void on_fault(int signal_number, siginfo_t* info, void* context) {
  char* address = static_cast<char*>(info->si_addr);
  shared->fault_signal = signal_number;
  shared->fault_offset = address >= region && address < region + region_bytes ? address - region : -1;
#if defined(__linux__) && defined(__x86_64__)
  shared->fault_write = (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#else
  (void)context;
#endif
}

static int fail(const char* what, const char* detail) {
  snprintf(shared->error, sizeof shared->error, "%s%s", what, detail ? detail : "");
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 15) return 64;
  int arg = 1;
  const char* library = argv[arg++];
  const int fd = atoi(argv[arg++]);
  region_bytes = atoll(argv[arg++]);
  const long long page = atoll(argv[arg++]);
  const long long parent = atoll(argv[arg++]);
#ifdef __linux__
  prctl(PR_SET_PDEATHSIG, SIGKILL);    // die with the Python process that started this one,
  if (getppid() != parent) return 65;  // even if it died before the line above
#else
  (void)parent;
#endif
#ifdef MAP_POPULATE
  const int populate = MAP_POPULATE;  // map every page now: cheaper than a fault for each
#else
  const int populate = 0;
#endif
  void* mapped = mmap(NULL, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | populate, fd, 0);
  if (mapped == MAP_FAILED) return 66;
  region = static_cast<char*>(mapped);
  shared = reinterpret_cast<labops_rtc::report*>(region);

  unsigned int config[8];
  for (int i = 0; i < 8; ++i) config[i] = static_cast<unsigned int>(strtoul(argv[arg++], NULL, 10));
  const int tensors = atoi(argv[arg++]);
  if (argc < arg + tensors * (3 + max_dims) + 1) return fail("the runner got too few arguments", NULL);
  void** ptrs = static_cast<void**>(calloc(tensors, sizeof(void*)));
  int* ndims = static_cast<int*>(calloc(tensors, sizeof(int)));
  long long* numels = static_cast<long long*>(calloc(tensors, sizeof(long long)));
  long long* dims = static_cast<long long*>(calloc(tensors * max_dims, sizeof(long long)));
  for (int k = 0; k < tensors; ++k) {
    ptrs[k] = region + atoll(argv[arg++]);
    ndims[k] = atoi(argv[arg++]);
    numels[k] = atoll(argv[arg++]);
    for (int d = 0; d < max_dims; ++d) dims[k * max_dims + d] = atoll(argv[arg++]);
  }
  const int guards = atoi(argv[arg++]);
  if (argc < arg + guards) return fail("the runner got too few arguments", NULL);
  for (int g = 0; g < guards; ++g)
    if (mprotect(region + atoll(argv[arg++]), page, PROT_NONE) != 0) return fail("mprotect failed: ", strerror(errno));

  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigaction(SIGSEGV, &action, NULL);
  sigaction(SIGBUS, &action, NULL);

  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) return fail("cannot load the kernel's library: ", dlerror());
  launch_function launch = reinterpret_cast<launch_function>(dlsym(handle, "labops_rtc_launch"));
  if (launch == NULL) return fail("the kernel's library has no labops_rtc_launch: ", dlerror());
  launch(ptrs, ndims, dims, numels, config, shared);
  shared->finished = 1;
  return 0;  // exit() flushes what the body printed
}
""".replace("MAX_DIMS_VALUE", str(MAX_DIMS))

_runner_path = None


def _compile(name, source, flags, suffix, count, libraries=()):
    """Compile ``source`` with the host compiler into the rtc cache (once per source, compiler and flags);
    the path of the result. ``count``: whether cache_info() counts this compile (not for the runner)."""
    compiler, compiler_id = _compiler()
    digest = hashlib.sha256("\0".join([source, compiler_id, " ".join(flags)]).encode()).hexdigest()[:20]
    directory = _rtc_cache_dir()
    target = directory / f"{name}-{digest}{suffix}"
    if target.exists():
        if count:
            _stats["disk_loads"] += 1
        return target
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rtc-", dir=directory) as tmp:
        cpp = os.path.join(tmp, f"{name}.cpp")
        with open(cpp, "w") as f:
            f.write(source)
        out = os.path.join(tmp, f"{name}{suffix}")
        done = subprocess.run([compiler, *flags, cpp, "-o", out, *libraries], capture_output=True, text=True,
                              cwd=tmp)
        if count:
            _stats["compiles"] += 1
        if done.returncode != 0:
            # g++ opens with "In function 'void labops_rtc_thread(...)'": the wrapper, not the user's code
            log = "\n".join(line for line in done.stderr.replace(cpp, name).splitlines()
                            if not line.startswith(f"{name}: In function"))
            raise CompileError(f"labops.rtc: kernel '{name}' failed to compile for the CPU "
                               f"(line numbers are the body's):\n{log}", log, source)
        os.replace(out, target)  # atomic: a concurrent process sees the whole file or none
    return target


def _runner():
    """The runner program's path, compiled on first use (and again if the cache was emptied since)."""
    global _runner_path
    with _lock:
        if _runner_path is None or not _runner_path.exists():
            _runner_path = _compile("rtc-runner", _RUNNER_SOURCE, ["-O2", "-std=c++17", "-fdiagnostics-color=never"],
                                    "", count=False, libraries=["-ldl"])
    return _runner_path


class _Layout:
    """Where each tensor's copy goes in the memory shared with the runner: the report's page first, then
    each distinct tensor placed so that its last byte is the last before a guard page (made PROT_NONE by
    the runner)."""

    def __init__(self, tensors):
        self.page = mmap.PAGESIZE
        self.offsets = []  # each tensor's copy, in bytes from the start
        copies = {}  # (address, bytes) -> offset: a tensor passed twice (in place) is copied once
        self.guards = [self.page]  # a guard page right after the report
        end = 2 * self.page
        for t in tensors:
            nbytes = t.numel() * t.element_size()
            key = (t.data_ptr(), nbytes)
            if key not in copies:
                pages = -(-nbytes // self.page)
                copies[key] = end + pages * self.page - nbytes
                end += pages * self.page
                self.guards.append(end)
                end += self.page
            self.offsets.append(copies[key])
        self.size = end

    def guard_hit(self, tensors, fault_offset):
        """(tensor number, index) for a fault in the guard page after a tensor's copy or in the one before it
        (of two tensors around one guard page, the one whose bytes are nearer); None elsewhere."""
        nearest = None
        for k, (t, offset) in enumerate(zip(tensors, self.offsets)):
            end = offset + t.numel() * t.element_size()
            first_page = offset - offset % self.page
            if end <= fault_offset < end + self.page:
                distance = fault_offset - end
            elif first_page - self.page <= fault_offset < first_page:
                distance = offset - fault_offset
            else:
                continue
            if nearest is None or distance < nearest[0]:
                nearest = (distance, k, (fault_offset - offset) // t.element_size())
        return None if nearest is None else nearest[1:]


class _SharedMemory:
    """A memory file that Python and the runner both map (MAP_SHARED)."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.fd = os.memfd_create("labops-rtc") if hasattr(os, "memfd_create") else _unlinked_file()
        try:
            os.ftruncate(self.fd, capacity)
            self.memory = mmap.mmap(self.fd, capacity)
            self._export = ctypes.c_char.from_buffer(self.memory)  # holds the mapping open while we use its address
        except BaseException:
            os.close(self.fd)
            raise
        self.address = ctypes.addressof(self._export)

    def copy_in(self, tensors, offsets):
        for t, offset in zip(tensors, offsets):
            ctypes.memmove(self.address + offset, t.data_ptr(), t.numel() * t.element_size())

    def copy_out(self, tensors, offsets):
        for t, offset in zip(tensors, offsets):
            ctypes.memmove(t.data_ptr(), self.address + offset, t.numel() * t.element_size())

    def reset_report(self):
        report = _Report(fault_offset=-1, fault_write=-1)
        self.memory[:ctypes.sizeof(report)] = bytes(report)

    def report(self):
        """A copy of the report (safe to keep after close)."""
        return _Report.from_buffer_copy(self.memory)

    def close(self):
        del self._export
        self.memory.close()
        os.close(self.fd)


def _unlinked_file():
    fd, path = tempfile.mkstemp(prefix="labops-rtc-")
    os.unlink(path)
    return fd


# Fresh pages cost the kernel a fault and a zero fill each, more than the copy into them; so the memory of
# one launch is kept for the next, unless it is larger than this.
_KEEP_SHARED_BYTES = 256 << 20
_spare_memory = None
_spare_lock = threading.Lock()


def _take_shared_memory(size):
    global _spare_memory
    with _spare_lock:
        spare, _spare_memory = _spare_memory, None
    if spare is not None and spare.capacity >= size:
        return spare
    if spare is not None:
        spare.close()
    return _SharedMemory(size)


def _keep_shared_memory(memory):
    global _spare_memory
    if memory.capacity > _KEEP_SHARED_BYTES:
        memory.close()
        return
    with _spare_lock:
        memory, _spare_memory = _spare_memory, memory
    if memory is not None:  # two launches at once: keep one memory
        memory.close()


def _wait(process, limit):
    """Whether the runner ended within ``limit`` seconds. Ctrl-C interrupts the wait (KeyboardInterrupt)."""
    timeout = None if limit == math.inf else limit
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux 5.3 or later: Popen polls instead
        try:
            process.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        ended = bool(poller.poll(None if timeout is None else math.ceil(1000 * timeout)))
    finally:
        os.close(pidfd)
    if ended:
        process.wait()
    return ended


def _kill(process):
    """Kill the runner and reap it, so that no process is left behind."""
    process.kill()
    while True:
        try:
            process.wait()
            return
        except KeyboardInterrupt:  # a second Ctrl-C: the runner is already killed, reaping it takes no time
            continue


class _CpuLauncher:
    def __init__(self, name, source, names, n_inputs, shared):
        self.name, self.source, self.names, self.n_inputs, self.shared = name, source, names, n_inputs, shared
        self.library = _compile(name, source, _CPU_FLAGS, ".so", count=True)

    def __call__(self, tensors, grid, block, shared_mem, time_limit_s, access_log=None):
        """Run the launch; ``access_log`` (an int64 tensor, or None) receives the access log of a recorded
        launch, and is copied back with the outputs."""
        limit = CPU_TIME_LIMIT_S if time_limit_s is None else time_limit_s
        kernel_tensors = tensors
        if access_log is not None:
            tensors = list(tensors) + [access_log]
        runner = str(_runner())
        if not self.library.exists():  # the cache was emptied since this process compiled it
            self.library = _compile(self.name, self.source, _CPU_FLAGS, ".so", count=True)
        layout = _Layout(tensors)
        shared = _take_shared_memory(layout.size)
        try:
            shared.copy_in(tensors, layout.offsets)
            shared.reset_report()
            argv = [runner, str(self.library), str(shared.fd), str(layout.size), str(layout.page), str(os.getpid()),
                    *map(str, grid), *map(str, block), str(shared_mem), str(int(access_log is not None)),
                    str(len(tensors))]
            for t, offset in zip(tensors, layout.offsets):
                ndim, dims, numel = _shape_args(t)
                argv += [str(offset), str(ndim), str(numel), *map(str, dims)]
            argv += [str(len(layout.guards)), *map(str, layout.guards)]
            process = subprocess.Popen(argv, pass_fds=(shared.fd,), stdin=subprocess.DEVNULL)
            try:
                ended = _wait(process, limit)
            finally:
                if process.returncode is None:  # out of time, or Ctrl-C
                    _kill(process)
            self._raise_if_failed(shared.report(), layout, kernel_tensors, process.returncode, ended, limit, grid,
                                  block)
            shared.copy_out(tensors[self.n_inputs:], layout.offsets[self.n_inputs:])
        finally:
            _keep_shared_memory(shared)

    def _raise_if_failed(self, report, layout, tensors, returncode, ended, limit, grid, block):
        if report.error:
            raise RuntimeError(f"labops.rtc: could not run kernel '{self.name}' on the CPU: "
                               f"{report.error.decode(errors='replace')}")
        if report.bug_kind:
            raise _bug(self.name, self.shared, report, grid, block)
        hit = layout.guard_hit(tensors, report.fault_offset) if report.fault_offset >= 0 else None
        if hit is not None:
            verb = {1: "wrote", 0: "read"}.get(report.fault_write, "read or wrote")
            raise self._out_of_bounds(verb, *hit, tensors[hit[0]], " through a plain pointer")
        if not ended:
            raise TimeoutError(f"labops.rtc: kernel '{self.name}' ran longer than the CPU time limit of {limit:g} s "
                               f"and was stopped (does a loop never reach its end?). For a longer limit pass "
                               f"time_limit_s=..., or set labops.rtc.CPU_TIME_LIMIT_S or "
                               f"$LABOPS_RTC_CPU_TIME_LIMIT_S")
        if returncode < 0:
            number = -returncode
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            why = (" A SIGSEGV or SIGBUS is a read or write of memory that no tensor owns, most often through a "
                   "plain pointer made from a tensor (the tensor's own name checks every index; a plain pointer "
                   "does not)." if number in (signal.SIGSEGV, signal.SIGBUS) else "")
            raise KernelCrashError(
                f"labops.rtc: kernel '{self.name}' crashed on the CPU with {name} ({signal.strsignal(number)}), "
                f"which ended the process that ran it; Python goes on and the outputs were not written.{why}",
                number)
        if returncode != 0 or not report.finished:
            raise KernelCrashError(f"labops.rtc: kernel '{self.name}' ended the process that ran it with exit status "
                                   f"{returncode} before every thread had run; the outputs were not written", None)

    def _out_of_bounds(self, verb, k, index, tensor, how):
        name, numel = self.names[k], tensor.numel()
        return OutOfBoundsError(_outside(self.name, verb, f"{name}[{index}]{how}", name, numel),
                                kernel=self.name, tensor=name, index=index, numel=numel, access=verb)


def _outside(kernel_name, verb, element, name, numel):
    valid = f"valid 0..{numel - 1}" if numel else "no index is valid"
    return (f"labops.rtc: kernel '{kernel_name}' {verb} {element}, but {name} has {numel} "
            f"element{'s' if numel != 1 else ''} ({valid})")


def _who(thread, threads_per_block, block, grid=None):
    """'thread (x, y, z) of block (x, y, z)' for a global thread index (block * threads + thread)."""
    b, t = divmod(thread, threads_per_block)
    tx, ty, tz = t % block[0], t // block[0] % block[1], t // (block[0] * block[1])
    return f"thread ({tx}, {ty}, {tz}) of block {b}" if grid is None else \
        f"thread ({tx}, {ty}, {tz}) of block ({b % grid[0]}, {b // grid[0] % grid[1]}, {b // (grid[0] * grid[1])})"


def _bug(kernel_name, shared_arrays_, report, grid, block, on_gpu=False):
    """The exception for a bug the CPU runtime (rtc_cpu.h) or a checked GPU launch (rtc_cuda_checked.h)
    found and wrote into its report."""
    threads = block[0] * block[1] * block[2]
    array = report.bug_array.decode(errors="replace")
    who_a = _who(report.bug_thread_a, threads, block, grid)
    who_b = _who(report.bug_thread_b, threads, block, grid)
    shared = [a for a in shared_arrays_ if a.name == array]
    kind = report.bug_kind
    if kind == 1:  # out of bounds
        verb = "wrote" if report.bug_write == 1 else "read"
        if shared:
            a = shared[0]
            indices = "".join(f"[{i}]" for i in report.bug_indices[:report.bug_depth])
            declared = "[]" if a.extern else "".join(f"[{d}]" for d in a.dims)
            message = (f"labops.rtc: kernel '{kernel_name}' {verb} __shared__ {array}{indices} ({who_a}), but "
                       f"{array} is declared {a.type} {array}{declared}"
                       + (f" and shared_mem= gives it {report.bug_extent} elements" if a.extern else "")
                       + ": every index must be inside its own dimension")
            index = report.bug_index
        else:
            message = _outside(kernel_name, verb, f"{array}[{report.bug_index}]", array, report.bug_extent) + \
                f" ({who_a})"
            index = report.bug_index
        return OutOfBoundsError(message, kernel=kernel_name, tensor=array, index=index, numel=report.bug_extent,
                                access=verb)
    if kind == 2:  # data race
        what = f"__shared__ array {array}" if report.bug_write == 1 else f"output {array}"
        element = f"{array}[{report.bug_index}]"
        other = "other threads" if report.bug_thread_a < 0 else who_a
        first, then = {1: ("wrote", "read"), 2: ("read", "wrote"), 3: ("wrote", "wrote")}[report.bug_race]
        race = {1: "read before the write", 2: "write after read", 3: "two writes"}[report.bug_race]
        if report.bug_write == 1:
            fix = ("nothing orders the two accesses: on a GPU either may come first. A __syncthreads() between "
                   "them (reached by every thread of the block) makes the first one happen before the second")
        else:
            fix = ("on a GPU either may come first, and an update can be lost. Threads that add into one element "
                   "need atomicAdd (threads of different blocks are never ordered within a launch), or give each "
                   "element one thread that writes it")
        message = (f"labops.rtc: kernel '{kernel_name}': data race on {what}: {other} {first} {element}, then "
                   f"{who_b} {then} it, with no barrier between ({race}); {fix}")
        threads_involved = (None if report.bug_thread_a < 0 else report.bug_thread_a, report.bug_thread_b)
        return DataRaceError(message, kernel=kernel_name, array=array, index=report.bug_index, kind=race,
                             threads=threads_involved, shared=report.bug_write == 1)
    if kind == 3 and on_gpu:  # a GPU counts who arrived, not who is elsewhere
        op = "a warp operation (shuffle, vote or __syncwarp)" if report.bug_race == 1 else "__syncthreads()"
        count = f"{report.bug_index} of the {'lanes its mask names' if report.bug_race == 1 else f'{threads} threads'}"
        message = (f"labops.rtc: kernel '{kernel_name}': {op} at line {report.bug_line} is not reached by every "
                   f"thread (or they wait at different ones): {count} arrived together ({who_a} among them). "
                   f"Every thread of the block must reach the same __syncthreads()")
        return BarrierDivergenceError(message, kernel=kernel_name, line=report.bug_line, other_line=None)
    if kind == 3:  # divergent barrier
        op = "a warp operation (shuffle, vote or __syncwarp)" if report.bug_race == 1 else "__syncthreads()"
        where = ("had finished without reaching it" if report.bug_index < 0
                 else f"waits at another one, at line {report.bug_index}")
        rule = ("every lane named in the mask must reach the same warp operation" if report.bug_race == 1 else
                "every thread of the block must reach the same __syncthreads(): keep it out of branches and loops "
                "whose condition differs between threads (or returns before it)")
        message = (f"labops.rtc: kernel '{kernel_name}': {op} at line {report.bug_line} is not reached by every "
                   f"thread: {who_a} waits there, but {who_b} {where}. On a GPU this hangs or gives garbage; {rule}")
        return BarrierDivergenceError(message, kernel=kernel_name, line=report.bug_line,
                                      other_line=None if report.bug_index < 0 else report.bug_index)
    if kind == 4:  # uninitialized read
        message = (f"labops.rtc: kernel '{kernel_name}': {who_a} read __shared__ {array}[{report.bug_index}], but "
                   f"no thread of its block had written it (and none did before the next barrier). Shared memory "
                   f"holds garbage when a block starts: write every element you read first, then __syncthreads()")
        return UninitializedReadError(message, kernel=kernel_name, array=array, index=report.bug_index)
    if kind == 5:
        return KernelBugError(f"labops.rtc: kernel '{kernel_name}': its __shared__ arrays take {report.bug_extent} "
                              f"bytes per block (counting {array!r}), more than CUDA's {48 * 1024} bytes (48 KB) "
                              f"of static shared memory per block", kernel=kernel_name)
    return KernelBugError(f"labops.rtc: kernel '{kernel_name}': the CPU runtime reported bug {kind}",
                          kernel=kernel_name)


# ---------------------------------------------------------------------------------------------------------
# CUDA: NVRTC through cuda.core
# ---------------------------------------------------------------------------------------------------------

_cuda_core = None


def _import_cuda_core():
    """cuda.core's Program, ProgramOptions, LaunchConfig, launch, Device: top level (1.x) or experimental."""
    global _cuda_core
    if _cuda_core is None:
        module = None
        for path in ("cuda.core", "cuda.core.experimental"):
            try:
                candidate = __import__(path, fromlist=["Program"])
            except ImportError:
                continue
            if all(hasattr(candidate, a) for a in ("Program", "ProgramOptions", "LaunchConfig", "launch", "Device")):
                module = candidate
                break
        if module is None:
            raise ImportError("labops.rtc: CUDA kernels are compiled with NVIDIA's cuda-core package, which is not "
                              "installed: `pip install cuda-core` (or `pip install labops[gpu]`)")
        _cuda_core = module
    return _cuda_core


def _fp16_include_paths():
    """Folders holding cuda_fp16.h, for NVRTC builds that do not bundle it."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "include"))
    candidates.append("/usr/local/cuda/include")
    try:
        import nvidia

        for root in nvidia.__path__:
            for sub in sorted(os.listdir(root)):
                candidates.append(os.path.join(root, sub, "include"))
    except ImportError:
        pass
    return [c for c in dict.fromkeys(candidates) if os.path.isfile(os.path.join(c, "cuda_fp16.h"))]


_thread_state = threading.local()  # which device this thread made current through cuda.core


class _CudaLauncher:
    def __init__(self, kernel, device_index):
        self.kernel = kernel
        self.device_index = device_index
        self.device = _cuda_core.Device(device_index)
        self.streams = {}
        self.configs = {}

    def _stream(self):
        torch_stream = torch.cuda.current_stream(self.device_index)
        key = torch_stream.cuda_stream
        stream = self.streams.get(key)
        if stream is None:
            if len(self.streams) > 64:
                self.streams.clear()
            stream = self.streams[key] = self.device.create_stream(torch_stream)
        return stream

    def _config(self, grid, block, shared_mem):
        key = (grid, block, shared_mem)
        config = self.configs.get(key)
        if config is None:
            if len(self.configs) > 256:
                self.configs.clear()
            config = self.configs[key] = _cuda_core.LaunchConfig(grid=grid, block=block, shmem_size=shared_mem)
        return config

    def __call__(self, tensors, grid, block, shared_mem, extra=()):
        args = []
        for t in tensors:  # Python ints: cuda.core passes them as 64-bit values (pointers and long longs)
            ndim, dims, numel = _shape_args(t)
            args += [t.data_ptr(), ndim, *dims, numel]
        args += extra
        config = self._config(grid, block, shared_mem)
        # The launch goes to the context current on this thread: make it this device's (primary) context,
        # the one PyTorch uses. Skipped when this thread already did so and torch still points at it.
        if torch.cuda.current_device() != self.device_index or \
                getattr(_thread_state, "device", None) != self.device_index:
            with torch.cuda.device(self.device_index):
                self.device.set_current()
                _thread_state.device = self.device_index
                _cuda_core.launch(self._stream(), config, self.kernel, *args)
        else:
            _cuda_core.launch(self._stream(), config, self.kernel, *args)


def _build_cuda(name, source, device_index):
    cc = _import_cuda_core()
    major, minor = torch.cuda.get_device_capability(device_index)
    with torch.cuda.device(device_index):
        cc.Device(device_index).set_current()
        _thread_state.device = device_index
        options = {"arch": f"sm_{major}{minor}", "std": "c++17", "name": f"{name}.cu"}
        if "cuda_fp16.h" in source:
            paths = _fp16_include_paths()
            if paths:
                options["include_path"] = paths
        program = cc.Program(source, code_type="c++", options=cc.ProgramOptions(**options))
        _stats["compiles"] += 1
        try:
            code = program.compile("cubin")
        except Exception as exc:  # cuda.core raises with NVRTC's log in the message
            log = str(exc).replace("\x00", "").strip()
            raise CompileError(f"labops.rtc: kernel '{name}' failed to compile with NVRTC for sm_{major}{minor} "
                               f"(line numbers are the body's):\n{log}", log, source) from None
        return _CudaLauncher(code.get_kernel(name), device_index)


# ---------------------------------------------------------------------------------------------------------
# The public object
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    """A runtime kernel: ``name``, the names of its ``inputs`` and ``outputs``, and its ``body``.

    Call it with the tensors (inputs, then outputs) and a launch shape::

        k(x, y, grid=(blocks,), block=(threads,))      # ints or tuples of 1-3 ints
        k(x, y, grid=(rows,), block=256, shared_mem=0)  # shared_mem: dynamic shared bytes (CUDA only)
        k(x, y, grid=1, block=32, time_limit_s=5)       # seconds before a CPU launch is stopped
        rec = k(x, y, grid=2, block=4, record=True)     # CPU: rec.writes["y"], rec.reads["x"] (simt.Trace)

    ``k.source(dtypes, device)`` returns the code that would be compiled.
    """

    name: str
    inputs: tuple
    outputs: tuple
    body: str

    @property
    def names(self) -> tuple:
        return self.inputs + self.outputs

    def source(self, dtypes, device="cpu") -> str:
        """The generated source for ``dtypes`` (one per tensor, or one for all) on ``"cpu"`` or ``"cuda"``.

        Example::

            >>> k = kernel("copy", ["x"], ["y"], "y[0] = x[0];")
            >>> "__global__" in k.source(torch.float32, "cuda")
            True
        """
        if isinstance(dtypes, torch.dtype):
            dtypes = [dtypes] * len(self.names)
        dtypes = list(dtypes)
        if len(dtypes) != len(self.names):
            raise ValueError(f"labops.rtc: dtypes must give one dtype per tensor ({len(self.names)}), "
                             f"got {len(dtypes)}")
        for n, d in zip(self.names, dtypes):
            if d not in _DTYPES:
                raise TypeError(f"labops.rtc: {n} has dtype {d}; supported: {_SUPPORTED}")
        device = torch.device(device).type
        if device == "cpu":
            for n, d in zip(self.names, dtypes):
                if _DTYPES[d][1] is None:
                    raise TypeError(f"labops.rtc: {n} is {d}, which runs on CUDA only")
            return cpu_source(self.name, self.inputs, self.outputs, self.body, dtypes)
        if device == "cuda":
            return cuda_source(self.name, self.inputs, self.outputs, self.body, dtypes)
        raise ValueError(f"labops.rtc: device must be cpu or cuda, got {device}")

    def _launcher(self, device, dtypes, checked=False):
        key = (self.name, self.inputs, self.outputs, self.body, dtypes, str(device), checked)
        launcher = _compiled.get(key)
        if launcher is not None:
            _stats["memory_hits"] += 1
            return launcher
        with _lock:
            launcher = _compiled.get(key)
            if launcher is None:
                if device.type == "cpu":
                    used = gpu_only_features(self.body)
                    if used:
                        raise GpuOnlyError(
                            f"labops.rtc: kernel '{self.name}' uses {', '.join(used)}, which the CPU path does not "
                            f"run (it runs __shared__, barriers, warp shuffles and votes, and atomics). Run it on "
                            f"a CUDA tensor, or write it without them")
                    launcher = _CpuLauncher(self.name, self.source(dtypes, "cpu"), self.names, len(self.inputs),
                                            shared_arrays(self.body))
                else:
                    source = cuda_source(self.name, self.inputs, self.outputs, self.body, dtypes, checked=checked)
                    launcher = _build_cuda(self.name, source, device.index)
                _compiled[key] = launcher
        return launcher

    def __call__(self, *tensors, grid, block, shared_mem: int = 0, time_limit_s: float | None = None,
                 checked: bool = False, record: bool = False):
        grid, block = _check_launch(grid, block, shared_mem)
        device = _check_tensors(self.name, self.names, len(self.inputs), tensors)
        if time_limit_s is not None:
            _check_time_limit(time_limit_s, "time_limit_s")
        for flag, value in (("checked", checked), ("record", record)):
            if not isinstance(value, bool):
                raise TypeError(f"labops.rtc: {flag} must be True or False, got {value!r}")
        if record and device.type != "cpu":
            raise ValueError(f"labops.rtc: record=True runs on the CPU (kernel '{self.name}' got {device.type} "
                             f"tensors): move the tensors to the CPU to record a launch")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        dtypes = tuple(t.dtype for t in tensors)
        if record:
            return self._recorded_launch(device, dtypes, tensors, grid, block, shared_mem, time_limit_s)
        if device.type == "cpu":  # always checked
            self._launcher(device, dtypes)(tensors, grid, block, shared_mem, time_limit_s)
        elif checked:
            self._checked_cuda_launch(device, dtypes, tensors, grid, block, shared_mem)
        else:
            self._launcher(device, dtypes)(tensors, grid, block, shared_mem)

    def _recorded_launch(self, device, dtypes, tensors, grid, block, shared_mem, time_limit_s):
        """A CPU launch that logs every access to a tensor (see ``record=`` in ``kernel``): a simt.Recording."""
        from labops import simt

        log = torch.zeros(1 + 4 * RECORD_LIMIT, dtype=torch.int64)
        self._launcher(device, dtypes)(tensors, grid, block, shared_mem, time_limit_s, access_log=log)
        count = int(log[0])
        if count > RECORD_LIMIT:
            raise ValueError(f"labops.rtc: kernel '{self.name}' made {count} accesses to its tensors; a recorded "
                             f"launch keeps at most labops.rtc.RECORD_LIMIT = {RECORD_LIMIT}: record a smaller "
                             f"launch (or raise the limit)")
        return simt.Recording(simt.Dim3(*grid), simt.Dim3(*block), self.names,
                              log[1:1 + 4 * count].view(count, 4).numpy())

    def _checked_cuda_launch(self, device, dtypes, tensors, grid, block, shared_mem):
        """A launch with rtc_cuda_checked.h's checks, on copies of the outputs (written back if no bug)."""
        n_in = len(self.inputs)
        outputs = [t.clone() for t in tensors[n_in:]]
        marks = [torch.zeros(2 * max(t.numel(), 1), dtype=torch.int64, device=device) for t in outputs]
        blocks = grid[0] * grid[1] * grid[2]
        if blocks * shared_mem * 16 > 2**30:
            raise ValueError(f"labops.rtc: a checked launch keeps 16 bytes of marks per byte of dynamic shared "
                             f"memory per block; {blocks} blocks x {shared_mem} bytes is too much: launch a smaller "
                             f"grid to check it")
        dynamic_marks = torch.zeros(2 * max(blocks * shared_mem, 1), dtype=torch.int64, device=device)
        report = torch.zeros(len(_DEVICE_REPORT_FIELDS) + 3, dtype=torch.int64, device=device)
        report[_DEVICE_REPORT_FIELDS.index("key")] = -1  # all ones: any bug comes before it
        extra = [m.data_ptr() for m in marks] + [report.data_ptr(), dynamic_marks.data_ptr(), shared_mem]
        self._launcher(device, dtypes, checked=True)(list(tensors[:n_in]) + outputs, grid, block, shared_mem, extra)
        values = dict(zip(_DEVICE_REPORT_FIELDS, report.tolist()))
        if values["claimed"]:
            arrays = shared_arrays(self.body)
            names = list(self.names) + [a.name for a in arrays]
            found = _DeviceReport(values, names[values["name"]] if 0 <= values["name"] < len(names) else "?")
            raise _bug(self.name, arrays, found, grid, block, on_gpu=True)
        for t, checked_copy in zip(tensors[n_in:], outputs):
            t.copy_(checked_copy)


# rtc_cuda_checked.h's report, in order (indices is four values)
_DEVICE_REPORT_FIELDS = ("claimed", "kind", "index", "extent", "write", "line", "race", "thread_a", "thread_b",
                         "depth", "i0", "i1", "i2", "i3", "name", "key")


class _DeviceReport:
    """A checked GPU launch's report, with the CPU report's field names (so that _bug reads either)."""

    def __init__(self, values, name):
        self.bug_kind, self.bug_index, self.bug_extent = values["kind"], values["index"], values["extent"]
        self.bug_write, self.bug_line, self.bug_race = values["write"], values["line"], values["race"]
        self.bug_thread_a, self.bug_thread_b, self.bug_depth = values["thread_a"], values["thread_b"], values["depth"]
        self.bug_indices = [values[f"i{d}"] for d in range(4)]
        self.bug_array = name.encode()


def kernel(name: str, inputs, outputs, body: str) -> Kernel:
    """Make a runtime kernel from a CUDA-style body (compiled on its first launch per dtypes and device).

    Args:
        name: the kernel's name, a C identifier; compiler messages name the body's file after it.
        inputs: names of the input tensors (``const`` pointers in the body).
        outputs: names of the output tensors (written by the body; allocate them before the launch).
        body: the statements of a CUDA ``__global__`` function body. For each tensor ``x`` it sees ``x``,
            ``x_type``, ``x_ndim``, ``x_dims[]``, ``x_numel``; and ``blockIdx``, ``threadIdx``, ``blockDim``,
            ``gridDim``.

    Returns:
        a ``Kernel``; call it as ``k(*inputs, *outputs, grid=..., block=...)``. Tensors: contiguous, one
        device, dtypes float32/float64/int32/int64 (and float16 on CUDA).

    Example::

        >>> scale = kernel("scale", ["x"], ["y"], '''
        ...     long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        ...     if (i < x_numel) y[i] = 2 * x[i];''')
        >>> x = torch.randn(1000); y = torch.empty_like(x)
        >>> scale(x, y, grid=(1000 + 255) // 256, block=256)
        >>> torch.equal(y, 2 * x)
        True
    """
    _check_names(name, inputs, outputs, body)
    return Kernel(name, tuple(inputs), tuple(outputs), body)
