"""Speed, scored: time a learner's CUDA kernel on a GPU and score it as a share of its roof.

A memory-bound exercise scores ``roof time / its time``, where the roof time is the op's minimal bytes
(read + written) over the device-to-device copy bandwidth measured in the same run (``copy_bandwidth``);
a GEMM scores ``cuBLAS time / its time`` at the same precision and shapes (float32, TF32 off:
``cublas_sgemm_time``). ``time_submission`` does the timing. Its rules answer tricks that submissions to
GPU MODE's kernel leaderboard have played on simpler harnesses:

1. **L2 flushed before each rep.** A buffer of twice the L2 size is written before the timer starts, so
   no rep finds its inputs in L2 from the rep before (which would time L2, not memory, bandwidth).
2. **Fresh inputs every rep.** A pool of ``pool_size`` input sets is used in turn, and every use redraws
   its values in place: consecutive reps read different addresses, and an address comes back only with
   new values. A submission that caches its result by input pointer, or skips work when the input looks
   like last time's, returns a stale answer, which rule 3 catches.
3. **Every rep checked.** Each rep's output is compared with ``reference`` computed on that rep's inputs
   (before the submission runs: writing into its inputs does not change the answer expected, unless the
   reference returns the inputs themselves). One wrong rep fails the timing and says where and by how
   much.
4. **A minimum timed duration.** Reps go on until they add up to ``min_total_s`` and number at least
   ``min_reps``; the median is reported, so one slow rep (a clock change, another process) does not
   count.
5. **Nothing left running.** The GPU is idle when the start event is recorded, and the end event is
   recorded after a device-wide ``torch.cuda.synchronize()``: work that the submission queued on a side
   stream and did not wait for is timed in full. When much of a rep ran after the submission's last work
   on the current stream, the timing is also flagged ``"side-stream work"``.

The price of rule 5 is that each time includes the host's launch of the submission (the GPU waits for
it instead of for the flush) and the synchronize's return: microseconds, the same for the roof's own
measurement, but a share of a kernel of a few microseconds. ``CachesByPointer``, ``SkipsRepeatedInput``
and ``LeavesWorkOnSideStream`` below are the tricks, as wrappers around an honest submission, for the
tests and ``tools/gpu_speed.py``. ``write_leaderboard`` writes the class's scores as a CSV beside nbgrader's
grades export (joined on ``student_id``).
"""

from __future__ import annotations

import contextlib
import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["CachesByPointer", "LEADERBOARD_COLUMNS", "LeavesWorkOnSideStream", "SIDE_STREAM", "SkipsRepeatedInput",
           "Timing", "VERDICTS", "close", "copy_bandwidth", "cublas_sgemm_time", "fp32_matmul", "gemm_score",
           "memory_score", "read_leaderboard", "time_submission", "verdict", "write_leaderboard"]

SIDE_STREAM = "side-stream work"
# A rep is flagged when more than this share of it (and more than SIDE_STREAM_MIN_S) ran after the
# submission's last work on the current stream; an honest rep's gap is the synchronize's return alone.
SIDE_STREAM_SHARE = 0.25
SIDE_STREAM_MIN_S = 100e-6  # an honest rep's synchronize returned up to ~60 us late on an H200 under load
# With launch_is_ours, the GPU sleeps this long before the start event, longer than the host takes to
# launch an rtc kernel (about 30 us), so the launch does not count.
HIDE_LAUNCH_S = 100e-6


@dataclass(frozen=True)
class Timing:
    """What ``time_submission`` measured. ``median_s``: median seconds of the timed reps, every stream's
    work included (nan when none was timed); ``stream_median_s``: the same up to the submission's last
    work on the current stream (what a harness without rule 5 would report); ``passed``: every rep,
    warm-up included, matched its reference; ``flags``: e.g. ``"side-stream work"``; ``reasons``: why
    it failed or was flagged."""

    median_s: float
    stream_median_s: float
    reps: int
    passed: bool
    flags: tuple = ()
    reasons: tuple = ()
    times_s: tuple = ()


_HERE = "labops.exercises.speed."  # error messages start with the function's full name


