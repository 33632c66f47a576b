"""Compile csrc/ into one shared library on first use, cache it, load it.

The library is keyed by everything that changes the binary: the torch
version, the CUDA version (or "cpu"), the CPU's SIMD level, and a hash of
every source file plus this file. A second import finds the key's library
and loads it without touching the compiler (a few milliseconds).

Concurrency: builds take an exclusive ``flock`` on a lock file. The kernel
drops that lock when its holder exits, even by SIGKILL, so a killed build
can never leave a lock that hangs the next import. Each build writes into a
fresh temporary directory and renames the finished library into place, so a
killed build leaves no half-written library either. A killed build leaves
no compiler running and, by the next build at the latest, no build
directory: see Note [killed builds].
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

LIBRARY_NAME = "labops_ops"

# SIMD flags for the CPU kernels, chosen to match the level that ATen itself
# dispatches to on this machine (its at::vec::Vectorized headers read them).
# The flags ATen compiles its own kernels of each capability with. -mf16c: from torch 2.13 the
# headers convert float <-> half with F16C intrinsics when CPU_CAPABILITY_AVX2/AVX512 is defined.
_CPU_SIMD_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mf16c",
               "-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY=AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY_AVX2", "-DCPU_CAPABILITY=AVX2"],
}


class BuildError(RuntimeError):
    """The compiled ops could not be built; the message says what to install."""


def csrc_dir() -> Path:
    """Where the C++/CUDA sources live: $LABOPS_CSRC, else the checkout's csrc/."""
    env = os.environ.get("LABOPS_CSRC")
    path = Path(env) if env else Path(__file__).resolve().parent.parent / "csrc"
    if not (path / "common" / "check.h").is_file():
        raise BuildError(
            f"labops cannot find its C++ sources (looked in {path}). Install labops from a "
            "clone with `pip install -e .` so csrc/ sits beside the package, or point "
            "LABOPS_CSRC at the csrc/ folder."
        )
    return path


