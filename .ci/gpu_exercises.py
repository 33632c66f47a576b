"""GPU machine: the CUDA kernel exercises on a GPU, in one run.

1. Parity: every variant of labops.exercises.cuda_corpus (and each reference) graded on the GPU, through
   the same check path as on a laptop (checked launches: rtc_cuda_checked.h). Rows go to --out's "parity";
   .ci/parity_table.py compares them with the CPU's.
2. Speed: each exercise's reference solution at a benchmark size, timed by labops.exercises.speed (L2
   flushed, fresh inputs, every rep checked, the launch hidden), as a share of its roof (copy bandwidth
   measured in this run, or cuBLAS without TF32 for the GEMM), beside native PyTorch and torch.compile of
   the same native code, and labops.sgemm's register-blocked step at the same GEMM size.

Usage: PYTHONPATH=$PWD python .ci/gpu_exercises.py --out $OUT/exercises_gpu.json [--skip-parity] [--skip-speed]
       [--exercises cuda_gelu ...]   (NVRTC compiles each variant: run one process per exercise in parallel)
"""

import argparse
import json
import subprocess
import time

import torch
import torch.nn.functional as F

from labops import rtc, sgemm
from labops.exercises import cuda, speed


def relative_error(limit):
    def check(outputs, expected):
        outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        for k, (got, want) in enumerate(zip(outputs, expected)):
            got, want = got.double(), want.double()
            if got.shape != want.shape:
                return f"output {k}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
            error = ((got - want).norm() / want.norm()).item()
            if not error < limit:
                return f"output {k}: relative error {error:.2e} >= {limit:.0e}"
        return None
    return check


def geometry(sh=1, sw=1, ph=1, pw=1):
    return torch.tensor([sh, sw, ph, pw], dtype=torch.int64, device="cuda")


# Per exercise: the case arguments of its setup at a benchmark size (as the exercise's cases give them),
# the native function of its inputs, and its minimal bytes (each input read once, each output written once).
N_GELU = 2**26
POOL = (64, 256, 56, 56)
SOFTMAX = (2**16, 1024)
GEMM = 4096
CONV = dict(C=256, H=112, W=112, k=3)
DEPTHWISE = dict(N=32, C=256, H=56, W=56, k=3)


