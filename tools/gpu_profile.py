#!/usr/bin/env python
"""Profile chosen benchmark cases under Nsight Compute: the evidence behind a
row that misses its goal.

Each selected case (labops, native and every peer) is warmed up first
(torch.compile compiles, cuDNN picks its algorithm), then run once between
cudaProfilerStart/Stop, so `ncu --profile-from-start off` sees only those
launches. The order of the printed kernels is the order below; the script
prints which case each launch belongs to on stderr.

Usage (GPU machine):
  ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section Occupancy --section LaunchStats \
      python3 tools/gpu_profile.py upsample "bilinear fwd" "16x64x128x128 x2" float32
Arguments: suite, op, shape, dtype, then more (op, shape, dtype) triples.
"""

from __future__ import annotations

import importlib
import sys

import torch

import labops.ops  # noqa: F401  (loads the compiled library)


def main(argv):
    suite, rest = argv[0], argv[1:]
    wanted = {tuple(rest[i:i + 3]) for i in range(0, len(rest), 3)}
    # A suite's cases share loop variables with their lambdas: run each case as it is yielded.
    for case in importlib.import_module(f"labops.bench.{suite}").cases("cuda"):
        if (case.op, case.shape, str(case.dtype).replace("torch.", "")) not in wanted:
            continue
        for name, fn in [("labops", case.labops), (case.native_name, case.native), *case.peers.items()]:
            for _ in range(3):  # warm-up: compile, autotune, pick algorithms
                fn()
            torch.cuda.synchronize()
            print(f"=== {case.op} {case.shape} {case.dtype} :: {name}", file=sys.stderr, flush=True)
            torch.cuda.cudart().cudaProfilerStart()
            fn()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1:])
