"""GPU machine: the CUDA and Triton kernel exercises on a GPU, in one run.

1. Parity: every variant of labops.exercises.cuda_corpus (and each reference) graded on the GPU, through
   the same check path as on a laptop (checked launches: rtc_cuda_checked.h). Rows go to --out's "parity";
   tools/parity_table.py compares them with the CPU's. With --triton-parity, every variant of
   labops.exercises.triton_corpus too, compiled by Triton for the GPU (on the CPU Triton's interpreter runs
   them, and tests/test_triton_exercises.py asserts each names its planted mistake): rows in
   "parity_triton", each variant's verdict and the mistake named, which must be the planted one.
2. Speed: each exercise's reference solution at a benchmark size, timed by labops.exercises.speed (L2
   flushed, fresh inputs, every rep checked, the launch hidden), as a share of its roof (copy bandwidth
   measured in this run, or cuBLAS without TF32 for the GEMM), beside native PyTorch and torch.compile of
   the same native code, and labops.sgemm's register-blocked step at the same GEMM size.

Usage: PYTHONPATH=$PWD python tools/gpu_exercises.py --out $OUT/exercises_gpu.json [--skip-parity] [--skip-speed]
       [--triton-parity] [--exercises cuda_gelu ...]   (NVRTC compiles each variant: run one process per exercise in parallel)
"""

import argparse
import importlib.util
import json
import subprocess
import time

import torch

from labops import sgemm
from labops.exercises import cuda, speed
# the benchmark sizes, the native functions and the roofs: one definition, shared with `labops speed-board`
from labops.exercises.speed_board import GEMM, benchmarks, relative_error, submission_runner


def geometry(sh=1, sw=1, ph=1, pw=1):
    return torch.tensor([sh, sw, ph, pw], dtype=torch.int64, device="cuda")


