"""Benchmarks: labops vs native PyTorch vs the copy-bandwidth limit.

Every figure is a ratio measured in the same run:
  * "% copy": bytes the op must move (each input read once, each output
    written once) per second, over the bytes per second of a plain
    device-to-device copy (read + write) measured just before;
  * "speedup": native time / labops time.

On CUDA every case is timed twice. "Eager" calls the op from Python in a
burst, as a training loop does: when the kernel is shorter than the host's
work per call (Python, the dispatcher, autograd), the GPU waits for the host
and the figure measures the host. "Graph" replays the same calls captured in
a CUDA graph, so only GPU time is left: it measures the kernels. Ops that
synchronize (cross_entropy reads back its target check) cannot be captured
and have no graph figure.

``roofline()`` places every case on a roofline: FLOP/s against FLOPs per
byte, under the measured copy bandwidth and matmul peaks.

Each layer has a suite module in this package whose ``cases(device, size)``
yields ``Case`` objects; ``run()`` times them and prints one table.
    python -m labops bench --device cuda --suite activation

A suite's ``doctor_cases(randn, generator)`` gives ``labops doctor`` the same
pairs of labops op and native PyTorch, on small float64 inputs.

A layer with a ladder (``labops.ladder``) also has ``ladder_cases(device)``: ``ladder_run()`` times every
rung of its forward beside native PyTorch and the copy bandwidth, in one run.
    python -m labops bench --ladder pooling --device cpu --json cpu_pooling.json
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from labops._layers import LAYERS

SUITES = [layer for layer in LAYERS if (Path(__file__).parent / f"{layer}.py").is_file()]  # one suite per layer
# The layers whose suite also times their forward's ladder (``ladder_cases``, ``ladder_run``), read without
# importing the suites (that would import their layer's ops).
LADDERS = [layer for layer in SUITES if "\ndef ladder_cases(" in (Path(__file__).parent / f"{layer}.py").read_text()]


@dataclass
class Case:
    op: str  # e.g. "gelu(sigmoid) fwd+bwd"
    shape: str
    dtype: torch.dtype
    nbytes: int  # the fewest bytes the op must move through memory
    labops: Callable[[], object]
    native: Callable[[], object]
    native_name: str = "native"
    # Arithmetic operations the op's math needs (a multiply-add counts 2, exp or tanh 1;
    # index arithmetic not counted): a rough count that places the op on the roofline.
    flops: float = 0.0
    # What a user might pick instead of labops, timed in the same run (name -> a callable doing
    # the same work): torch.compile of the native code, cuDNN with channels_last, ...
    peers: dict = field(default_factory=dict)
    # The math when it is not the dtype's own: "tf32" for float32 on TF32 tensor cores. The ladder's rows
    # show it in place of the dtype, and read it against that peak.
    math: str = ""


@dataclass
class Result:
    op: str
    shape: str
    dtype: str
    native_name: str
    labops_ms: float
    native_ms: float
    labops_pct_copy: float
    native_pct_copy: float
    speedup: float
    labops_graph_ms: float | None = None  # CUDA-graph replay: GPU time only
    native_graph_ms: float | None = None
    labops_graph_pct_copy: float | None = None
    native_graph_pct_copy: float | None = None
    graph_speedup: float | None = None
    # name -> {ms, pct_copy, speedup, graph_ms, graph_pct_copy, graph_speedup, spread} (speedup = peer /
    # labops time), or {error} when the peer failed to run
    peers: dict = field(default_factory=dict)
    # The eager samples behind labops_ms and native_ms (Timing.spread: n, burst, q1_ms, q3_ms, min_ms,
    # max_ms), the speedup their quartiles allow (native q1 / labops q3 .. native q3 / labops q1), and
    # why the row's timings are noise (empty: steady). Absent from tables written before they existed.
    labops_spread: dict | None = None
    native_spread: dict | None = None
    speedup_range: list | None = None
    noise: list = field(default_factory=list)


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def fwd_bwd(fn, inputs, grad_output):
    """One training step of a layer: ``fn(*inputs)``, then the gradients of the inputs that
    require grad for ``grad_output`` (what a benchmark's fwd+bwd row times)."""
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]

    def step():
        return torch.autograd.grad(fn(*inputs), wrt, grad_output)

    return step


def compiled(fn):
    """``torch.compile`` of ``fn`` (Inductor): the peer a user would try before writing a kernel.
    Compiles on the first call, which the warm-up of ``time_ms`` makes."""
    # Dynamo caches per code object, and a suite compiles one function for several shapes and
    # dtypes: let it keep them all instead of falling back to eager after the 8th.
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), 64))
    return torch.compile(fn, dynamic=False)


