"""GPU machine: labops.sgemm's ladder against cuBLAS at 4096^3 in float32 (TF32 off), one run.

Each step is timed by labops.exercises.speed (L2 flushed, fresh inputs every rep, every rep checked
against cuBLAS by relative error, the launch hidden behind a sleep kernel) and scored as cuBLAS's time over
its time. Writes docs/rtc_sgemm_gpu.json's format to --out.

Usage: python tools/gpu_sgemm.py --out $OUT/rtc_sgemm_gpu.json [--size 4096]
"""

import argparse
import json
import os
import subprocess

import torch

from labops import sgemm
from labops.exercises import speed


def relative_error(limit):
    def check(outputs, expected):
        got, want = outputs.double(), expected.double()
        error = ((got - want).norm() / want.norm()).item()
        return None if error < limit else f"relative error {error:.2e} >= {limit:.0e}"
    return check


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    m = n = k = args.size
    # the device's copy of the tree may carry an older .git: the caller can say which commit it is
    commit = os.environ.get("LABOPS_COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                                               capture_output=True, text=True).stdout.strip()
    with speed.fp32_matmul():
        cublas_s = speed.cublas_sgemm_time(m, n, k)
        rows = []
        for step in sgemm.LADDER:
            def make_inputs(generator):
                return (torch.randn(m, k, device="cuda", generator=generator),
                        torch.randn(k, n, device="cuda", generator=generator))

            def run(inputs, step=step):
                return sgemm.multiply(*inputs, step)

            timing = speed.time_submission(run, make_inputs, lambda inputs: inputs[0] @ inputs[1],
                                           check=relative_error(1e-5), min_total_s=0.3, min_reps=5, warmup=1,
                                           launch_is_ours=True)
            rows.append({"step": step, "m": m, "n": n, "k": k, "ms": timing.median_s * 1e3,
                         "cublas_ms": cublas_s * 1e3, "percent_of_cublas": 100 * cublas_s / timing.median_s,
                         "tflops": 2 * m * n * k / timing.median_s / 1e12, "reps": timing.reps,
                         "verdict": speed.verdict(timing), "reasons": list(timing.reasons)})
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": commit,
              "cublas_tflops": 2 * m * n * k / cublas_s / 1e12, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{result['device']}, cuBLAS float32 (TF32 off) {m}^3: {cublas_s * 1e3:.2f} ms, "
          f"{result['cublas_tflops']:.1f} TFLOP/s")
    print(f"{'step':18} {'ms':>8} {'TFLOP/s':>8} {'% cuBLAS':>9}  verdict")
    for r in rows:
        print(f"{r['step']:18} {r['ms']:8.2f} {r['tflops']:8.1f} {r['percent_of_cublas']:9.1f}  {r['verdict']}")


if __name__ == "__main__":
    main()
