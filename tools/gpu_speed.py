"""Speed, scored (issue #30) on a GPU: labops.exercises.speed's roofs, its anti-cheat rules at work, and
two learner-style rtc kernels scored as % of their roof beside native torch.

Usage (GPU machine, repository root; torch with CUDA, cuda-core):
    python tools/gpu_speed.py --out $OUT/speed.json

1. the device-to-device copy bandwidth (the memory roof);
2. the tricks against time_submission, one line each: trick, caught yes/no, how;
3. an exact-GELU rtc kernel (float32, n = 2**26; roof: read + write at the copy bandwidth) and a naive rtc
   SGEMM (1024^3; roof: cuBLAS float32, TF32 off), each beside native torch (F.gelu, torch.mm) timed the
   same way in the same run.
Prints a table and writes the JSON (device, torch version, date). About a minute of GPU time.

``measure(kernels)`` scores any list of ``KernelSpec`` the same way (e.g. the course's reference kernels):

    import sys; sys.path.insert(0, "tools"); from gpu_speed import KernelSpec, measure
"""

import argparse
import datetime
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root))  # labops is not pip-installed on the GPU machine

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from labops import rtc, sgemm  # noqa: E402
from labops.exercises import speed  # noqa: E402


@dataclass
class KernelSpec:
    """One kernel to score. ``run``, ``native`` and ``reference`` take what ``make_inputs(generator)``
    returns (see ``speed.time_submission``). ``roof``: ``"memory"`` (give ``min_bytes``, read + written)
    or ``"gemm"`` (give ``mnk``)."""

    name: str
    roof: str
    make_inputs: Callable
    run: Callable
    reference: Callable
    native: Optional[Callable] = None
    min_bytes: Optional[int] = None
    mnk: Optional[tuple] = None
    check: Optional[Callable] = None


def check_spec(spec):
    memory = spec.roof == "memory" and isinstance(spec.min_bytes, int)
    gemm = spec.roof == "gemm" and isinstance(spec.mnk, tuple) and len(spec.mnk) == 3
    if not (memory or gemm):
        raise ValueError(f"measure: {spec.name}: roof must be 'memory' with min_bytes (an int) or 'gemm' with mnk "
                         f"(a tuple m, n, k), got roof={spec.roof!r}, min_bytes={spec.min_bytes!r}, mnk={spec.mnk!r}")


def roof_percent(spec, seconds, bandwidth, cublas_s):
    """% of the spec's roof for ``seconds``; ``cublas_s`` caches cuBLAS's time per (m, n, k)."""
    if spec.roof == "memory":
        return speed.memory_score(seconds, spec.min_bytes, bandwidth)
    if spec.mnk not in cublas_s:
        cublas_s[spec.mnk] = speed.cublas_sgemm_time(*spec.mnk)
    return speed.gemm_score(seconds, *spec.mnk, cublas_s=cublas_s[spec.mnk])


def milliseconds(timing):
    return timing.median_s * 1e3 if timing.reps else None  # None, not NaN: the JSON stays JSON


def cell(value, spec):
    return "-" if value is None else format(value, spec)


def measure(kernels, bandwidth=None):
    """A row per spec: its time and % of roof, native torch's, and its time over native's; ``bandwidth``
    (bytes/s) is measured here when not given. float32 matmuls run without TF32 throughout."""
    for spec in kernels:  # before any GPU time is spent
        check_spec(spec)
    bandwidth = bandwidth or speed.copy_bandwidth()
    cublas_s, rows = {}, []
    for spec in kernels:
        with speed.fp32_matmul():
            # the specs' runs are our own launches: one kernel on the current stream, no learner Python
            mine = speed.time_submission(spec.run, spec.make_inputs, spec.reference, check=spec.check,
                                         launch_is_ours=True)
            native = None
            if spec.native is not None:
                native = speed.time_submission(spec.native, spec.make_inputs, spec.reference, check=spec.check,
                                               launch_is_ours=True)
        row = {"name": spec.name, "roof": spec.roof, "ms": milliseconds(mine), "reps": mine.reps,
               "percent_of_roof": roof_percent(spec, mine.median_s, bandwidth, cublas_s) if mine.passed else None,
               "verdict": speed.verdict(mine), "reasons": list(mine.reasons)}
        if native is not None:
            both = mine.passed and native.passed
            row.update(native_ms=milliseconds(native), native_verdict=speed.verdict(native),
                       native_reasons=list(native.reasons),
                       native_percent_of_roof=roof_percent(spec, native.median_s, bandwidth, cublas_s)
                       if native.passed else None,
                       time_over_native=mine.median_s / native.median_s if both else None)
        rows.append(row)
    return rows


# ---- the examples ----

N_GELU = 2**26
GELU = rtc.kernel("gelu_exact", ["x"], ["y"], r"""
long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
if (i < x_numel) {
  const float v = x[i];
  y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
}""")

