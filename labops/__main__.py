"""labops command line: doctor, build, bench, exercises, audit-grades, speed-board.

    labops doctor     what is installed, build the ops, check each (forward and backward, every
                      device) against native PyTorch in float64
    labops build      compile the ops now (instead of on first use)
    labops bench      labops vs native PyTorch vs copy bandwidth
    labops exercises  list the classroom exercises, or show one's signature (labops exercises tanh_backward)
    labops audit-grades  after nbgrader autograde: flag every score that is not the trusted one
    labops speed-board   on a GPU: time every student's CUDA kernels of an assignment, write the leaderboard
"""

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time


def _version_of(cmd):
    path = shutil.which(cmd[0])
    if path is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return path
    if not out:
        return path
    if os.path.basename(cmd[0]) == "nvcc":  # "Cuda compilation tools, release 13.0, V13.0.88"
        return next((line for line in out if "release" in line), out[-1])
    return out[0]


def _shown(path) -> str:
    """``path`` with the home folder written ``~``: the report names no user, and a pasted one stays short."""
    path, home = str(path), os.path.expanduser("~")
    return "~" + path[len(home):] if home not in ("", "/") and (path + "/").startswith(home + "/") else path


def doctor() -> int:
    import torch

    from labops import _build

    ok = True
    print(f"python   {platform.python_version()} ({_shown(sys.executable)})")
    print(f"torch    {torch.__version__}  (CUDA build: {torch.version.cuda or 'no'}, "
          f"CPU SIMD: {torch.backends.cpu.get_cpu_capability()})")
    gpu = torch.cuda.is_available()
    print(f"GPU      {torch.cuda.get_device_name() if gpu else 'none visible (CPU ops only)'}")
    cxx = os.environ.get("CXX", "c++")
    print(f"compiler {_version_of([cxx, '--version']) or 'MISSING: install g++ (apt install g++)'}")
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    print(f"ninja    {_version_of(['ninja', '--version']) or 'MISSING: pip install ninja'}")
    nvcc = _build.find_nvcc()
    print(f"nvcc     {_version_of([nvcc, '--version']) if nvcc else 'not found'}"
          + ("" if nvcc or not gpu else "  (needed for the CUDA ops: set CUDA_HOME)"))
    try:
        p = _build.plan()
        print(f"cache    {_shown(p.library)} ({'built' if p.library.exists() else 'not built yet'})")
        start = time.monotonic()
        _build.load_library()
        print(f"build    ok, loaded in {time.monotonic() - start:.1f} s")
    except Exception as exc:  # report, do not crash: that is the doctor's job
        print(f"build    FAILED\n{exc}")
        return 1

    from labops.testing import rel_error

    devices = ["cpu"] + (["cuda"] if gpu else [])
    for device in devices:
        for name, labops_fn, native_fn, inputs in _doctor_cases():
            try:
                got = _forward_and_grads(labops_fn, [t.to(device) for t in inputs])
                want = _forward_and_grads(native_fn, inputs)
                err = max(rel_error(g, w) for g, w in zip(got, want))
                good = err < 1e-9
                ok &= good
                print(f"{device:5s} {name:30s} fwd+bwd rel_error {err:.1e}  {'ok' if good else 'WRONG'}")
            except Exception as exc:
                ok = False
                print(f"{device:5s} {name:30s} FAILED: {exc}")
    print("all good" if ok else "some checks failed (see above)")
    return 0 if ok else 1


def _forward_and_grads(fn, inputs):
    """fn's output and the gradients of sum(output * w) for every floating input (w: fixed weights)."""
    import torch

    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*leaves)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).reshape(out.shape)
    floating = [t for t in leaves if t.requires_grad]
    grads = torch.autograd.grad((out * weights).sum(), floating)
    return [out, *grads]


