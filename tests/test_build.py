"""The JIT build: cache keys, no recompile on a second import, two processes
building at once, a lock left by a killed build, a build stopped by Ctrl-C or
killed (no compiler left running, no build directory left behind), and a
missing compiler.

These use a tiny stand-in csrc/ (one op) through $LABOPS_CSRC, so each real
compile takes seconds instead of rebuilding every labops kernel.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from labops import _build

TINY_OP = textwrap.dedent(
    """
    #include <ATen/core/Tensor.h>
    #include <ATen/ops/add.h>
    #include <torch/library.h>

    at::Tensor twice(const at::Tensor& x) { return at::add(x, x); }

    TORCH_LIBRARY(labops, m) { m.def("twice(Tensor x) -> Tensor"); }
    TORCH_LIBRARY_IMPL(labops, CPU, m) { m.impl("twice", &twice); }
    """
)

# Load the library the way `import labops` does, call the op, print the path.
CHILD = textwrap.dedent(
    """
    import torch
    from labops import _build
    path = _build.load_library()
    assert torch.ops.labops.twice(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]
    print(path)
    """
)


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    csrc = tmp_path / "csrc"
    (csrc / "common").mkdir(parents=True)
    (csrc / "common" / "check.h").write_text("")
    (csrc / "tiny").mkdir()
    (csrc / "tiny" / "register.cpp").write_text(TINY_OP)
    env = dict(os.environ, LABOPS_CSRC=str(csrc), LABOPS_CACHE_DIR=str(tmp_path / "cache"), LABOPS_NO_CUDA="1")
    for key in ("LABOPS_CSRC", "LABOPS_CACHE_DIR", "LABOPS_NO_CUDA"):
        monkeypatch.setenv(key, env[key])
    return csrc, env


def start(env):
    return subprocess.Popen([sys.executable, "-c", CHILD], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=Path(__file__).resolve().parent.parent)


def finish(proc, timeout=300):
    """The library's path (the child's last line) and everything before it: the build's progress lines."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    *progress, path = out.strip().splitlines()
    return path, "\n".join(progress)


def test_key_depends_on_sources(tiny):
    csrc, _ = tiny
    key = _build.plan().key
    assert _build.plan().key == key  # stable
    (csrc / "tiny" / "register.cpp").write_text(TINY_OP + "\n// an edit\n")
    assert _build.plan().key != key


def test_two_processes_build_once_then_cache_hits(tiny):
    _, env = tiny
    first, second = start(env), start(env)  # both find an empty cache
    (path1, said1), (path2, said2) = finish(first), finish(second)
    assert path1 == path2 and Path(path1).is_file()
    assert (said1 + said2).count("compiling") == 1, said1 + said2  # one built, the other waited
    path3, said3 = finish(start(env))
    assert path3 == path1 and said3 == ""  # a later import never recompiles, and says nothing


def test_lock_of_a_killed_build_does_not_hang(tiny):
    _, env = tiny
    plan = _build.plan()
    plan.directory.mkdir(parents=True)
    # A "build" that takes the lock and dies by SIGKILL while holding it, leaving
    # a half-written library behind, as a killed compiler would.
    killer = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from labops._build import _FileLock
        lock = _FileLock(Path({str(plan.directory / 'build.lock')!r})).__enter__()
        Path({str(plan.library) + '.tmp'!r}).write_bytes(b"half a library")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    dead = subprocess.run([sys.executable, "-c", killer], env=env)
    assert dead.returncode == -9
    assert (plan.directory / "build.lock").read_text().strip()  # the pid is still written there
    path, said = finish(start(env), timeout=300)
    assert path == str(plan.library) and "compiling" in said


def processes_under(path):
    """pid -> command line of each live process whose command line or working directory names `path`."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone, a zombie (no cwd), or not ours
            continue
        if str(path) in command or cwd.startswith(str(path)):
            found[int(entry.name)] = command
    return found


def wait_for_compiler(path, timeout=120):
    """Wait until a compiler of the build under `path` runs: the earliest moment to kill the build."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        programs = {Path(command.partition(" ")[0]).name for command in processes_under(path).values()}
        if programs & {"cc1plus", "c++"}:
            return
        time.sleep(0.05)
    pytest.fail(f"no compiler started under {path} in {timeout} s")