COPY = rtc.kernel("copy", ["x"], ["y"],
                  "long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; if (i < x_numel) y[i] = x[i];")


def one_per_thread(k, x):
    y = torch.empty_like(x)
    k(x, y, grid=(x.numel() + 255) // 256, block=256)
    return y


def vector(n):
    return lambda g: torch.randn(n, generator=g, device=g.device)


def sgemm_naive(ab):
    a, b = ab
    return sgemm.multiply(a, b, "naive")


def examples(n_gelu=N_GELU, size=1024):
    def matrices(g):
        return (torch.randn(size, size, generator=g, device=g.device),
                torch.randn(size, size, generator=g, device=g.device))

    return [
        KernelSpec("rtc exact GELU", "memory", vector(n_gelu), lambda x: one_per_thread(GELU, x),
                   lambda x: F.gelu(x.double()), native=F.gelu, min_bytes=2 * n_gelu * 4,
                   # atol: float32's 1 + erf cancels in the left tail, leaving errors of ~|x| * 6e-8 there
                   check=speed.close(rtol=1e-5, atol=1e-5)),
        KernelSpec("rtc naive SGEMM", "gemm", matrices, sgemm_naive,
                   lambda ab: torch.mm(ab[0].double(), ab[1].double()), native=lambda ab: torch.mm(*ab),
                   mnk=(size, size, size), check=speed.close(rtol=1e-4, atol=1e-5 * size)),
    ]


def tricks(n=N_GELU):
    """Each trick against time_submission, wrapped around an honest rtc copy: (trick, caught, how)."""
    def honest_copy(x):
        return one_per_thread(COPY, x)

    def timed(run):
        return speed.time_submission(run, vector(n), lambda x: x)

    fair = timed(honest_copy)
    lines = []
    cheat = speed.CachesByPointer(honest_copy)
    t = timed(cheat)
    lines.append(("caches its output by input pointer", not t.passed,
                  f"{cheat.hits} cache hit(s); {t.reasons[0] if t.reasons else 'passed every check'}"))
    cheat = speed.SkipsRepeatedInput(honest_copy)
    t = timed(cheat)
    lines.append(("skips work when a checksum repeats", cheat.skips == 0 or not t.passed,
                  f"{cheat.skips} skip(s) in {t.reps} reps: fresh values every rep"
                  + (f"; {t.reasons[0]}" if t.reasons else "")))
    t = timed(speed.LeavesWorkOnSideStream(honest_copy))
    full = t.median_s >= 0.8 * fair.median_s
    lines.append(("leaves its work on a side stream", not t.passed or full or speed.SIDE_STREAM in t.flags,
                  f"flags {list(t.flags)}; timed {t.median_s * 1e3:.3f} ms vs honest {fair.median_s * 1e3:.3f} ms "
                  f"(the current stream's events alone: {t.stream_median_s * 1e3:.3f} ms)"))
    return fair, lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write the JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_speed.py needs a CUDA GPU")
    bandwidth = speed.copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"copy bandwidth (read + write): {bandwidth / 1e9:.0f} GB/s", flush=True)

    fair, lines = tricks()
    print(f"\nhonest rtc copy of {N_GELU} floats: {fair.median_s * 1e3:.3f} ms, "
          f"{speed.memory_score(fair.median_s, 2 * N_GELU * 4, bandwidth):.0f}% of the copy roof")
    for trick, caught, how in lines:
        print(f"  {trick:36s} caught: {'yes' if caught else 'NO '}  {how}")

    rows = measure(examples(), bandwidth)
    print(f"\n{'kernel':18s} {'roof':6s} {'ms':>8s} {'% roof':>7s} {'torch ms':>9s} {'% roof':>7s} "
          f"{'/ torch':>8s}  verdict")
    for r in rows:
        print(f"{r['name']:18s} {r['roof']:6s} {cell(r['ms'], '8.3f'):>8s} {cell(r['percent_of_roof'], '7.1f'):>7s} "
              f"{cell(r.get('native_ms'), '9.3f'):>9s} {cell(r.get('native_percent_of_roof'), '7.1f'):>7s} "
              f"{cell(r.get('time_over_native'), '8.2f'):>8s}  {r['verdict']} {'; '.join(r['reasons'])}")

    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": datetime.date.today().isoformat(), "copy_GBps": bandwidth / 1e9,
            "honest_copy_ms": milliseconds(fair),
            "tricks": [{"trick": t, "caught": c, "how": h} for t, c, h in lines], "kernels": rows}, indent=1))
    if not all(caught for _, caught, _ in lines) or any(r["verdict"] != "ok" for r in rows):
        sys.exit("a trick was not caught, or an example kernel failed: see above")


if __name__ == "__main__":
    main()
