#!/usr/bin/env python
"""Is an eager benchmark row bound by the host or by the GPU? For one case of a suite, labops and
native: the host's time to issue one call (200 calls queued back to back, best of 5, the GPU
running behind), the eager time per call the benchmark reports (labops.bench.time_ms) and the
GPU time of the same call replayed from a CUDA graph (graph_ms). When the host time is close to
or above the graph time, the eager figure measures the host.
Usage (GPU machine): python3 tools/host_vs_gpu.py pooling "global_avg_pool2d fwd+bwd" 256x512x14x14 float32"""
import importlib
import sys
import time

import torch

import labops.ops  # noqa: F401
from labops.bench import graph_ms, time_ms

suite, op, shape, dtype = sys.argv[1:5]
for case in importlib.import_module(f"labops.bench.{suite}").cases("cuda"):
    if (case.op, case.shape, str(case.dtype).replace("torch.", "")) != (op, shape, dtype):
        continue
    for name, fn in [("labops", case.labops), ("native", case.native)]:
        for _ in range(20):
            fn()
        host = float("inf")
        for _ in range(5):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(200):
                fn()
            host = min(host, (time.perf_counter() - start) / 200)
            torch.cuda.synchronize()
        print(f"{name}: host {host * 1e6:.1f} us/call, eager {time_ms(fn, 'cuda') * 1e3:.1f} us, "
              f"graph {graph_ms(fn) * 1e3:.1f} us")
