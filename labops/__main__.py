"""labops command line: doctor, build, bench.

    labops doctor     what is installed, build the ops, check each against its reference
    labops build      compile the ops now (instead of on first use)
    labops bench      labops vs native PyTorch vs copy bandwidth
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
    return (out[-1] if cmd[0] == "nvcc" else out[0]) if out else path


def doctor() -> int:
    import torch

    from labops import _build

    ok = True
    print(f"python   {platform.python_version()} ({sys.executable})")
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
        print(f"cache    {p.library} ({'built' if p.library.exists() else 'not built yet'})")
        start = time.monotonic()
        _build.load_library()
        print(f"build    ok, loaded in {time.monotonic() - start:.1f} s")
    except Exception as exc:  # report, do not crash: that is the doctor's job
        print(f"build    FAILED\n{exc}")
        return 1

    from labops import ops, reference
    from labops.testing import rel_error

    devices = ["cpu"] + (["cuda"] if gpu else [])
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    checks = [("tanh", lambda t: ops.tanh(t), reference.tanh_forward_numpy(x.numpy()))]
    for a in ops.GELU_APPROXIMATIONS:
        checks.append((f"gelu({a})", lambda t, a=a: ops.gelu(t, a), reference.gelu_forward_numpy(x.numpy(), a)))
    for device in devices:
        for name, fn, expected in checks:
            try:
                err = rel_error(fn(x.to(device)), expected)
                good = err < 1e-10
                ok &= good
                print(f"{device:5s} {name:14s} rel_error {err:.1e}  {'ok' if good else 'WRONG'}")
            except Exception as exc:
                ok = False
                print(f"{device:5s} {name:14s} FAILED: {exc}")
    print("all good" if ok else "some checks failed (see above)")
    return 0 if ok else 1


def build() -> int:
    from labops import _build

    p = _build.plan()
    if p.library.exists():
        print(f"already built: {p.library}")
    _build.load_library()
    print(f"ready: {p.library}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="labops", description="labops: the course's compiled ops")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="check the toolchain, build and test the ops")
    sub.add_parser("build", help="compile the ops ahead of time")
    sub.add_parser("bench", help="benchmark against native PyTorch", add_help=False)
    ex = sub.add_parser("exercises", help="list the classroom exercises, or show one's signature")
    ex.add_argument("exercise_id", nargs="?", help="an exercise id, e.g. tanh_backward")
    args, rest = parser.parse_known_args(argv)
    if args.command == "exercises":
        from labops.exercises import describe

        print(describe(args.exercise_id))
        return 0
    if args.command == "doctor":
        return doctor()
    if args.command == "build":
        return build()
    from labops.bench import main as bench_main

    bench_main(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