def _number(value, name, where, *, low=0.0, strict=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{_HERE}{where}: {name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < low or (strict and value == low):
        relation = ">" if strict else ">="
        raise ValueError(f"{_HERE}{where}: {name} must be a finite number {relation} {low}, got {value!r}")
    return float(value)


def _integer(value, name, where, *, low):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{_HERE}{where}: {name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{_HERE}{where}: {name} must be >= {low}, got {value}")
    return value


def _cuda_device(device, where):
    if device is not None and torch.device(device).type != "cuda":
        raise ValueError(f"{_HERE}{where}: device must be a CUDA device (or None: the current one), got {device}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"{_HERE}{where} needs a CUDA GPU (torch.cuda.is_available() is False): times are "
                           f"CUDA events on this GPU, scored against its copy bandwidth and cuBLAS")
    device = torch.device("cuda") if device is None else torch.device(device)
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def _tensors(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


def close(rtol: float = 1e-5, atol: float = 1e-6):
    """A check for ``time_submission``: ``check(outputs, expected)`` returns None when every output is
    close to its expected tensor (``torch.isclose`` in float64; NaN never matches), else the reason.

    Example::

        >>> close()(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))
        'output 0: 1 of 2 elements differ from the reference, the first at flat index 1: got 2, expected 2.5'
    """
    rtol, atol = _number(rtol, "rtol", "close"), _number(atol, "atol", "close")

    def check(outputs, expected):
        outputs, expected = _tensors(outputs), _tensors(expected)
        if len(outputs) != len(expected):
            return f"{len(outputs)} outputs, expected {len(expected)}"
        for i, (got, want) in enumerate(zip(outputs, expected)):
            if not isinstance(got, torch.Tensor):
                return f"output {i} is a {type(got).__name__}, not a tensor"
            if got.shape != want.shape:
                return f"output {i} has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
            got, want = got.detach().double().flatten(), want.detach().to(got.device).double().flatten()
            bad = ~torch.isclose(got, want, rtol=rtol, atol=atol)
            if bad.any():
                first = int(bad.nonzero()[0].item())
                return (f"output {i}: {int(bad.sum())} of {got.numel()} elements differ from the reference, the "
                        f"first at flat index {first}: got {got[first].item():.6g}, expected {want[first].item():.6g}")
        return None
    return check


def _redraw(pool, slot, make_inputs, generator):
    """Rule 2: new values for the slot's tensors, written in place (the addresses of its last use)."""
    fresh = make_inputs(generator)
    if not all(isinstance(t, torch.Tensor) for t in _tensors(fresh)):
        raise TypeError(f"{_HERE}time_submission: make_inputs must return a tensor or a tuple of tensors")
    if pool[slot] is None:
        pool[slot] = fresh
    else:
        old, new = _tensors(pool[slot]), _tensors(fresh)
        if [t.shape for t in old] != [t.shape for t in new]:
            raise ValueError(f"{_HERE}time_submission: make_inputs must return tensors of the same shapes on "
                             f"every call")
        for o, n in zip(old, new):
            o.copy_(n)
    return pool[slot]


def time_submission(run, make_inputs, reference, *, check=None, min_total_s: float = 0.1, min_reps: int = 10,
                    max_reps: int = 10_000, warmup: int = 2, pool_size: int = 3, seed: int = 0,
                    device=None, launch_is_ours: bool = False) -> Timing:
    """Time ``run(inputs) -> outputs`` (the submission) under the rules of this module's docstring.

    Args:
        run: the submission: launches the learner's kernel on ``inputs``, returns its output(s).
        make_inputs: ``make_inputs(generator) -> inputs``: a tensor or a tuple of tensors with new random
            values, drawn with ``generator`` (a ``torch.Generator`` on the CUDA device), never all zeros.
        reference: ``reference(inputs) -> expected`` (e.g. native torch in float64).
        check: ``check(outputs, expected) -> None or a reason``; default ``close()``.
        min_total_s, min_reps: time reps until both are reached (or ``max_reps``).
        warmup: checked reps before the timed ones (the first launch compiles).
        pool_size: input sets used in turn (>= 2: consecutive reps never share an address).
        launch_is_ours: ``run`` is the grader's own launch of a learner's kernel body (one kernel on the
            current stream; the learner wrote no Python), so rule 5 has nothing to catch: the GPU is kept
            busy while the host launches (``HIDE_LAUNCH_S`` of sleep after the flush), and the end event
            follows the kernel directly. The time is then the kernel's, without the host's launch.

    Returns:
        a ``Timing``. A wrong rep stops the timing: ``passed`` is False and ``reasons`` says why. An
        exception raised by ``run`` (a compile error, a bad launch) is not caught.
    """
    for name, fn in (("run", run), ("make_inputs", make_inputs), ("reference", reference)):
        if not callable(fn):
            raise TypeError(f"{_HERE}time_submission: {name} must be callable, got {type(fn).__name__}")
    if check is not None and not callable(check):
        raise TypeError(f"{_HERE}time_submission: check must be callable or None, got {type(check).__name__}")
    _number(min_total_s, "min_total_s", "time_submission")
    for name, value, low in (("min_reps", min_reps, 1), ("max_reps", max_reps, min_reps), ("warmup", warmup, 0),
                             ("pool_size", pool_size, 2), ("seed", seed, 0)):
        _integer(value, name, "time_submission", low=low)
    device = _cuda_device(device, "time_submission")
    check = check or close()

    with torch.cuda.device(device):
        generator = torch.Generator(device=device).manual_seed(seed)
        flush = torch.empty(_flush_bytes(device), dtype=torch.uint8, device=device)
        clock_khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", 0) or 2_000_000
        sleep_cycles = int(HIDE_LAUNCH_S * clock_khz * 1e3)
        pool = [None] * pool_size
        full, own = [], []
        for rep in range(warmup + max_reps):
            inputs = _redraw(pool, rep % pool_size, make_inputs, generator)
            expected = reference(inputs)
            flush.zero_()  # rule 1
            start, end_own, end_all = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            if launch_is_ours:
                torch.cuda._sleep(sleep_cycles)  # the GPU waits here while the host launches
                start.record()
                outputs = run(inputs)
                end_own.record()
                end_all = end_own
            else:
                torch.cuda.synchronize(device)  # rule 5: nothing the submission starts can run before `start`
                start.record()
                outputs = run(inputs)
                end_own.record()
                torch.cuda.synchronize(device)  # rule 5: device-wide, so side streams' work too
                end_all.record()
            end_all.synchronize()
            reason = check(outputs, expected)
            if reason is not None:
                which = f"warm-up rep {rep + 1}" if rep < warmup else f"timed rep {rep - warmup + 1}"
                return _timing(full, own, passed=False, reasons=[f"{which}: {reason}"])
            if rep >= warmup:
                full.append(start.elapsed_time(end_all) / 1e3)
                own.append(start.elapsed_time(end_own) / 1e3)
                if len(full) >= min_reps and sum(full) >= min_total_s:
                    break
    return _timing(full, own, passed=True, reasons=[])


def _flush_bytes(device):
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
    return 2 * l2 if l2 > 0 else 256 * 2**20


def _timing(full, own, passed, reasons):
    median = statistics.median(full) if full else math.nan
    flags = []
    if full:
        gap = statistics.median(a - b for a, b in zip(full, own))
        if gap > max(SIDE_STREAM_MIN_S, SIDE_STREAM_SHARE * median):
            flags.append(SIDE_STREAM)
            reasons.append(f"{SIDE_STREAM}: the submission returned before its work was done; a median "
                           f"{gap * 1e6:.0f} us of each {median * 1e6:.0f} us rep ran after its last work on "
                           f"the current stream (timed in full: the end event follows a device-wide synchronize)")
    return Timing(median, statistics.median(own) if own else math.nan, len(full), passed, tuple(flags),
                  tuple(reasons), tuple(full))


# ---- roofs ----

def copy_bandwidth(nbytes: int = 256 * 2**20, device=None) -> float:
    """Bytes per second of a device-to-device copy of ``nbytes`` (bytes read + bytes written), timed by
    ``time_submission``'s rules (the launch hidden, as for the kernels it is the roof of)."""
    nbytes = _integer(nbytes, "nbytes", "copy_bandwidth", low=4)
    if nbytes % 4:
        raise ValueError(f"{_HERE}copy_bandwidth: nbytes must be a multiple of 4 (float32 elements), got {nbytes}")
    device = _cuda_device(device, "copy_bandwidth")
    destination = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    timing = time_submission(destination.copy_, lambda g: torch.randn(nbytes // 4, generator=g, device=g.device),
                             lambda x: x, check=close(rtol=0.0, atol=0.0), device=device, launch_is_ours=True)
    if not timing.passed:  # torch's own copy: a failure here is a broken GPU or harness
        raise RuntimeError(f"{_HERE}copy_bandwidth: the copy failed its check: {timing.reasons}")
    return 2 * nbytes / timing.median_s


@contextlib.contextmanager
def fp32_matmul():
    """float32 matmuls in full float32 precision (no TF32) inside the ``with``; the setting before comes back
    after. (The precision is set first: torch >= 2.9 raises when the legacy flags disagree.)"""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def cublas_sgemm_time(m: int, n: int, k: int, device=None, dtype: torch.dtype = torch.float32) -> float:
    """Median seconds of cuBLAS's float32 ``(m, k) @ (k, n)`` with TF32 off, timed by ``time_submission``'s
    rules; ``dtype=torch.float16``: its half-precision GEMM (float16 in and out; the roof of
    ``triton_matmul``)."""
    m, n, k = (_integer(v, name, "cublas_sgemm_time", low=1) for v, name in ((m, "m"), (n, "n"), (k, "k")))
    if dtype not in (torch.float32, torch.float16):
        raise ValueError(f"{_HERE}cublas_sgemm_time: dtype must be torch.float32 or torch.float16, got {dtype}")
    device = _cuda_device(device, "cublas_sgemm_time")

    def make_inputs(g):
        return (torch.randn(m, k, generator=g, device=g.device).to(dtype),
                torch.randn(k, n, generator=g, device=g.device).to(dtype))

    rtol = 1e-4 if dtype == torch.float32 else 1e-2  # float16's output is rounded to 11 bits
    with fp32_matmul():
        timing = time_submission(lambda ab: torch.mm(*ab), make_inputs, lambda ab: torch.mm(ab[0].double(),
                                 ab[1].double()), check=close(rtol=rtol, atol=1e-5 * k), device=device,
                                 launch_is_ours=True)
    if not timing.passed:
        raise RuntimeError(f"{_HERE}cublas_sgemm_time: torch.mm failed its check: {timing.reasons}")
    return timing.median_s


def memory_score(seconds: float, min_bytes: int, bandwidth: float) -> float:
    """% of the memory roof: the time ``min_bytes`` take at ``bandwidth`` bytes/s, over ``seconds``.

    Example::

        >>> memory_score(1e-3, min_bytes=10**9, bandwidth=2e12)   # the roof is 0.5 ms
        50.0
    """
    seconds = _number(seconds, "seconds", "memory_score", strict=True)
    min_bytes = _integer(min_bytes, "min_bytes", "memory_score", low=1)
    bandwidth = _number(bandwidth, "bandwidth", "memory_score", strict=True)
    return 100.0 * (min_bytes / bandwidth) / seconds


def gemm_score(seconds: float, m: int, n: int, k: int, *, cublas_s: float | None = None, device=None) -> float:
    """% of cuBLAS: cuBLAS's float32 time for these shapes over ``seconds`` (``cublas_s`` measured here
    when not given)."""
    seconds = _number(seconds, "seconds", "gemm_score", strict=True)
    m, n, k = (_integer(v, name, "gemm_score", low=1) for v, name in ((m, "m"), (n, "n"), (k, "k")))
    if cublas_s is None:
        cublas_s = cublas_sgemm_time(m, n, k, device=device)
    return 100.0 * _number(cublas_s, "cublas_s", "gemm_score", strict=True) / seconds


# ---- the tricks, as wrappers around an honest run(inputs) ----

class CachesByPointer:
    """Returns the output it computed last time for inputs at the same addresses (``hits`` counts)."""

    def __init__(self, run):
        self.run, self.cache, self.hits = run, {}, 0

    def __call__(self, inputs):
        key = tuple(t.data_ptr() for t in _tensors(inputs))
        if key in self.cache:
            self.hits += 1
            return self.cache[key]
        self.cache[key] = self.run(inputs)
        return self.cache[key]


class SkipsRepeatedInput:
    """Returns its last output when a cheap checksum (the first 32 values) matches last call's (``skips``)."""

    def __init__(self, run):
        self.run, self.last_key, self.last_output, self.skips = run, None, None, 0

    def __call__(self, inputs):
        key = [t.flatten()[:32].tolist() for t in _tensors(inputs)]
        if key == self.last_key:
            self.skips += 1
            return self.last_output
        self.last_key, self.last_output = key, self.run(inputs)
        return self.last_output


class LeavesWorkOnSideStream:
    """Runs the honest submission on a side stream and returns without waiting for it."""

    def __init__(self, run):
        self.run, self.stream = run, None

    def __call__(self, inputs):
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())  # its inputs are ready
        with torch.cuda.stream(self.stream):
            return self.run(inputs)


# ---- the class leaderboard ----

LEADERBOARD_COLUMNS = ("student_id", "exercise_id", "percent_of_roof", "time_over_native", "verdict")
VERDICTS = ("ok", "flagged", "wrong", "error")  # error: it did not compile or raised


def verdict(timing: Timing) -> str:
    """``"wrong"`` when a rep failed its check, ``"flagged"`` when a flag was raised, else ``"ok"``."""
    return "wrong" if not timing.passed else ("flagged" if timing.flags else "ok")


def _leaderboard_row(row, index):
    where = f"write_leaderboard: rows[{index}]"
    if not isinstance(row, dict):
        raise TypeError(f"{_HERE}{where} must be a dict, got {type(row).__name__}")
    unknown = sorted(set(row) - set(LEADERBOARD_COLUMNS))
    missing = [c for c in LEADERBOARD_COLUMNS if c not in row and c != "time_over_native"]
    if unknown or missing:
        raise ValueError(f"{_HERE}{where} must have the keys {', '.join(LEADERBOARD_COLUMNS)} (time_over_native "
                         f"optional); unknown {unknown}, missing {missing}")
    row = {"time_over_native": None, **row}
    for key in ("student_id", "exercise_id"):
        if not isinstance(row[key], str) or not row[key].strip() or "\n" in row[key]:
            raise ValueError(f"{_HERE}{where}: {key} must be a non-empty one-line str, got {row[key]!r}")
    for key, strict in (("percent_of_roof", False), ("time_over_native", True)):
        if row[key] is not None:
            row[key] = _number(row[key], f"{key} (or None)", where, strict=strict)
    if row["verdict"] not in VERDICTS:
        raise ValueError(f"{_HERE}{where}: verdict must be one of {', '.join(VERDICTS)}, got {row['verdict']!r}")
    return row


def write_leaderboard(rows, path) -> Path:
    """Write ``rows`` (dicts keyed by ``LEADERBOARD_COLUMNS``) as a CSV in that column order, sorted by
    exercise, then by % of roof (best first, unscored last), then by student. One row per student and
    exercise. ``percent_of_roof`` is written with 2 decimals, ``time_over_native`` (its median time over
    native torch's) with 3; None is an empty cell."""
    rows = [_leaderboard_row(row, i) for i, row in enumerate(rows)]
    seen = set()
    for row in rows:
        key = (row["student_id"], row["exercise_id"])
        if key in seen:
            raise ValueError(f"{_HERE}write_leaderboard: two rows for student {key[0]!r} and exercise {key[1]!r}")
        seen.add(key)
    rows.sort(key=lambda r: (r["exercise_id"], r["percent_of_roof"] is None, -(r["percent_of_roof"] or 0.0),
                             r["student_id"]))
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(LEADERBOARD_COLUMNS)
        for r in rows:
            writer.writerow([r["student_id"], r["exercise_id"], _cell(r["percent_of_roof"], 2),
                             _cell(r["time_over_native"], 3), r["verdict"]])
    return path


def _cell(value, decimals):
    return "" if value is None else f"{value:.{decimals}f}"


def read_leaderboard(path) -> list[dict]:
    """The rows of a ``write_leaderboard`` CSV, in file order (numbers as float, empty cells as None)."""
    with Path(path).open(newline="") as f:
        reader = csv.reader(f)
        header = tuple(next(reader, ()))
        if header != LEADERBOARD_COLUMNS:
            raise ValueError(f"{_HERE}read_leaderboard: {path} must start with the header "
                             f"{','.join(LEADERBOARD_COLUMNS)}, got {','.join(header)!r}")
        rows = []
        for cells in reader:
            row = dict(zip(LEADERBOARD_COLUMNS, cells))
            for key in ("percent_of_roof", "time_over_native"):
                row[key] = float(row[key]) if row[key] else None
            rows.append(row)
    return rows