# Linux's scheduler hands out the CPU in ticks of 4 ms (CONFIG_HZ=250, the usual default): on a busy
# machine a sample that waited for other processes tends to last a whole number of ticks.
TICK_MS = 4.0
# A timing is noise when its samples' interquartile range is over this share of their median.
NOISY_SPREAD = 0.10


class Timing(float):
    """What ``time_ms`` returns: the median milliseconds per call (a float: arithmetic and formatting work
    as on any number) that also keeps the samples it is the median of, to show their spread and say
    when they are noise (``noise()``)."""

    def __new__(cls, samples, burst=1, device="cpu"):
        self = super().__new__(cls, statistics.median(samples))
        self.samples, self.burst, self.device = tuple(samples), burst, device
        # the first and third quartiles, once (the spread, the noise test and the speedup range read them)
        quartiles = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else None
        self.q1, self.q3 = (quartiles[0], quartiles[2]) if quartiles else (float(self), float(self))
        return self

    def __reduce__(self):  # copy, deepcopy (dataclasses.asdict) and pickle rebuild it from its samples
        return Timing, (self.samples, self.burst, self.device)

    def spread(self) -> dict:
        """The samples' count, burst (calls per sample), quartiles and extremes: the JSON's ``*_spread``."""
        return {"n": len(self.samples), "burst": self.burst, "q1_ms": self.q1, "q3_ms": self.q3,
                "min_ms": min(self.samples), "max_ms": max(self.samples)}

    def on_tick(self) -> int:
        """How many samples (the burst's wall time, on the CPU) last a whole number of scheduler ticks."""
        if self.device == "cuda":  # CUDA events time the GPU, not the host's scheduler
            return 0
        walls = [ms * self.burst for ms in self.samples]
        return sum(w >= TICK_MS / 2 and abs(w - TICK_MS * round(w / TICK_MS)) <= 0.02 * TICK_MS for w in walls)

    def noise(self) -> list[str]:
        """Why this timing cannot be trusted (an empty list when it can): too few samples, a spread over
        ``NOISY_SPREAD`` of the median, or half the samples on the scheduler's tick."""
        n, reasons = len(self.samples), []
        if n < 5:
            reasons.append(f"only {n} sample{'s' * (n != 1)}: no spread to judge")
        elif self > 0 and (self.q3 - self.q1) / self > NOISY_SPREAD:
            reasons.append(f"the middle half of {n} samples spans {self.q1:.4g}-{self.q3:.4g} ms, "
                           f"{100 * (self.q3 - self.q1) / self:.0f} % of the median")
        ticks = self.on_tick()
        if n >= 5 and 2 * ticks >= n:
            reasons.append(f"{ticks} of {n} samples last a whole number of {TICK_MS:g} ms scheduler ticks "
                           "(it waited for the CPU)")
        return reasons


def time_ms(fn, device, min_time=0.2, min_samples=5, clock=time.perf_counter) -> Timing:
    """Median milliseconds per call, as a ``Timing``: a float that also keeps its samples (their spread,
    their count, ``noise()``).

    Each sample times a burst of back-to-back calls (enough for about 1 ms)
    between two CUDA events, as a training loop issues them: the host queues
    the next launch while the GPU runs the last, so Python's per-call overhead
    is hidden whenever the kernel takes longer than it. On the CPU, ``clock``
    (perf_counter; a test passes a fake one).
    """
    burst = _warm_burst(fn, device, clock)
    times = []
    start_all = clock()
    while len(times) < min_samples or (clock() - start_all < min_time and len(times) < 200):
        times.append(_burst_ms(fn, burst, device, clock))
    return Timing(times, burst, device)


def time_ms_interleaved(fns, device, samples=15, clock=time.perf_counter) -> list[Timing]:
    """``time_ms`` of each of ``fns``, their samples taken in turn: sample k of every function before sample
    k + 1 of any. Timed one after the other, two functions meet different machines whenever the host's speed
    drifts: on the H100's host torch.nn's eager training step took 1.47 to 2.25 ms in four runs of one session
    (docs/benchmarks/capstone/h100_session32_ab.md), more than the ratios it was measured for."""
    bursts = [_warm_burst(fn, device, clock) for fn in fns]
    times = [[] for _ in fns]
    for _ in range(samples):
        for fn, burst, out in zip(fns, bursts, times):
            out.append(_burst_ms(fn, burst, device, clock))
    return [Timing(t, burst, device) for t, burst in zip(times, bursts)]