def out_size(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def benchmarks():
    C, H, W, k = CONV["C"], CONV["H"], CONV["W"], CONV["k"]
    oh, ow = out_size(H, k, 1, 1), out_size(W, k, 1, 1)
    n, c, h, w = DEPTHWISE["N"], DEPTHWISE["C"], DEPTHWISE["H"], DEPTHWISE["W"]
    dk = DEPTHWISE["k"]
    return {
        "cuda_gelu": dict(args=(torch.randn(N_GELU), torch.randn(N_GELU)),
                          native=lambda x, gy: (F.gelu(x), torch.ops.aten.gelu_backward(gy, x)),
                          bytes=4 * N_GELU * 4),
        "cuda_global_avg_pool": dict(args=(torch.randn(*POOL),), native=lambda x: x.mean((2, 3)),
                                     bytes=4 * (POOL[0] * POOL[1] * POOL[2] * POOL[3] + POOL[0] * POOL[1])),
        "cuda_softmax": dict(args=(torch.randn(*SOFTMAX),), native=lambda x: torch.softmax(x, -1),
                             bytes=2 * 4 * SOFTMAX[0] * SOFTMAX[1]),
        "cuda_sgemm": dict(args=(torch.randn(GEMM, GEMM), torch.randn(GEMM, GEMM)), native=torch.mm,
                           gemm=(GEMM, GEMM, GEMM)),
        "cuda_im2col": dict(args=(torch.randn(C, H, W), k, k, 1, 1, 1, 1),
                            native=lambda img, geom: F.unfold(img[None], (k, k), padding=1).view(C, k, k, oh, ow),
                            bytes=4 * (C * H * W + C * k * k * oh * ow)),
        "cuda_col2im": dict(args=(torch.randn(C, k, k, oh, ow), H, W, 1, 1, 1, 1),
                            native=lambda cols, geom: F.fold(cols.reshape(1, C * k * k, oh * ow), (H, W), (k, k),
                                                             padding=1)[0],
                            bytes=4 * (C * H * W + C * k * k * oh * ow)),
        "cuda_col2im_atomic": dict(args=(torch.randn(C, k, k, oh, ow), H, W, 1, 1, 1, 1),
                                   native=lambda cols, geom: F.fold(cols.reshape(1, C * k * k, oh * ow), (H, W),
                                                                    (k, k), padding=1)[0],
                                   bytes=4 * (C * H * W + C * k * k * oh * ow)),
        "cuda_depthwise_weight_grad": dict(
            args=(torch.randn(n, c, h, w), torch.randn(n, c, out_size(h, dk, 1, 1), out_size(w, dk, 1, 1)),
                  dk, dk, 1, 1, 1, 1),
            native=lambda x, gy, geom: torch.nn.grad.conv2d_weight(x, (c, 1, dk, dk), gy, padding=1, groups=c),
            bytes=4 * (n * c * h * w * 2 + c * dk * dk)),
    }


def submission_runner(exercise_id, args, solution=None):
    """(make_inputs, run) for ``solution`` (default: the exercise's reference) on the setup of ``args``."""
    problem, solution = cuda.PROBLEMS[exercise_id], solution or cuda.SOLUTIONS[exercise_id]
    inputs, out_shapes, sizes = problem.setup(*args)
    launch = cuda._check_launch(solution.launch(**sizes), "launch")
    kernel = rtc.kernel(problem.kernel_name, list(problem.inputs), list(problem.outputs), solution.body)
    shapes = [(t.shape, t.dtype) for t in inputs]
    constants = [t.cuda() for t in inputs]

    def make_inputs(generator):
        return tuple(torch.randn(shape, generator=generator, device="cuda") if dtype.is_floating_point else constant
                     for (shape, dtype), constant in zip(shapes, constants))

    def run(ins):
        outs = [torch.full(s, problem.fill, device="cuda") if problem.fill == 0.0 else torch.empty(s, device="cuda")
                for s in out_shapes]
        kernel(*ins, *outs, grid=launch.grid, block=launch.block, shared_mem=launch.shared_mem)
        return tuple(outs)
    return make_inputs, run


def speed_rows(bandwidth):
    rows = []
    with speed.fp32_matmul():
        cublas_s = speed.cublas_sgemm_time(GEMM, GEMM, GEMM)
        for exercise_id, spec in benchmarks().items():
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
            if exercise_id in cuda.FAST_SOLUTIONS:
                candidates.append(("fast", submission_runner(exercise_id, spec["args"], cuda.FAST_SOLUTIONS[exercise_id])[1]))
            for label, fn in candidates:
                start = time.perf_counter()
                timing = speed.time_submission(fn, make_inputs, reference, check=relative_error(1e-4),
                                               min_total_s=0.2, min_reps=5, warmup=2, launch_is_ours=True)
                if "gemm" in spec:
                    percent = 100 * cublas_s / timing.median_s
                else:
                    percent = speed.memory_score(timing.median_s, spec["bytes"], bandwidth)
                row[label] = {"ms": timing.median_s * 1e3, "percent_of_roof": percent, "reps": timing.reps,
                              "verdict": speed.verdict(timing), "reasons": list(timing.reasons),
                              "wall_s": time.perf_counter() - start}
            row["roof"] = "cuBLAS fp32, TF32 off" if "gemm" in spec else "copy bandwidth"
            rows.append(row)
        # the fast step of the GEMM ladder, at the same size
        make_inputs = lambda g: (torch.randn(GEMM, GEMM, generator=g, device="cuda"),  # noqa: E731
                                 torch.randn(GEMM, GEMM, generator=g, device="cuda"))
        timing = speed.time_submission(lambda ab: (sgemm.multiply(*ab, "register_blocked"),), make_inputs,
                                       lambda ab: (ab[0] @ ab[1],), check=relative_error(1e-5), min_total_s=0.2,
                                       min_reps=5, launch_is_ours=True)
        rows.append({"exercise": "labops.sgemm register_blocked", "roof": "cuBLAS fp32, TF32 off",
                     "reference": {"ms": timing.median_s * 1e3, "percent_of_roof": 100 * cublas_s / timing.median_s,
                                   "reps": timing.reps, "verdict": speed.verdict(timing),
                                   "reasons": list(timing.reasons)}})
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--skip-parity", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--exercises", nargs="*", help="grade only these exercises' variants")
    parser.add_argument("--variant", help="grade this one variant and print its row as JSON (a kernel that "
                                          "hangs the GPU then costs one process: .ci/gpu_exercises.sh)")
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