def assert_all_gone(path, timeout=5):
    deadline = time.monotonic() + timeout
    while processes_under(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes_under(path), processes_under(path)


linux_only = pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="finds the build's processes in /proc")


@linux_only
def test_ctrl_c_stops_the_compilers_and_removes_the_build_dir(tiny, tmp_path):
    _, env = tiny
    build = start(env)
    wait_for_compiler(tmp_path)
    build.send_signal(signal.SIGINT)
    _, err = build.communicate(timeout=30)
    assert build.returncode != 0 and "KeyboardInterrupt" in err, err
    assert_all_gone(tmp_path)
    assert os.listdir(_build.plan().directory) == ["build.lock"]


@linux_only
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_build_stops_its_compilers_and_the_next_build_cleans_up(tiny, tmp_path, sig):
    """SIGKILL and SIGTERM (Python keeps its default action) end the process without running any of its code."""
    _, env = tiny
    build = start(env)
    wait_for_compiler(tmp_path)
    build.send_signal(sig)
    build.communicate(timeout=30)
    assert build.returncode == -sig
    assert_all_gone(tmp_path)
    plan = _build.plan()
    (left,) = plan.directory.glob("build-*")  # the killed build's; the next build removes it
    path, said = finish(start(env))
    assert path == str(plan.library) and "compiling" in said
    assert not left.exists() and not list(plan.directory.glob("build-*"))