def _warm_burst(fn, device, clock) -> int:
    """Warm ``fn`` up (lazy init, caching allocator, autotuning) and size a burst of about 1 ms."""
    for _ in range(3):
        fn()
    _sync(device)
    t0 = clock()
    fn()
    _sync(device)
    return max(1, min(100, int(1e-3 / max(clock() - t0, 1e-6))))


def _burst_ms(fn, burst, device, clock) -> float:
    """One sample: milliseconds per call of a burst of ``burst`` back-to-back calls."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(burst):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / burst
    t1 = clock()
    for _ in range(burst):
        fn()
    return (clock() - t1) * 1e3 / burst


def graph_ms(fn, calls=20, samples=15) -> float | None:
    """Median GPU milliseconds per call of ``fn`` replayed from a CUDA graph.

    ``calls`` calls are captured once (after a warm-up on a side stream, as
    capture requires) and the graph is replayed between two CUDA events: no
    Python, no dispatcher, no launch latency between kernels. None if ``fn``
    cannot be captured (it synchronizes, or allocates in a way capture forbids).
    """
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception:  # noqa: BLE001 - any capture failure means "no graph figure"
        torch.cuda.synchronize()
        return None
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    del graph
    return statistics.median(times)


def copy_bandwidth(device, nbytes=256 * 2**20) -> float:
    """Bytes per second of dst.copy_(src), counting the read and the write."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device)
    return 2 * src.numel() * 4 / (ms * 1e-3)


def matmul_peaks(device, n=None) -> dict:
    """FLOP/s of a large square matmul in each math mode: the compute roofs of a roofline.

    On a GPU: float32 on the CUDA cores (TF32 off), float32 inputs on the tensor
    cores as TF32 (what cuDNN uses for float32 convolutions by default), float16
    on the tensor cores. On the CPU: float32. 2 n^3 operations per matmul.
    """
    n = n or (8192 if device == "cuda" else 1024)
    modes = {"float32": (torch.float32, "highest")}
    if device == "cuda":
        modes.update({"tf32": (torch.float32, "high"), "float16": (torch.float16, "highest")})
    before = torch.get_float32_matmul_precision()
    peaks = {}
    try:
        for mode, (dtype, precision) in modes.items():
            torch.set_float32_matmul_precision(precision)
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            peaks[mode] = 2 * n**3 / (time_ms(lambda: a @ b, device) * 1e-3)
    finally:
        torch.set_float32_matmul_precision(before)
    return peaks


def roofline(device="cuda", suites=None, size=None, json_path=None, print_table=True) -> dict:
    """Time every benchmark case (labops and native) and record its FLOPs and bytes.

    A roofline plots each op's achieved FLOP/s against its arithmetic intensity
    (FLOPs per byte moved) under two roofs measured in the same run: the copy
    bandwidth (a slope: FLOP/s = bytes/s * intensity) and the matmul peaks (flat).
    An op left of where they meet is memory-bound: only bytes/s can make it faster.
    On CUDA the time is the CUDA-graph replay (GPU time), eager where capture fails.
    """
    suites = suites or SUITES
    bandwidth, peaks = copy_bandwidth(device), matmul_peaks(device)
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    if print_table:
        print(f"device: {name}; copy {bandwidth / 1e9:.0f} GB/s; matmul peaks "
              + ", ".join(f"{k} {v / 1e12:.1f} TFLOP/s" for k, v in peaks.items()), flush=True)
    points, seen = [], set()
    for suite in suites:
        module = importlib.import_module(f"labops.bench.{suite}")
        for case in module.cases(device, size):
            dtype = str(case.dtype).replace("torch.", "")
            for impl, fn in (("labops", case.labops), (case.native_name, case.native)):
                if (impl, case.op, case.shape, dtype) in seen:  # labops appears once per native it is compared with
                    continue
                seen.add((impl, case.op, case.shape, dtype))
                ms = float((graph_ms(fn) if device == "cuda" else None) or time_ms(fn, device))
                points.append({"impl": impl, "op": case.op, "shape": case.shape, "dtype": dtype,
                               "flops": case.flops, "nbytes": case.nbytes, "ms": ms})
                if print_table:
                    p = points[-1]
                    print(f"  {impl:28s} {p['op']:26s} {p['shape']:24s} {dtype:8s} "
                          f"{p['flops'] / p['nbytes']:8.2f} FLOP/B {p['flops'] / (ms * 1e-3) / 1e9:10.1f} GFLOP/s "
                          f"{p['nbytes'] / (ms * 1e-3) / bandwidth * 100:4.0f} % of copy", flush=True)
            if device == "cuda":
                torch.cuda.empty_cache()
    result = {"device": name, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
              "copy_GBps": bandwidth / 1e9, "peak_TFLOPs": {k: v / 1e12 for k, v in peaks.items()},
              "points": points}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    return result


