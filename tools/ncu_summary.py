#!/usr/bin/env python
"""One line per kernel from the text report `tools/gpu_profile.sh` writes ($OUT/ncu_<suite>.txt):
which case and implementation launched it, its time, DRAM and SM throughput, registers and occupancy.
gpu_profile.py prints a "=== case :: implementation" line before each case's launches, and ncu a
"==PROF== Profiling" line per launch, in the same order; the report's sections follow at the end.
Usage: python3 tools/ncu_summary.py ncu_depthwise.txt [more reports]"""
import re
import sys

METRICS = ["Duration", "DRAM Throughput", "Compute (SM) Throughput", "Registers Per Thread",
           "Achieved Occupancy", "Theoretical Occupancy"]


def summarize(path):
    lines = open(path, errors="replace").read().splitlines()
    owners, case = [], None  # owners[i]: the case of the i-th profiled launch
    for line in lines:
        if line.startswith("=== "):
            case = line[4:].strip()
        elif line.startswith("==PROF== Profiling"):
            owners.append(case)
    kernels, current = [], None
    for line in lines:
        header = re.match(r"\s{2}(\S.*?)\s+\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", line)
        if header:
            owner = owners[len(kernels)] if len(kernels) < len(owners) else "?"
            current = {"case": owner, "kernel": header.group(1)[:80]}
            kernels.append(current)
        elif current:
            for name in METRICS:
                value = re.match(rf"\s+{re.escape(name)}\s+(\S+)\s+([\d.,]+)", line)
                if value and name not in current:
                    current[name] = f"{value.group(2)} {value.group(1)}"
    for k in kernels:
        print(f"[{k['case']}] {k['kernel']}")
        print("    " + " | ".join(f"{name}: {k[name]}" for name in METRICS if name in k))


for report in sys.argv[1:]:
    summarize(report)