def _doctor_cases():
    """(name, labops op, native PyTorch equivalent, float64 inputs) for every op and mode."""
    import torch
    import torch.nn.functional as F

    import labops

    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    def space_to_depth(x, s):  # TensorFlow's order: channel (dy*s + dx)*C + c
        n, c, h, w = x.shape
        return x.reshape(n, c, h // s, s, w // s, s).permute(0, 3, 5, 1, 2, 4).reshape(n, c * s * s, h // s, w // s)

    x4 = randn(2, 8, 6, 6)
    cases = [("tanh", labops.tanh, torch.tanh, [randn(101)])]
    natives = {"none": F.gelu, "tanh": lambda t: F.gelu(t, approximate="tanh"),
               "sigmoid": lambda t: t * torch.sigmoid(1.702 * t)}
    for a in labops.GELU_APPROXIMATIONS:
        cases.append((f"gelu({a})", lambda t, a=a: labops.gelu(t, a), natives[a], [randn(101)]))
    cases += [
        ("global_avg_pool2d", labops.global_avg_pool2d, lambda t: t.mean((-2, -1), keepdim=True), [x4]),
        ("depthwise_conv2d", lambda t, w, b: labops.depthwise_conv2d(t, w, b, 2, 1, 1),
         lambda t, w, b: F.conv2d(t, w, b, 2, 1, 1, groups=8), [x4, randn(16, 1, 3, 3), randn(16)]),
        ("conv2d_mm", lambda t, w, b: labops.conv2d_mm(t, w, b, 1, 1, 2),
         lambda t, w, b: F.conv2d(t, w, b, 1, 1, 2), [x4, randn(4, 8, 3, 3), randn(4)]),
        ("im2col", lambda t: labops.im2col(t, 3, 2, 1), lambda t: F.unfold(t, 3, padding=1, stride=2), [x4]),
        ("col2im", lambda t: labops.col2im(t, (6, 6), 3, 2, 1),
         lambda t: F.fold(t, (6, 6), 3, padding=1, stride=2), [randn(2, 72, 9)]),
    ]
    for corners in (False, True):
        cases.append((f"upsample(align_corners={corners})",
                      lambda t, c=corners: labops.upsample_bilinear2d(t, scale_factor=2, align_corners=c),
                      lambda t, c=corners: F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=c),
                      [x4]))
    target = torch.randint(0, 8, (5,), generator=g)
    cases += [
        ("softmax", lambda t: labops.softmax(t, -1), lambda t: torch.softmax(t, -1), [randn(5, 8)]),
        ("cross_entropy", lambda t: labops.cross_entropy(t, target.to(t.device)),
         lambda t: F.cross_entropy(t, target), [randn(5, 8)]),
        ("reorg(crd)", lambda t: labops.reorg(t, 2, "crd"), lambda t: F.pixel_unshuffle(t, 2), [x4]),
        ("reorg(dcr)", lambda t: labops.reorg(t, 2, "dcr"), lambda t: space_to_depth(t, 2), [x4]),
        ("reorg(darknet)", lambda t: labops.reorg(t, 2, "darknet"),
         lambda t: space_to_depth(t.reshape(2, 2, 12, 12), 2).reshape(2, 32, 3, 3), [x4]),
    ]
    running_mean, running_var = randn(8), randn(8).abs() + 0.5
    for training in (True, False):  # in training the batch's statistics, in evaluation the running ones
        stats = (None, None) if training else (running_mean, running_var)
        cases.append((f"batch_norm(training={training})",
                      lambda t, w, b, s=stats, tr=training: labops.batch_norm(
                          t, *(None if v is None else v.to(t.device) for v in s), w, b, training=tr),
                      lambda t, w, b, s=stats, tr=training: F.batch_norm(t, *s, w, b, training=tr),
                      [x4, randn(8), randn(8)]))
    return cases


def build() -> int:
    from labops import _build

    p = _build.plan()
    if p.library.exists():
        print(f"already built: {p.library}")
    _build.load_library()
    print(f"ready: {p.library}")
    return 0


def main(argv=None) -> int:
    from labops import __version__

    parser = argparse.ArgumentParser(prog="labops", description="labops: the course's compiled ops")
    parser.add_argument("--version", action="version", version=f"labops {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="check the toolchain, build the ops, check each against native PyTorch")
    sub.add_parser("build", help="compile the ops ahead of time")
    sub.add_parser("bench", help="benchmark against native PyTorch", add_help=False)
    ex = sub.add_parser("exercises", help="list the classroom exercises, or show one's signature")
    ex.add_argument("exercise_id", nargs="?", help="an exercise id, e.g. tanh_backward")
    audit = sub.add_parser("audit-grades", help="after nbgrader autograde: every gradebook score that is not "
                           "the trusted one (exit status 1 when there is any)")
    audit.add_argument("course", nargs="?", default=".", help="the course folder (default: here)")
    audit.add_argument("--db", default=None, help="the gradebook's URL (default: sqlite:///<course>/gradebook.db)")
    board = sub.add_parser("speed-board", help="on a GPU: time every student's cuda_* kernels of an assignment "
                           "(nbgrader's submitted/ folder) and write the class's speed leaderboard as a CSV")
    board.add_argument("--course", default=".", help="the nbgrader course folder (default: here)")
    board.add_argument("--assignment", required=True, help="the assignment, e.g. ex09_cuda_kernels")
    board.add_argument("--out", default=None, help="the CSV (default: <course>/speed_<assignment>.csv, beside "
                       "nbgrader's grades.csv)")
    board.add_argument("--skip", nargs="*", default=[], metavar="STUDENT", help="students not to time (a kernel "
                       "that broke the CUDA context or never finished: the board names them)")
    board.add_argument("--kernel-time-limit", type=float, default=600.0, metavar="SECONDS", help="how long one "
                       "kernel's compile, checked launch and timing may take before the board stops (default 600)")
    # bench has a parser of its own (labops.bench.main): its options pass through unread. Every other
    # subcommand rejects what it does not know, naming it, instead of running without it.
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "bench":
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "speed-board":
        from labops.exercises.speed_board import board as speed_board

        try:
            speed_board(args.course, args.assignment, args.out, skip=tuple(args.skip),
                        kernel_time_limit_s=args.kernel_time_limit)
        except (RuntimeError, FileNotFoundError) as exc:
            print(f"labops speed-board: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "audit-grades":
        from labops.exercises.grading import audit as audit_grades

        flags = audit_grades(args.course, args.db)
        print("\n".join(flags) if flags else "every score in the gradebook is the trusted one")
        return 1 if flags else 0
    if args.command == "exercises":
        from labops.exercises import EXERCISES, describe

        if args.exercise_id is not None and args.exercise_id not in EXERCISES:
            print(f"labops exercises: no exercise {args.exercise_id!r}; the exercises are: "
                  f"{', '.join(sorted(EXERCISES))}", file=sys.stderr)
            return 2
        print(describe(args.exercise_id))
        return 0
    if args.command == "doctor":
        return doctor()
    if args.command == "build":
        return build()
    from labops.bench import main as bench_main

    return bench_main(rest)


if __name__ == "__main__":
    sys.exit(main())