def _time_peers(case, device, pct, lab, lab_graph, min_time=0.2) -> dict:
    """Time each of ``case.peers`` like labops and native (eager, and a CUDA graph on a GPU)."""
    out = {}
    for name, fn in case.peers.items():
        try:
            ms = time_ms(fn, device, min_time)
            graph = graph_ms(fn) if device == "cuda" else None
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            out[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]}
            continue
        out[name] = {"ms": float(ms), "pct_copy": pct(ms), "speedup": ms / lab, "graph_ms": graph,
                     "graph_pct_copy": pct(graph),
                     "graph_speedup": graph / lab_graph if graph and lab_graph else None,
                     "spread": ms.spread(), "noise": ms.noise()}
    return out


def busy_cpu(load: float | None = None, cpus: int | None = None) -> str | None:
    """A sentence when other processes keep the CPU busy (the 1-minute load average over half the CPUs
    this process may use), else None. ``load`` and ``cpus`` default to this machine's."""
    if load is None:
        if not hasattr(os, "getloadavg"):
            return None
        load = os.getloadavg()[0]
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if load <= 0.5 * cpus:
        return None
    return (f"the CPU is busy: load average {load:.1f} on {cpus} CPU{'s' * (cpus != 1)} before the run "
            f"(other processes want {load:.1f} CPUs; every timing shares the CPU with them)")


def noise_report(results, busy: str | None = None) -> str:
    """The lines under the table: each noisy row and why, whether the CPU was busy, and what to do.
    Empty when every row is steady and the CPU was idle."""
    noisy = [r for r in results if r.noise]
    if not noisy and not busy:
        return ""
    lines = []
    if noisy:
        lines.append(f"WARNING: {len(noisy)} of {len(results)} rows are noise (marked ! in the table): their "
                     "times and speedups can move by more than the difference they show.")
        for r in noisy:
            lines.append(f"  ! {r.op} vs {r.native_name}, {r.shape} {r.dtype}: " + "; ".join(r.noise))
    if busy:
        lines.append(f"WARNING: {busy}.")
    if busy or any("scheduler ticks" in why for r in noisy for why in r.noise):
        lines.append("  What to do: rerun on an idle machine (close other programs; `uptime` shows the load), with "
                     "a larger --size so a call outlasts the scheduler's ticks, and more samples (--min-time 2).")
    else:
        lines.append("  What to do: rerun with more samples (--min-time 2). On a GPU a wide spread of eager times "
                     "is the host's (the launches from Python); the graph columns time the GPU alone.")
    return "\n".join(lines)


def peer_text(p: dict) -> str:
    """labops's speedup over one peer, eager / graph: '1.23x / 0.98x' (above 1: labops is faster)."""
    if "error" in p:
        return f"failed ({p['error']})"
    graph = f" / {p['graph_speedup']:.2f}x" if p.get("graph_speedup") else ""
    return f"{p['speedup']:.2f}x{graph}"