def test_missing_compiler_says_what_to_install(tiny):
    _, env = tiny
    env = dict(env, CXX="no-such-compiler-xyz")
    proc = start(env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "install g++" in err and "no-such-compiler-xyz" in err


def test_doctor_checks_every_op_forward_and_backward(capsys):
    import torch

    from labops import ops
    from labops.__main__ import _doctor_cases, main

    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    names = {case[0].split("(")[0] for case in _doctor_cases()}
    public_ops = {n for n in ops.__all__ if n.islower() and n != "upsample_bilinear2d_output_size"}
    assert public_ops <= names | {"upsample_bilinear2d"} and "upsample" in names
    devices = 2 if torch.cuda.is_available() else 1
    assert out.count("fwd+bwd rel_error") == devices * len(_doctor_cases()) and out.rstrip().endswith("all good")


def test_doctor_says_wrong_when_an_op_is_wrong(capsys, monkeypatch):
    import torch

    import labops
    from labops.__main__ import main

    monkeypatch.setattr(labops, "softmax", lambda t, dim=-1: torch.softmax(t, dim) * 1.001)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "softmax" in out and "WRONG" in out and "some checks failed" in out


def _python(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_dir_and_help_never_build(tmp_path):
    run = _python("""
        import contextlib, io, sys
        import labops
        names = dir(labops)
        with contextlib.redirect_stdout(io.StringIO()) as page:
            help(labops)
        print("show_source" in names, "gelu" in names, "labops.ops" in sys.modules, "PACKAGE CONTENTS" in page.getvalue())
        """, LABOPS_CACHE_DIR=str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "True False False True"
    assert "compiling" not in run.stdout + run.stderr and not list(tmp_path.rglob("*.so"))


def test_import_loads_built_ops_and_dir_lists_them():
    from labops import ops  # noqa: F401 (builds here if this run has not yet)

    run = _python("""
        import sys
        import labops
        print(labops.GELU_APPROXIMATIONS, "labops.ops" in sys.modules, "gelu" in dir(labops))
        try:
            labops.no_such_op
        except AttributeError as exc:
            print(exc)
        """)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["('none', 'tanh', 'sigmoid') True True",
                                       "module 'labops' has no attribute 'no_such_op'"]


def test_import_labops_loads_built_ops_for_torch_ops():
    from labops import ops  # noqa: F401 (builds here if this run has not yet)

    run = _python("""
        import torch, labops
        x = torch.randn(5, dtype=torch.float64, requires_grad=True)
        y = torch.ops.labops.tanh(x)
        y.sum().backward()
        print(torch.allclose(y, torch.tanh(x)), torch.allclose(x.grad, 1 - torch.tanh(x) ** 2))
        """)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "True True"


def test_version_and_bench_without_a_gpu(capsys):
    import torch

    from labops.__main__ import main

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == "labops 0.1.0"
    if not torch.cuda.is_available():
        assert main(["bench", "--device", "cuda"]) == 2
        assert "PyTorch sees no GPU here" in capsys.readouterr().err


def test_bench_roofline_on_the_cpu(tmp_path, capsys):
    """`labops bench --roofline` times labops and native per case and records FLOPs, bytes and the roofs."""
    from labops.__main__ import main

    path = tmp_path / "roof.json"
    assert main(["bench", "--device", "cpu", "--suite", "reorg", "--suite", "softmax", "--size", "65536",
                 "--roofline", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data["copy_GBps"] > 0 and data["peak_TFLOPs"]["float32"] > 0
    impls = {p["impl"] for p in data["points"]}
    assert "labops" in impls and "torch.softmax" in impls
    for p in data["points"]:
        assert p["ms"] > 0 and p["nbytes"] > 0
        assert (p["flops"] == 0) == p["op"].startswith("reorg")
    softmax_fwd = next(p for p in data["points"] if p["op"] == "softmax fwd" and p["impl"] == "labops")
    rows, cols = map(int, softmax_fwd["shape"].split("x"))
    assert softmax_fwd["flops"] == 5 * rows * cols
    assert "FLOP/B" in capsys.readouterr().out


def test_bench_times_each_peer_and_reports_one_that_fails():
    """Peers (what a user would pick instead: torch.compile, channels_last) are timed in the same run;
    one that raises is reported, not fatal."""
    import torch

    from labops import bench

    x = torch.randn(1000)
    case = bench.Case("double", "1000", torch.float32, 8000, lambda: x * 2, lambda: x + x, "x + x",
                      peers={"slow": lambda: (x * 2).clone().clone(), "broken": lambda: x.view(7, 7)})
    pct = lambda ms: 100.0  # noqa: E731
    peers = bench._time_peers(case, "cpu", pct, lab=1e-3, lab_graph=None)
    assert peers["slow"]["ms"] > 0 and peers["slow"]["speedup"] == pytest.approx(peers["slow"]["ms"] / 1e-3)
    assert peers["slow"]["graph_ms"] is None
    assert peers["broken"] == {"error": peers["broken"]["error"]} and "RuntimeError" in peers["broken"]["error"]
    assert "failed (RuntimeError" in bench.peer_text(peers["broken"])


def test_bench_suites_name_their_peers():
    from labops import bench
    from labops.bench import depthwise, pooling, softmax, upsample

    for suite in (pooling, softmax, upsample):
        assert {name for c in suite.cases("cpu") for name in c.peers} == {"torch.compile"}
    assert {name for c in depthwise.cases("cpu") for name in c.peers} == {"channels_last"}
    assert callable(bench.compiled(lambda t: t + 1))


@pytest.mark.parametrize("wanted, gencode, sm90a", [
    ("8.0;9.0", ["compute_80,code=sm_80", "compute_90a,code=sm_90a"], True),
    ("9.0+PTX", ["compute_90a,code=sm_90a", "compute_90,code=compute_90"], True),  # portable PTX stays plain
    ("9.0a", ["compute_90a,code=sm_90a"], True),
    ("8.6 8.9", ["compute_86,code=sm_86", "compute_89,code=sm_89"], False),
])
def test_hopper_is_compiled_as_sm_90a(monkeypatch, wanted, gencode, sm90a):
    """TORCH_CUDA_ARCH_LIST's 9.0 becomes 9.0a (wgmma exists only there, and its code runs on every 9.0 GPU),
    with LABOPS_SM90A defined for the host code that picks conv2d_mm's wgmma rung."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", wanted)
    flags = _build.cuda_arch_flags()
    assert [f.removeprefix("-gencode=arch=") for f in flags if f.startswith("-gencode")] == gencode
    assert ("-DLABOPS_SM90A=1" in flags) == sm90a