def cache_root() -> Path:
    env = os.environ.get("LABOPS_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "labops"


def find_nvcc() -> str | None:
    """nvcc the way torch.utils.cpp_extension looks for it, without importing it."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    default = "/usr/local/cuda/bin/nvcc"
    return default if os.path.exists(default) else None


def layer_names(root: Path | None = None) -> list[str]:
    """The layers: every folder of csrc/ with a register.cpp, except csrc/common, which holds what they
    share (its register.cpp defines the ladder's ops, Note [the ladder] in csrc/common/ladder.h)."""
    root = root or csrc_dir()
    return sorted(path.parent.name for path in root.glob("*/register.cpp") if path.parent.name != "common")


@dataclass
class BuildPlan:
    """What will be compiled, with which flags, and where the result lives."""

    sources: list[Path]  # every layer's .cpp files (register.cpp, cpu.cpp) and, with CUDA, its cuda.cu
    with_cuda: bool
    cpu_capability: str
    cflags: list[str]
    cuda_cflags: list[str]
    ldflags: list[str]
    key: str
    notes: list[str] = field(default_factory=list)

    @property
    def directory(self) -> Path:
        return cache_root() / self.key

    @property
    def library(self) -> Path:
        return self.directory / f"{LIBRARY_NAME}.so"


def plan() -> BuildPlan:
    root = csrc_dir()
    notes = []
    cuda_wanted = torch.version.cuda is not None and torch.cuda.is_available()
    nvcc = find_nvcc() if cuda_wanted else None
    with_cuda = cuda_wanted and nvcc is not None
    if cuda_wanted and nvcc is None:
        notes.append("a GPU is visible but nvcc was not found (set CUDA_HOME): CPU kernels only")
    if os.environ.get("LABOPS_NO_CUDA") == "1":
        with_cuda = False

    layers = layer_names(root)
    # csrc/common's own .cpp files (the ladder's ops) and every layer's
    sources = sorted((root / "common").glob("*.cpp")) + [
        path for layer in layers for path in sorted((root / layer).glob("*.cpp"))]
    if with_cuda:
        sources += [path for layer in layers for path in sorted((root / layer).glob("*.cu"))]

    capability = torch.backends.cpu.get_cpu_capability()
    cflags = ["-O3", "-fvisibility=hidden"] + _CPU_SIMD_FLAGS.get(capability, [])
    ldflags = []
    # at::parallel_for is an inline `#pragma omp parallel` in ATen's headers:
    # without -fopenmp it compiles to a single-threaded loop. We compile with
    # it but do not link a libgomp: the GOMP_* calls then resolve to the
    # OpenMP runtime libtorch_cpu already loaded. Linking the system's libgomp
    # would start a second thread pool whose spinning threads fight torch's.
    if torch.backends.openmp.is_available():
        cflags.append("-fopenmp")
    cuda_cflags = ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]
    if with_cuda:
        cuda_cflags += cuda_arch_flags()
        # For C++ and CUDA files alike: code shared by both (csrc/common/empty.h) may then call into torch_cuda.
        cflags.append("-DLABOPS_WITH_CUDA")
        cuda_cflags.append("-DLABOPS_WITH_CUDA")

    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in {".h", ".cuh", ".cpp", ".cu"}:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    digest.update(Path(__file__).read_bytes())
    digest.update(" ".join(cflags + cuda_cflags + ldflags).encode())
    digest.update(os.environ.get("TORCH_CUDA_ARCH_LIST", "").encode())
    flavour = f"cu{torch.version.cuda}" if with_cuda else "cpu"
    version = torch.__version__.replace("+", "_")
    key = f"torch{version}-{flavour}-{capability.lower()}-{digest.hexdigest()[:16]}"
    return BuildPlan(sources, with_cuda, capability, cflags, cuda_cflags, ldflags, key, notes)


def cuda_architectures() -> list[str]:
    """The GPU architectures to compile for: $TORCH_CUDA_ARCH_LIST ("8.0;9.0+PTX"), else each visible GPU's,
    with Hopper's 9.0 as 9.0a: the wgmma rung of conv2d_mm exists only there, and sm_90a code runs on every
    9.0 GPU (H100, H200) as sm_90 code does."""
    wanted = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(",", ";").replace(" ", ";")
    if wanted:
        arches = [a for a in wanted.split(";") if a]
    else:
        arches = sorted({"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    return [a.replace("9.0", "9.0a", 1) if a.split("+")[0] == "9.0" else a for a in arches]


def cuda_arch_flags() -> list[str]:
    """nvcc's -gencode flags for cuda_architectures() (torch adds none of its own when these are given), and
    LABOPS_SM90A where Hopper's wgmma code is compiled."""
    flags = []
    for arch in cuda_architectures():
        number = arch.split("+")[0].replace(".", "")
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
        if arch.endswith("+PTX"):  # PTX for later GPUs: sm_90a's would run on none, so the plain 9.0's
            plain = number.rstrip("a")
            flags.append(f"-gencode=arch=compute_{plain},code=compute_{plain}")
    if any(a.split("+")[0] == "9.0a" for a in cuda_architectures()):
        flags.append("-DLABOPS_SM90A=1")
    return flags


_loaded: str | None = None


def load_library(verbose: bool = False) -> str:
    """Return the path of the loaded library, building it first if needed."""
    global _loaded
    if _loaded is not None:
        return _loaded
    p = plan()
    if p.library.exists():
        torch.ops.load_library(str(p.library))
        _loaded = str(p.library)
    else:
        _loaded = _build_locked(p, verbose)
    return _loaded


def _build_locked(p: BuildPlan, verbose: bool) -> str:
    p.directory.mkdir(parents=True, exist_ok=True)
    with _FileLock(p.directory / "build.lock"):
        if p.library.exists():  # another process finished it while we waited
            torch.ops.load_library(str(p.library))
            return str(p.library)
        return _compile(p, verbose)


def _compile(p: BuildPlan, verbose: bool) -> str:
    _check_toolchain(p)
    what = "CPU" + (" and CUDA" if p.with_cuda else "")
    layers = sorted({s.parent.name for s in p.sources} - {"common"})
    names = ", ".join(layers)
    # Our own progress lines go to stdout: they are news, not errors (Jupyter colours stderr red).
    # What the compiler and ninja say goes to stderr (_run_builder).
    print(
        f"labops: compiling the {what} ops once for this torch ({len(layers)} layers: {names}); "
        f"this takes one to five minutes{', more with the CUDA kernels' if p.with_cuda else ''}, once, "
        f"and is cached in {p.directory}",
        flush=True,
    )
    for note in p.notes:
        print(f"labops: note: {note}", flush=True)

    start = time.monotonic()
    # We hold the lock, so no build is running here: any build directory is a killed build's.
    for stale in p.directory.glob("build-*"):
        shutil.rmtree(stale, ignore_errors=True)
    build_dir = Path(tempfile.mkdtemp(prefix="build-", dir=p.directory))
    units = translation_units(p.sources, build_dir)
    done = threading.Event()
    progress = threading.Thread(target=_report_objects, args=(build_dir, len(units), start, done), daemon=True)
    progress.start()
    try:
        failure = _run_builder(p, units, build_dir, verbose)
    except BaseException:  # Ctrl-C, say: _run_builder has stopped the compilers
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    finally:
        done.set()
        progress.join()
    if failure is not None:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise BuildError(f"labops: compiling {names} failed:\n{failure}")
    os.replace(build_dir / f"{LIBRARY_NAME}.so", p.library)
    shutil.rmtree(build_dir, ignore_errors=True)
    torch.ops.load_library(str(p.library))
    print(f"labops: built in {time.monotonic() - start:.0f} s", flush=True)
    return str(p.library)


# Note [translation units]
# Every translation unit parses torch's headers again, about 7 s of one core
# each on the course's machine; the layers' own code is a few seconds more. One
# file per layer and device (two CPU files each) would spend most of a cold
# build re-reading headers. So the CPU files are compiled in as many groups as
# there are cores: each group is one generated file that #includes its layers'
# register.cpp and cpu.cpp. That is why a layer keeps everything in namespace
# labops::<layer>: two layers share a translation unit. Each cuda.cu is its own
# unit (nvcc's time is in the kernels, and GPU machines have cores to spare).
# Errors still point at the layer's own files and lines.
def translation_units(sources: list[Path], build_dir: Path) -> list[Path]:
    """The files the compiler is given: the CPU sources in one generated file per core, each cuda.cu alone."""
    cpu = [s for s in sources if s.suffix == ".cpp"]
    groups: list[list[Path]] = [[] for _ in range(max(1, min(_cores(), len(cpu) // 2)))]
    for source in sorted(cpu, key=lambda s: -s.stat().st_size):  # biggest first, each to the lightest group
        min(groups, key=lambda g: sum(s.stat().st_size for s in g)).append(source)
    units = []
    for i, group in enumerate(groups):
        unit = build_dir / f"cpu_group{i}.cpp"
        unit.write_text("".join(f'#include "{s}"\n' for s in sorted(group)))
        units.append(unit)
    for source in (s for s in sources if s.suffix == ".cu"):
        unit = build_dir / f"{source.parent.name}_cuda.cu"  # object files are named by basename: keep them apart
        unit.write_text(f'#include "{source}"\n')
        units.append(unit)
    return units


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


# Note [killed builds]
# A build killed halfway must leave no compiler running. ninja starts each
# compile command in a process group of its own (so that Ctrl-C at a terminal
# reaches ninja alone); on SIGINT, SIGTERM or SIGHUP it sends the same signal to
# every command's group, waits for them and exits. So "stop the build" means
# "SIGTERM ninja"; a SIGKILLed ninja would orphan its compilers.
#
# The build step (cpp_extension.load: it writes build.ninja and runs ninja) runs
# in a fresh interpreter, the builder, started in a new session: its process
# group holds the builder and ninja. The library is loaded here once built.
#  - An exception here, KeyboardInterrupt included: SIGTERM the builder's group,
#    wait for ninja to exit (it waits for its compilers), remove the build dir.
#  - This process dies without running Python (SIGKILL, or SIGTERM, whose
#    default action Python keeps): the builder holds the read end of a pipe whose
#    only write end is ours, and a thread of it blocks reading it; the kernel
#    closes our end as we die, the read returns, and the thread SIGTERMs its
#    group, builder included. The build dir stays; the next build, holding the
#    lock, removes it.
# Not prctl(PR_SET_PDEATHSIG): it is Linux only, fires when the creating
# *thread* exits, and the builder would need a signal handler to pass it on to
# ninja; a blocking read does the same on every POSIX system.
#
# Run as `python -c _BUILDER LIFELINE_FD CPP_EXTENSION_LOAD_ARGS_JSON`.
_BUILDER = """
import json, os, signal, sys, threading

def stop_build_when_parent_dies(lifeline):
    os.read(lifeline, 1)  # the parent never writes: this returns when its end closes
    os.killpg(0, signal.SIGTERM)  # ninja passes it on to the compilers; this process dies of it too

threading.Thread(target=stop_build_when_parent_dies, args=(int(sys.argv[1]),), daemon=True).start()
from torch.utils import cpp_extension

try:
    cpp_extension.load(**json.loads(sys.argv[2]))
except Exception as exc:  # the compiler's own message is inside exc
    sys.exit(str(exc))  # to stderr, status 1
"""


def _run_builder(p: BuildPlan, units: list[Path], build_dir: Path, verbose: bool) -> str | None:
    """Build the library into build_dir in the builder process; None, or why it failed."""
    lifeline, our_end = os.pipe()
    args = dict(
        name=LIBRARY_NAME,
        sources=[str(u) for u in units],
        extra_cflags=p.cflags,
        extra_cuda_cflags=p.cuda_cflags,
        extra_ldflags=p.ldflags,
        build_directory=str(build_dir),
        with_cuda=p.with_cuda,
        is_python_module=False,
        verbose=verbose,
    )
    try:
        # stdout is shared so that verbose=True shows ninja's lines as they come.
        builder = subprocess.Popen([sys.executable, "-c", _BUILDER, str(lifeline), json.dumps(args)],
                                   stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True, pass_fds=(lifeline,))
    finally:
        os.close(lifeline)
    try:
        _, errors = builder.communicate()
    except BaseException:
        _stop_builder(builder)
        raise
    finally:
        os.close(our_end)
    if builder.returncode != 0:
        return errors.strip() or f"the build process exited with status {builder.returncode}"
    sys.stderr.write(errors)  # warnings, if any
    return None


def _stop_builder(builder: subprocess.Popen) -> None:
    """SIGTERM the builder's group and wait until ninja, and so its compilers, are gone."""
    if builder.poll() is None:
        os.killpg(builder.pid, signal.SIGTERM)
    builder.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(builder.pid, 0)  # ninja, orphaned by the builder, keeps its group alive
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _report_objects(build_dir: Path, total: int, start: float, done: threading.Event) -> None:
    """One line per compiled file as ninja finishes it, so minutes of compiling are not minutes of silence."""
    seen: set[str] = set()
    while True:
        finished = done.wait(0.5)
        for obj in sorted(build_dir.glob("*.o")):
            if obj.name not in seen:
                seen.add(obj.name)
                print(f"labops:   compiled {obj.name[:-2]} ({len(seen)}/{total}, {time.monotonic() - start:.0f} s)",
                      flush=True)
        if finished:
            return


def _check_toolchain(p: BuildPlan) -> None:
    missing = []
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        missing.append(f"a C++ compiler ('{compiler}' not found: install g++, e.g. `apt install g++`)")
    # The ninja and torch wheels put their programs next to the interpreter,
    # which is not on PATH when a venv's python is run without activating it.
    extra = [os.path.dirname(sys.executable)]
    try:
        import ninja

        extra.append(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        pass
    os.environ["PATH"] = os.pathsep.join(extra + [os.environ.get("PATH", "")])
    if shutil.which("ninja") is None:
        missing.append("ninja (`pip install ninja`)")
    if missing:
        raise BuildError("labops cannot compile its ops; missing: " + "; ".join(missing))


class _FileLock:
    """An exclusive flock; released by the kernel if the holder dies."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def __enter__(self):
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        waited = 0.0
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if waited == 0.0:
                    holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip()
                    print(f"labops: waiting for another process (pid {holder or '?'}) that is "
                          "building the ops", flush=True)
                time.sleep(0.2)
                waited += 0.2
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)
        return self

    def __exit__(self, *exc):
        import fcntl

        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