def run(device="cuda", suites=None, size=None, json_path=None, print_table=True, progress=False, min_time=0.2):
    """Time every case of ``suites`` and print one table (``format_table``), each row once, then which rows
    are noise. ``progress``: also one line per row on stderr as it finishes (a full run takes minutes).
    ``min_time``: seconds of samples per timing (``time_ms``). Returns (header, results)."""
    suites = suites or SUITES
    busy = busy_cpu() if device == "cpu" else None  # measured before the run adds its own threads
    bandwidth = copy_bandwidth(device)
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    header = f"device: {name}; torch {torch.__version__}; copy bandwidth (read+write) {bandwidth / 1e9:.0f} GB/s"
    results = []
    for suite in suites:
        module = importlib.import_module(f"labops.bench.{suite}")
        for case in module.cases(device, size):
            lab = time_ms(case.labops, device, min_time)
            nat = time_ms(case.native, device, min_time)
            pct = lambda ms: None if ms is None else 100 * case.nbytes / (ms * 1e-3) / bandwidth  # noqa: E731
            lab_graph = graph_ms(case.labops) if device == "cuda" else None
            nat_graph = graph_ms(case.native) if device == "cuda" else None
            results.append(Result(
                op=case.op, shape=case.shape, dtype=str(case.dtype).replace("torch.", ""),
                native_name=case.native_name, labops_ms=float(lab), native_ms=float(nat),
                labops_pct_copy=pct(lab), native_pct_copy=pct(nat), speedup=nat / lab,
                labops_graph_ms=lab_graph, native_graph_ms=nat_graph,
                labops_graph_pct_copy=pct(lab_graph), native_graph_pct_copy=pct(nat_graph),
                graph_speedup=nat_graph / lab_graph if lab_graph and nat_graph else None,
                labops_spread=lab.spread(), native_spread=nat.spread(),
                speedup_range=[nat.q1 / lab.q3, nat.q3 / lab.q1] if lab.q1 > 0 else None,
                noise=[f"labops: {why}" for why in lab.noise()] + [f"{case.native_name}: {why}" for why in nat.noise()],
            ))
            r = results[-1]
            r.peers = _time_peers(case, device, pct, lab, lab_graph, min_time)
            r.noise += [f"{peer}: {why}" for peer, p in r.peers.items() for why in p.get("noise", [])]
            if device == "cuda":
                torch.cuda.empty_cache()
            if progress:
                print(f"  {r.op} vs {r.native_name}, {r.shape} {r.dtype}: labops {r.labops_ms:.3f} ms, "
                      f"native {r.native_ms:.3f} ms" + (" (noise)" if r.noise else ""), file=sys.stderr, flush=True)
    if print_table:
        print(header)
        print(format_table(results))
        if device == "cpu":
            print("(On the CPU a small working set stays in cache between calls, so a row can pass 100 %: the\n"
                  " copy that defines 100 % copies 256 MiB, so it reads 256 MiB and writes 256 MiB, far more than\n"
                  " the caches hold.)")
        report = noise_report(results, busy)
        if report:
            print(report)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "copy_GBps": bandwidth / 1e9,
                       "date": time.strftime("%Y-%m-%d"), "busy": busy, "rows": [asdict(r) for r in results]},
                      f, indent=1)
    return header, results


def ladder_run(layer, device="cuda", json_path=None, print_table=True, min_time=0.2, progress=False) -> dict:
    """Time every rung of ``layer``'s forward (``labops.ladder``: rung 1 the textbook, then each faster kernel)
    on the representative shapes of its suite's ``ladder_cases(device)``, with native PyTorch and the copy
    bandwidth measured in the same run, as ``run()`` does: eager times, and on CUDA the CUDA-graph replay too
    (each rung is forced while its graph is captured, so the graph holds that rung's kernel).

    A rung that cannot take a case (ValueError when forced) gets its reason instead of a time. Returns the
    result (what ``--json`` writes, what ``viz.ladder_bars`` draws): device, torch, date, copy_GBps, layer,
    rungs and their ``about``, and one row per case with native's figures, the rung that runs by default,
    and one entry per rung (ms, pct_copy, speedup over native; graph_* on CUDA). For a layer whose suite sets
    ``LADDER_ROOF = "flops"`` (convolution), ``roof`` is "flops", ``peak_TFLOPs`` holds ``matmul_peaks`` and
    every ``pct_copy`` is % of the matmul peak of the case's dtype instead (float32 without TF32; bfloat16
    against float16's)."""
    from labops import ladder

    module = importlib.import_module(f"labops.bench.{layer}")
    if not hasattr(module, "ladder_cases"):
        raise ValueError(f"labops bench --ladder: layer '{layer}' has no ladder cases (its suite, labops/bench/"
                         f"{layer}.py, defines no ladder_cases); layers with a ladder: {', '.join(ladder.layers())}")
    busy = busy_cpu() if device == "cpu" else None  # measured before the run adds its own threads
    bandwidth = copy_bandwidth(device)
    # A compute-bound layer (its suite says LADDER_ROOF = "flops") is measured against the matmul peak of its
    # dtype instead of the copy bandwidth: pct_copy then holds % of that FLOP roof.
    roof = getattr(module, "LADDER_ROOF", "copy")
    peaks = matmul_peaks(device) if roof == "flops" else {}
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    names = ladder.rungs(layer, device)
    rows = []
    for case in module.ladder_cases(device):
        dtype_name = case.math or str(case.dtype).removeprefix("torch.")
        if roof == "flops":
            peak = peaks.get({"bfloat16": "float16"}.get(dtype_name, dtype_name))
            pct = lambda ms, peak=peak: (None if ms is None or not peak  # noqa: E731
                                         else 100 * case.flops / (ms * 1e-3) / peak)
        else:
            pct = lambda ms: None if ms is None else 100 * case.nbytes / (ms * 1e-3) / bandwidth  # noqa: E731
        case.labops()  # nothing forced: the rung the layer picks for this case
        default = ladder.last_rung(layer)
        nat = time_ms(case.native, device, min_time)
        nat_graph = graph_ms(case.native) if device == "cuda" else None
        row = {"op": case.op, "shape": case.shape, "dtype": dtype_name,
               "nbytes": case.nbytes, "flops": case.flops, "native_name": case.native_name,
               "native_ms": float(nat), "native_pct_copy": pct(nat), "native_graph_ms": nat_graph,
               "native_graph_pct_copy": pct(nat_graph), "native_spread": nat.spread(),
               "noise": [f"{case.native_name}: {why}" for why in nat.noise()],
               "default_rung": default, "rungs": []}
        for number, rung in enumerate(names, start=1):
            entry = {"rung": number, "name": rung}
            with ladder.use(layer, number):
                try:
                    case.labops()
                except ValueError as exc:  # this rung cannot take this case: say why, time nothing
                    entry["error"] = str(exc).splitlines()[0]
                    row["rungs"].append(entry)
                    continue
                ms = time_ms(case.labops, device, min_time)
                graph = graph_ms(case.labops) if device == "cuda" else None
            entry.update(ms=float(ms), pct_copy=pct(ms), speedup=nat / ms, graph_ms=graph, graph_pct_copy=pct(graph),
                         graph_speedup=nat_graph / graph if graph and nat_graph else None, spread=ms.spread())
            row["noise"] += [f"rung {number} ({rung}): {why}" for why in ms.noise()]
            row["rungs"].append(entry)
            if progress:
                print(f"  {case.op} {case.shape} {row['dtype']}: rung {number} ({rung}) {float(ms):.4g} ms, "
                      f"native {float(nat):.4g} ms", file=sys.stderr, flush=True)
        rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
    result = {"kind": "ladder", "layer": layer, "device": name, "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "copy_GBps": bandwidth / 1e9, "busy": busy, "roof": roof,
              "peak_TFLOPs": {mode: f / 1e12 for mode, f in peaks.items()}, "rungs": names,
              "about": ladder.about(layer, device), "rows": rows}
    if print_table:
        print(f"device: {name}; torch {torch.__version__}; copy bandwidth (read+write) {bandwidth / 1e9:.0f} GB/s")
        print(format_ladder(result))
        if busy:
            print(f"WARNING: {busy}.")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    return result