def speed_rows(bandwidth):
    rows = []
    with speed.fp32_matmul():
        cublas_s = {torch.float32: speed.cublas_sgemm_time(GEMM, GEMM, GEMM)}
        for exercise_id, spec in benchmarks().items():
            if exercise_id.startswith("triton_") and importlib.util.find_spec("triton") is None:
                continue
            make_inputs, run = submission_runner(exercise_id, spec["args"])
            native = spec["native"]
            compiled = torch.compile(native)

            def reference(ins, native=native):
                out = native(*ins)
                return out if isinstance(out, tuple) else (out,)

            def as_tuple(fn):
                return lambda ins: (lambda out: out if isinstance(out, tuple) else (out,))(fn(*ins))

            row = {"exercise": exercise_id}
            candidates = [("reference", run), ("native", as_tuple(native)), ("compiled", as_tuple(compiled))]
            fast = cuda.FAST_SOLUTIONS.get(exercise_id)
            if exercise_id.startswith("triton_"):
                from labops.exercises import triton_corpus

                fast = triton_corpus.FAST.get(exercise_id)
            if fast is not None:
                candidates.append(("fast", submission_runner(exercise_id, spec["args"], fast)[1]))
            for label, fn in candidates:
                start = time.perf_counter()
                timing = speed.time_submission(fn, make_inputs, reference, check=relative_error(1e-4),
                                               min_total_s=0.2, min_reps=5, warmup=2, launch_is_ours=True)
                if "gemm" in spec:
                    dtype = spec.get("dtype", torch.float32)  # triton_matmul: against cuBLAS's float16 GEMM
                    if dtype not in cublas_s:
                        cublas_s[dtype] = speed.cublas_sgemm_time(GEMM, GEMM, GEMM, dtype=dtype)
                    percent = 100 * cublas_s[dtype] / timing.median_s
                else:
                    percent = speed.memory_score(timing.median_s, spec["bytes"], bandwidth)
                row[label] = {"ms": timing.median_s * 1e3, "percent_of_roof": percent, "reps": timing.reps,
                              "verdict": speed.verdict(timing), "reasons": list(timing.reasons),
                              "wall_s": time.perf_counter() - start}
            row["roof"] = ("cuBLAS fp16" if spec.get("dtype") == torch.float16 else "cuBLAS fp32, TF32 off") \
                if "gemm" in spec else "copy bandwidth"
            rows.append(row)
        # the fast step of the GEMM ladder, at the same size
        make_inputs = lambda g: (torch.randn(GEMM, GEMM, generator=g, device="cuda"),  # noqa: E731
                                 torch.randn(GEMM, GEMM, generator=g, device="cuda"))
        timing = speed.time_submission(lambda ab: (sgemm.multiply(*ab, "register_blocked"),), make_inputs,
                                       lambda ab: (ab[0] @ ab[1],), check=relative_error(1e-5), min_total_s=0.2,
                                       min_reps=5, launch_is_ours=True)
        rows.append({"exercise": "labops.sgemm register_blocked", "roof": "cuBLAS fp32, TF32 off",
                     "reference": {"ms": timing.median_s * 1e3,
                                   "percent_of_roof": 100 * cublas_s[torch.float32] / timing.median_s,
                                   "reps": timing.reps, "verdict": speed.verdict(timing),
                                   "reasons": list(timing.reasons)}})
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--skip-parity", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--exercises", nargs="*", help="grade only these exercises' variants")
    parser.add_argument("--triton-parity", action="store_true",
                        help="grade labops.exercises.triton_corpus compiled on the GPU (rows in 'parity_triton')")
    parser.add_argument("--variant", help="grade this one variant and print its row as JSON (a kernel that "
                                          "hangs the GPU then costs one process: tools/gpu_exercises.sh)")
    args = parser.parse_args()
    if args.variant:
        import faulthandler
        import os

        from labops.exercises import cuda_corpus

        # before the shell's time limit kills it (recorded as a hang): where it was stuck
        faulthandler.dump_traceback_later(float(os.environ.get("VARIANT_TIMEOUT", 90)) - 15)
        start = time.perf_counter()
        variant = next(v for v in cuda_corpus.CORPUS if v.id == args.variant)
        row = cuda_corpus.grade(variant, "cuda")._asdict()
        row["seconds"] = time.perf_counter() - start
        print("ROW " + json.dumps(row))
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": commit}
    if not args.skip_parity:
        from labops.exercises import cuda_corpus

        start = time.perf_counter()
        rows = cuda_corpus.grade_corpus(device="cuda", exercises=args.exercises or None)
        result["parity"] = [r._asdict() for r in rows]
        result["parity_seconds"] = time.perf_counter() - start
        wrong = [r for r in result["parity"] if r["named"] != r["planted"]]
        print(f"parity: {len(rows)} variants graded on the GPU in {result['parity_seconds']:.0f} s; "
              f"{len(wrong)} named another mistake than the planted one")
        for r in wrong[:20]:
            print("  ", r)
    if args.triton_parity:
        from labops.exercises import triton_corpus

        start = time.perf_counter()
        rows = triton_corpus.grade_corpus(device="cuda", exercises=args.exercises or None)
        result["parity_triton"] = [r._asdict() for r in rows]
        wrong = [r for r in result["parity_triton"] if r["named"] != r["planted"] or r["passed"] != (r["planted"] is None)]
        print(f"triton parity: {len(rows)} variants graded compiled on the GPU in {time.perf_counter() - start:.0f} s; "
              f"{len(wrong)} got another verdict than under the interpreter (a planted mistake named, a reference "
              f"passing)")
        for r in wrong:
            print("  ", r)
    if args.skip_speed:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        return
    bandwidth = speed.copy_bandwidth()
    result["copy_bandwidth"] = bandwidth
    result["speed"] = speed_rows(bandwidth)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{result['device']}: copy bandwidth {bandwidth / 1e9:.0f} GB/s (read + write)")
    print(f"{'exercise':32} {'roof':22} {'ref %':>7} {'fast %':>7} {'torch %':>8} {'compile %':>9}")
    for r in result["speed"]:
        cells = [r.get(k, {}).get("percent_of_roof") for k in ("reference", "fast", "native", "compiled")]
        text = ["-" if v is None else f"{v:.1f}" for v in cells]
        print(f"{r['exercise']:32} {r['roof']:22} {text[0]:>7} {text[1]:>7} {text[2]:>8} {text[3]:>9}")


if __name__ == "__main__":
    main()
