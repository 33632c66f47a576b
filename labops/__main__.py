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
    """(name, labops op, native PyTorch equivalent, float64 inputs) for every op and mode: each layer's
    ``doctor_cases(randn, generator)`` in labops/bench/<layer>.py (beside the suite that times the same
    pairs), layer by layer. ``randn(*shape)`` draws float64 normals from ``generator``, one seeded generator
    for every layer, which a layer also uses for other draws (cross_entropy's targets)."""
    import importlib

    import torch

    from labops._layers import LAYERS

    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    cases = []
    for layer in LAYERS:
        cases += importlib.import_module(f"labops.bench.{layer}").doctor_cases(randn, g)
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