def ladder_summary(result) -> str:
    """One line per case of a ladder run (``ladder_run``'s result or its JSON path): each rung's share of the
    roof (% of copy bandwidth, or of the matmul peak for a compute-bound layer), then native's; GPU time from
    the CUDA graph where the run has it, else eager. What a notebook prints beside ``viz.ladder_bars``."""
    from labops.viz import load_bench

    result = load_bench(result)
    rows = result["rows"]
    key = "graph_" if any(r.get("native_graph_pct_copy") is not None for r in rows) else ""
    roof = "matmul peak" if result.get("roof") == "flops" else "copy bandwidth"
    lines = [f"% of the {roof}, {'GPU time (CUDA graph)' if key else 'eager'}; * the default rung"]
    for r in rows:
        cells = []
        for e in r["rungs"]:
            mark = "*" if e["rung"] == r["default_rung"] else ""
            pct = e.get(f"{key}pct_copy")
            cells.append(f"{e['name']}{mark} " + ("n/a" if "error" in e or pct is None else f"{pct:.0f}"))
        native = r.get(f"native_{key}pct_copy")
        cells.append(f"{r['native_name']} " + ("n/a" if native is None else f"{native:.0f}"))
        lines.append(f"  {r['op']} {r['shape']} {r['dtype']}: " + ", ".join(cells))
    return "\n".join(lines)


def refusal_reason(error: str) -> str:
    """Why a forced rung refused a case, from its ValueError: the part after "cannot take this input: "."""
    reason = error.split("cannot take this input: ", 1)[-1]
    return reason.split("; force another rung", 1)[0]


