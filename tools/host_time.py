#!/usr/bin/env python
"""Host time per eager call of every labops op against its native equivalent.

Tiny inputs, so that the kernel costs next to nothing and what is timed is the
host's work: the Python face, the dispatcher, the autograd kernel, allocation.
Three modes per op: forward with no input requiring grad ("fwd"), forward with
requires_grad ("fwd rg", the graph is built and dropped) and forward+backward
("fwd+bwd", torch.autograd.grad with a fixed grad_output). Each figure is the
best of --repeats bursts of --calls calls (labops and native bursts alternate); on CUDA the burst ends with one
synchronize (tiny kernels: the host is the bottleneck, the queue never fills).

Usage: PYTHONPATH=. python tools/host_time.py [--device cpu|cuda|all] [--json PATH]
       PYTHONPATH=. python tools/host_time.py --device cuda --ops conv2d_mm --profile fwd   (where the time goes)
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import labops


def _cases(device):
    """(name, labops fn, native fn, native name, inputs, indices of differentiable inputs)."""
    t = lambda *shape: torch.randn(*shape, device=device)  # noqa: E731
    x = t(2, 8, 8, 8)
    dw_w, dw_b = t(8, 1, 3, 3), t(8)
    mm_x, mm_w, mm_b = t(2, 4, 8, 8), t(8, 4, 3, 3), t(8)
    cols = F.unfold(x, 3, padding=1)
    logits, target = t(16, 10), torch.randint(0, 10, (16,), device=device)
    return [
        ("tanh", labops.tanh, torch.tanh, "torch.tanh", (x,), (0,)),
        ("gelu", labops.gelu, F.gelu, "F.gelu", (x,), (0,)),
        ("global_avg_pool2d", labops.global_avg_pool2d, lambda a: a.mean((-2, -1), keepdim=True),
         "x.mean((-2,-1),keepdim=True)", (x,), (0,)),
        ("depthwise_conv2d", lambda a, w, b: labops.depthwise_conv2d(a, w, b, 1, 1),
         lambda a, w, b: F.conv2d(a, w, b, 1, 1, 1, 8), "F.conv2d(groups=C)", (x, dw_w, dw_b), (0, 1, 2)),
        ("conv2d_mm", lambda a, w, b: labops.conv2d_mm(a, w, b, 1, 1),
         lambda a, w, b: F.conv2d(a, w, b, 1, 1), "F.conv2d", (mm_x, mm_w, mm_b), (0, 1, 2)),
        ("im2col", lambda a: labops.im2col(a, 3, 1, 1), lambda a: F.unfold(a, 3, 1, 1), "F.unfold", (x,), (0,)),
        ("col2im", lambda c: labops.col2im(c, (8, 8), 3, 1, 1), lambda c: F.fold(c, (8, 8), 3, 1, 1),
         "F.fold", (cols,), (0,)),
        ("upsample_bilinear2d", lambda a: labops.upsample_bilinear2d(a, scale_factor=2),
         lambda a: F.interpolate(a, scale_factor=2, mode="bilinear", align_corners=False), "F.interpolate",
         (x,), (0,)),
        ("softmax", lambda a: labops.softmax(a, -1), lambda a: torch.softmax(a, -1), "torch.softmax",
         (logits,), (0,)),
        ("cross_entropy", labops.cross_entropy, F.cross_entropy, "F.cross_entropy", (logits, target), (0,)),
        ("reorg(crd)", lambda a: labops.reorg(a, 2, "crd"), lambda a: F.pixel_unshuffle(a, 2),
         "F.pixel_unshuffle", (x,), (0,)),
    ]


def _time(step, calls, repeats, sync):
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            step()
        sync()
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6  # µs per call


def _steps(fn, inputs, diff):
    plain = tuple(inputs)
    grad_in = tuple(a.detach().requires_grad_() if i in diff else a for i, a in enumerate(inputs))
    wrt = tuple(grad_in[i] for i in diff)
    g = torch.ones_like(fn(*plain))
    return {
        "fwd": lambda: fn(*plain),
        "fwd rg": lambda: fn(*grad_in),
        "fwd+bwd": lambda: torch.autograd.grad(fn(*grad_in), wrt, g),
    }


def measure(device, calls, repeats, ops=None):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for name, mine, native, native_name, inputs, diff in _cases(device):
        if ops and name not in ops:
            continue
        ours, theirs = _steps(mine, inputs, diff), _steps(native, inputs, diff)
        for mode in ours:
            for step in (ours[mode], theirs[mode]):  # warm up: first calls allocate, compile nothing
                for _ in range(50):
                    step()
            a = b = float("inf")
            for _ in range(repeats):  # alternate the bursts: a slow spell of a shared machine hits both sides
                a = min(a, _time(ours[mode], calls, 1, sync))
                b = min(b, _time(theirs[mode], calls, 1, sync))
            yield {"device": device, "op": name, "mode": mode, "labops_us": round(a, 2),
                   "native": native_name, "native_us": round(b, 2), "ratio": round(a / b, 2)}


def profile_host(device, ops, mode, calls=200):
    """torch.profiler over `calls` eager calls of each op in `mode`, labops then native: which host
    work (ATen ops, CUDA runtime calls such as a synchronizing copy) each call pays for."""
    from torch.profiler import ProfilerActivity, profile

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    for name, mine, native, native_name, inputs, diff in _cases(device):
        if name not in ops:
            continue
        for who, fn in (("labops", mine), (native_name, native)):
            step = _steps(fn, inputs, diff)[mode]
            for _ in range(50):
                step()
            sync()
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    step()
                sync()
            print(f"\n### {name} {mode}, {who}: {calls} calls on {device}")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))


def _commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (default 1: tiny inputs run on one thread anyway, and an OpenMP "
                         "region on a busy machine costs milliseconds that are not host time)")
    ap.add_argument("--ops", nargs="*", help="only these ops (names as in the table)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--profile", metavar="MODE", choices=["fwd", "fwd rg", "fwd+bwd"],
                    help="instead of timing, print a torch.profiler table per op of --ops in this mode")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if "cuda" in devices and not torch.cuda.is_available():
        if args.device == "cuda":
            sys.exit("host_time: no CUDA device")
        devices.remove("cuda")
    if args.profile:
        for device in devices:
            profile_host(device, args.ops or [name for name, *_ in _cases(device)], args.profile)
        return
    meta = {"torch": torch.__version__, "commit": _commit(), "python": platform.python_version(),
            "threads": torch.get_num_threads(), "calls": args.calls, "repeats": args.repeats, "bursts": "alternating",
            "cpu": platform.processor() or platform.machine(),
            "gpu": torch.cuda.get_device_name() if "cuda" in devices else None}
    print(f"host time per call, µs (best of {args.repeats} x {args.calls} calls); torch {meta['torch']}, "
          f"commit {meta['commit']}" + (f", {meta['gpu']}" if meta["gpu"] else ""))
    rows = []
    for device in devices:
        torch.manual_seed(0)
        print(f"\n{'device':6} {'op':20} {'mode':8} {'labops':>8} {'native':>8} {'ratio':>6}  native")
        for row in measure(device, args.calls, args.repeats, args.ops):
            rows.append(row)
            print(f"{row['device']:6} {row['op']:20} {row['mode']:8} {row['labops_us']:8.2f} "
                  f"{row['native_us']:8.2f} {row['ratio']:6.2f}  {row['native']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
