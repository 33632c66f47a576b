#!/usr/bin/env python
"""torch.profiler over a few eager calls of one benchmark case: where the
wall time goes between kernels (host work, synchronizations, gaps).
Usage: python3 tools/profile_timeline.py suite "op" "shape" dtype [impl]"""
import importlib
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import labops.ops  # noqa: F401

suite, op, shape, dtype = sys.argv[1:5]
impl = sys.argv[5] if len(sys.argv) > 5 else "labops"
for case in importlib.import_module(f"labops.bench.{suite}").cases("cuda"):
    if (case.op, case.shape, str(case.dtype).replace("torch.", "")) != (op, shape, dtype):
        continue
    fn = case.labops if impl == "labops" else case.native if impl == "native" else case.peers[impl]
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    print(f"### {op} {shape} {dtype} {impl}")
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=18, max_name_column_width=70))