def format_ladder(result: dict) -> str:
    """A markdown table of a ``ladder_run`` result: one line per case and rung, then native; ``*`` marks
    the rung the layer runs by default, ``!`` a timing that is noise. % copy and speedup over native are
    eager, then graph (CUDA)."""
    graphs = any(r.get("native_graph_ms") is not None for r in result["rows"])
    pct = "% peak" if result.get("roof") == "flops" else "% copy"
    lines = [f"| case | dtype | rung | ms | {pct} | speedup vs native |" + (f" {pct} (graph) | speedup (graph) |"
                                                                           if graphs else ""),
             "|---|---|---|---:|---:|---:|" + ("---:|---:|" if graphs else "")]
    cell = lambda v, fmt: "-" if v is None else fmt.format(v)  # noqa: E731
    for r in result["rows"]:
        for e in r["rungs"]:
            mark = "*" if e["rung"] == r["default_rung"] else ""
            if "error" in e:
                lines.append(f"| {r['op']} {r['shape']} | {r['dtype']} | {e['rung']} {e['name']}{mark} | n/a: "
                             f"{refusal_reason(e['error'])} | | |" + (" | |" if graphs else ""))
                continue
            noisy = "!" if any(n.startswith(f"rung {e['rung']} ") for n in r.get("noise", [])) else ""
            graph = f" {cell(e.get('graph_pct_copy'), '{:.0f} %')} | {cell(e.get('graph_speedup'), '{:.2f}x')} |"
            lines.append(f"| {r['op']} {r['shape']} | {r['dtype']} | {e['rung']} {e['name']}{mark}{noisy} | "
                         f"{e['ms']:.4g} | {cell(e['pct_copy'], '{:.0f} %')} | {e['speedup']:.2f}x |"
                         + (graph if graphs else ""))
        lines.append(f"| {r['op']} {r['shape']} | {r['dtype']} | {r['native_name']} | {r['native_ms']:.4g} | "
                     f"{cell(r['native_pct_copy'], '{:.0f} %')} | 1.00x |"
                     + (f" {cell(r.get('native_graph_pct_copy'), '{:.0f} %')} | 1.00x |" if graphs else ""))
    return "\n".join(lines)


def print_rows(result: dict, dtype: str | None = None, op: str | None = None) -> None:
    """One line per row of a benchmark result (``viz.load_bench``): % of copy and speedup, eager / graph.

    The notebooks print these under their "said plainly" paragraphs, so every figure the prose
    refers to is read from the committed data, not typed. ``dtype`` and ``op`` (a prefix) filter.
    """
    def pct(v):
        return "   -" if v is None else f"{v:4.0f}"

    def times(v):
        return "    -" if v is None else f"{v:5.2f}"

    print(f"{result['device']}, {result.get('date', 'date not recorded')}, torch {result['torch']}")
    print(f"{'op':26s} {'shape':22s} {'dtype':8s} % of copy, eager / graph: labops | native    speedup")
    for r in result["rows"]:
        if (dtype and r["dtype"] != dtype) or (op and not r["op"].startswith(op)):
            continue
        print(f"{r['op']:26s} {r['shape']:22s} {r['dtype']:8s} {pct(r['labops_pct_copy'])} / "
              f"{pct(r.get('labops_graph_pct_copy'))} | {pct(r['native_pct_copy'])} / "
              f"{pct(r.get('native_graph_pct_copy'))}   {times(r['speedup'])}x / {times(r.get('graph_speedup'))}x"
              f"  vs {r['native_name']}")
        if r.get("labops_spread") and r.get("native_spread"):
            lo, hi = r.get("speedup_range") or (r["speedup"], r["speedup"])
            print(f"{'':58s} eager ms, median (quartiles) n: labops {_ms_cell(r['labops_ms'], r['labops_spread'])}"
                  f" | native {_ms_cell(r['native_ms'], r['native_spread'])}; speedup {lo:.2f}-{hi:.2f}x")
        for why in r.get("noise") or []:
            print(f"{'':58s} ! noise: {why}")
        for name, peer in (r.get("peers") or {}).items():
            print(f"{'':58s} vs {name}: labops speedup {peer_text(peer)} (eager / graph)")


def print_roofline(result: dict, dtype: str = "float32", impls=("labops",), op: str | None = None) -> None:
    """One line per roofline point (``roofline()``'s result or its JSON, loaded): FLOPs per byte,
    achieved TFLOP/s, which roof bounds it (memory: the copy line; compute: the ``dtype`` matmul
    peak) and the share of that roof reached. ``op`` (a prefix) filters; points with no arithmetic
    are skipped (their yardstick is % of copy).
    """
    bandwidth, peak = result["copy_GBps"] * 1e9, result["peak_TFLOPs"][dtype] * 1e12
    print(f"{result['device']}, {result['date']}, torch {result['torch']}: copy {result['copy_GBps']:.0f} GB/s, "
          f"{dtype} matmul peak {peak / 1e12:.1f} TFLOP/s, ridge at {peak / bandwidth:.1f} FLOPs per byte")
    print(f"{'':18s} {'op':24s} {'shape':26s} FLOP/B   TFLOP/s  bound by  % of that roof")
    for p in result["points"]:
        if (p["dtype"] != dtype or p["impl"] not in impls or p["flops"] == 0
                or (op and not p["op"].startswith(op))):
            continue
        intensity, achieved = p["flops"] / p["nbytes"], p["flops"] / (p["ms"] * 1e-3)
        memory_bound = bandwidth * intensity < peak
        roof = bandwidth * intensity if memory_bound else peak
        print(f"{p['impl'][:18]:18s} {p['op']:24s} {p['shape']:26s} {intensity:6.1f} {achieved / 1e12:9.2f}  "
              f"{'memory ' if memory_bound else 'compute'}   {100 * achieved / roof:5.0f} %")


