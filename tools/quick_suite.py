#!/usr/bin/env python
"""Quick GPU look at a few rows of benchmark suites: labops, native and peers,
eager and graph, as % of copy bandwidth, in one run (no JSON).
Usage: python3 tools/quick_suite.py suite[:op substring] ..."""
import importlib
import sys

import torch

import labops.ops  # noqa: F401
from labops.bench import copy_bandwidth, graph_ms, time_ms

bw = copy_bandwidth("cuda")
print(f"copy {bw / 1e9:.0f} GB/s")
for spec in sys.argv[1:]:
    suite, _, want = spec.partition(":")
    for case in importlib.import_module(f"labops.bench.{suite}").cases("cuda"):
        if want and want not in case.op:
            continue
        line = f"{case.op:26s} {case.shape:24s} {str(case.dtype)[6:]:8s}"
        for name, fn in [("labops", case.labops), ("native", case.native), *case.peers.items()]:
            eager, graph = time_ms(fn, "cuda"), graph_ms(fn)
            pct = lambda ms: case.nbytes / (ms * 1e-3) / bw * 100 if ms else 0  # noqa: E731
            line += f" | {name} {pct(eager):4.0f}/{pct(graph):4.0f}%"
        print(line, flush=True)
        torch.cuda.empty_cache()