def _ms_cell(ms, spread) -> str:
    """'24.66 (24.12-25.31) n=9': the median, the middle half of the samples, their count."""
    if not spread:
        return f"{ms:.4g}"
    return f"{ms:.4g} ({spread['q1_ms']:.4g}-{spread['q3_ms']:.4g}) n={spread['n']}"


def format_table(results) -> str:
    """A markdown table, one line per result. ``!``: the row's timings are noise (``noise_report`` says
    why). ``vs``: the native PyTorch it is compared with (a case may be compared with two: conv2d_mm's
    F.unfold+matmul and F.conv2d). Times are eager, in ms: median (first-third quartile) n=samples;
    the speedup's range divides those quartiles."""
    graphs = any(r.labops_graph_ms is not None for r in results)
    header = ("| ! | op | vs | shape | dtype | labops ms | native ms | labops % copy | native % copy "
              "| speedup vs native |")
    rule = "|---|---|---|---|---|---:|---:|---:|---:|---:|"
    if graphs:
        header += " labops % copy (graph) | native % copy (graph) | speedup (graph) |"
        rule += "---:|---:|---:|"
    any_peers = any(r.peers for r in results)
    lines = [header + (" speedup vs peers (eager / graph) |" if any_peers else ""),
             rule + ("---|" if any_peers else "")]
    for r in results:
        rng = getattr(r, "speedup_range", None)
        speedup = f"{r.speedup:.2f}x" + (f" ({rng[0]:.2f}-{rng[1]:.2f})" if rng else "")
        line = (f"| {'!' if getattr(r, 'noise', None) else ''} | {r.op} | {r.native_name} | {r.shape} | {r.dtype} "
                f"| {_ms_cell(r.labops_ms, getattr(r, 'labops_spread', None))} "
                f"| {_ms_cell(r.native_ms, getattr(r, 'native_spread', None))} "
                f"| {r.labops_pct_copy:.0f} % | {r.native_pct_copy:.0f} % | {speedup} |")
        if graphs:
            cell = lambda v, unit: "n/a" if v is None else f"{v:.0f} %" if unit else f"{v:.2f}x"  # noqa: E731
            line += (f" {cell(r.labops_graph_pct_copy, 1)} | {cell(r.native_graph_pct_copy, 1)} |"
                     f" {cell(r.graph_speedup, 0)} |")
        peers = "; ".join(f"{name} {peer_text(p)}" for name, p in r.peers.items())
        lines.append(line + (f" {peers} |" if any_peers else ""))
    return "\n".join(lines)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="labops bench", description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--suite", action="append", choices=SUITES, help="default: all")
    parser.add_argument("--size", type=int, default=None, help="elements for elementwise suites")
    parser.add_argument("--json", default=None, help="also write every number to this file")
    parser.add_argument("--min-time", type=float, default=0.2,
                        help="seconds of samples per timing (default 0.2, at most 200 samples): "
                             "more for a steadier median")
    parser.add_argument("--progress", action="store_true", help="one line per row on stderr as it finishes")
    parser.add_argument("--roofline", action="store_true",
                        help="time every case for a roofline (FLOP/s vs FLOPs per byte) instead of the table")
    parser.add_argument("--ladder", metavar="LAYER", choices=LADDERS,
                        help="time every rung of LAYER's forward (labops.ladder), native and the copy bandwidth "
                             f"in one run, instead of the table; one of: {', '.join(LADDERS)}")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("labops bench: --device cuda, but PyTorch sees no GPU here (torch.cuda.is_available() is False); "
              "use --device cpu", file=sys.stderr)
        return 2
    if args.ladder:
        ladder_run(args.ladder, args.device, args.json, min_time=args.min_time, progress=args.progress)
    elif args.roofline:
        roofline(args.device, args.suite, args.size, args.json)
    else:
        run(args.device, args.suite, args.size, args.json, progress=args.progress, min_time=args.min_time)
    return 0


if __name__ == "__main__":
    sys.exit(main())
