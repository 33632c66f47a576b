"""Learner code in a bounded child process that hands back plain arrays.

The grader (``labops.exercises.grading``) and the compiled-op check both run a
learner's code here, never in their own process:

- the child gets the learner's cells as source and each case's *inputs* as
  ``.npy`` files; it never gets an expected answer, so nothing it can reach
  (its own frames, the files it may read) holds one;
- it runs under a wall-clock limit per cell and per case, an address-space
  limit and a file-size limit, in a new process group that is killed as a
  whole, and, where bubblewrap (``bwrap``) is installed, in a sandbox: the
  whole file system read-only, the course folder and the instructor's secret
  hidden, no network, its own process namespace;
- it writes each case's result as plain data (JSON and ``.npy``), which the
  parent reads with ``allow_pickle=False`` and turns into float64 tensors of
  the plain Tensor class. Whatever the learner's code did inside the child --
  patched ``torch``, a Tensor subclass, a rebound ``check`` -- ends there.

When the child dies (a segfault, ``os._exit``, the memory limit) or hangs in C
code, the parent kills its process group, reports the case it was on, and
starts a fresh child for the exercises after it: the learner loses only what
did not finish.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ._core import Opaque, Outcome, Raised

__all__ = ["CodeStep", "GradeStep", "KernelStep", "Limits", "bwrap_args", "bwrap_path", "run_steps", "signal_name"]

CELL_TIME_LIMIT_S = 60.0  # one of the learner's cells (definitions run in milliseconds)
SLACK_S = 10.0  # on top of a limit the child enforces itself: its start-up, writing the result
LARGEST_RESULT_BYTES = 64 << 20  # one returned array; the cases' answers are kilobytes
LARGEST_KERNEL_BODY = 64 << 10  # a KernelStep's body, in UTF-8 bytes (the references are under 2 KiB)


@dataclass
class Limits:
    """What one child may use. ``sandbox``: "auto" (bubblewrap when installed), "bwrap" or "none"."""

    memory_bytes: int = 6 << 30
    file_bytes: int = 256 << 20
    sandbox: str = "auto"
    hidden_paths: list[str] = field(default_factory=list)  # folders the child must not see
    cell_time_limit_s: float = CELL_TIME_LIMIT_S


@dataclass
class CodeStep:
    """One of the learner's cells, run in order; ``skip``: a note saying why it is not run (it already
    hung or crashed the notebook's own kernel, which the grader saw happen)."""

    label: str
    source: str
    skip: str | None = None


@dataclass
class GradeStep:
    """Grade exercise ``exercise`` on the function the cells so far define as ``fn_name``."""

    exercise: str
    fn_name: str
    cases: list[list]  # per check, its cases (the grader's; their ``expected`` is never sent)


@dataclass
class KernelStep:
    """Hand back the CUDA kernel that the expression ``fn_name`` (a ``kernel_submission``) holds after the cells
    so far: its body as a uint8 array of UTF-8 bytes and its ``launch(**sizes)`` as an int64 array (grid x, y, z,
    block x, y, z, shared_mem), checked by the child as ``check`` checks a launch. Its outcome is keyed
    (step, 0, 0) and is left as the arrays (``speed_board.kernel_from_child`` checks them again).

    ``language="triton"``: a ``triton_submission``'s kernel, as ``triton_kernels.kernel_arrays`` hands it back
    (its source and its launches at each of ``sizes``, a list of dicts), for the grader to run in a fresh child."""

    exercise: str
    fn_name: str
    sizes: dict | list  # the exercise's sizes at the size the kernel is timed at (triton: one dict per case)
    language: str = "cuda"


def kernel_arrays(submission, sizes: dict) -> tuple:
    """(body bytes, launch) of a ``KernelSubmission``, as a KernelStep hands them back (run in the child)."""
    from .cuda import KernelSubmission, _check_launch

    if not isinstance(submission, KernelSubmission):
        raise TypeError(f"the check's argument must be a kernel_submission(body, launch), got "
                        f"{type(submission).__name__}")
    if not isinstance(submission.body, str):
        raise TypeError(f"the kernel's body must be a str, got {type(submission.body).__name__}")
    body = submission.body.encode("utf-8")
    if len(body) > LARGEST_KERNEL_BODY:
        raise ValueError(f"the kernel's body is {len(body)} bytes of UTF-8; at most {LARGEST_KERNEL_BODY} are taken")
    where = "launch(" + ", ".join(f"{k}={v}" for k, v in sizes.items()) + ")"
    launch = _check_launch(submission.launch(**sizes), where)
    return (np.frombuffer(body, dtype=np.uint8).copy(),
            np.array([*launch.grid, *launch.block, launch.shared_mem], dtype=np.int64))


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


# ---- plain data on disk: arguments to the child, results back ----

def _encode(value, folder: Path, stem: str, arrays: list[int]):
    """JSON for ``value``, with every array written as ``<stem>_<n>.npy`` beside it."""
    if value is None:
        return {"none": 1}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, str):
        return {"str": value[:2000]}
    if isinstance(value, torch.Size):
        return {"size": [int(v) for v in value]}
    if isinstance(value, torch.Tensor):
        name = f"{stem}_{len(arrays)}.npy"
        arrays.append(1)
        np.save(folder / name, value.detach().cpu().numpy(), allow_pickle=False)
        return {"tensor": name}
    if isinstance(value, np.ndarray):
        name = f"{stem}_{len(arrays)}.npy"
        arrays.append(1)
        np.save(folder / name, value, allow_pickle=False)
        return {"ndarray": name}
    if isinstance(value, (tuple, list)):
        return {"tuple": [_encode(v, folder, stem, arrays) for v in value]}
    if isinstance(value, Opaque):
        return {"opaque": [value.type_name, value.text]}
    return {"opaque": [type(value).__name__, "?"]}


def _load_array(folder: Path, name) -> np.ndarray:
    if not isinstance(name, str) or "/" in name or not name.endswith(".npy"):
        raise ValueError(f"not a result file name: {name!r}")
    path = folder / name
    if path.is_symlink() or path.stat().st_size > LARGEST_RESULT_BYTES:
        raise ValueError(f"{name}: a link or over {LARGEST_RESULT_BYTES >> 20} MB")
    array = np.load(path, allow_pickle=False)
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise ValueError(f"an array of {array.dtype}")
    return array


def _decode(spec, folder: Path, depth: int = 0):
    """The value ``_encode`` wrote, validated: only numbers, strings, tuples and numeric arrays come back."""
    if not isinstance(spec, dict) or len(spec) != 1 or depth > 6:
        raise ValueError("malformed result")
    (kind, v), = spec.items()
    if kind == "none":
        return None
    if kind == "bool" and isinstance(v, bool):
        return v
    if kind == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if kind == "float" and isinstance(v, str):
        return float(v)
    if kind == "str" and isinstance(v, str):
        return v
    if kind == "size" and isinstance(v, list):
        return torch.Size([int(x) for x in v])
    if kind in ("tensor", "ndarray"):
        array = _load_array(folder, v)
        if kind == "ndarray":
            return array
        return torch.from_numpy(np.array(array, copy=True))
    if kind == "tuple" and isinstance(v, list) and len(v) <= 64:
        return tuple(_decode(x, folder, depth + 1) for x in v)
    if kind == "opaque" and isinstance(v, list) and len(v) == 2:
        return Opaque(str(v[0])[:100], str(v[1])[:200])
    raise ValueError(f"malformed result ({kind})")


def _plain_result(value):
    """A decoded result as the comparison wants it: arrays as float64 tensors of the plain Tensor class."""
    if isinstance(value, tuple):
        return tuple(_plain_result(v) for v in value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.astype(np.float64))
    if isinstance(value, torch.Tensor):
        return value.to(torch.float64)
    return value


def _read_outcome(folder: Path, name: str, plain: bool = True) -> Outcome | None:
    """What the child wrote as ``name``: arrays as float64 tensors (``plain``), or as the arrays they are."""
    path = folder / name
    if not path.is_file():
        return None
    try:
        if path.stat().st_size > 1 << 20:
            raise ValueError("result description over 1 MB")
        spec = json.loads(path.read_text())
        if isinstance(spec, dict) and set(spec) == {"raised"}:
            names, text = spec["raised"]
            return Outcome(raised=Raised(tuple(str(n)[:100] for n in names[:20]), str(text)[:2000]))
        got = _decode(spec, folder)
        return Outcome(got=_plain_result(got) if plain else got)
    except Exception as exc:  # whatever the child wrote, it is data that did not parse
        return Outcome(got=Opaque("unreadable result", f"{type(exc).__name__}: {exc}"[:200]))


# ---- the parent ----

def _python_paths_in_tmp() -> list[str]:
    """This Python, its packages and labops, where they live under /tmp (a CI virtualenv, a clone there)."""
    import labops

    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(labops.__file__).resolve().parent.parent),
                  *(p for p in sys.path if p)}
    real = sorted({os.path.realpath(p) for p in candidates if os.path.exists(p)})
    kept: list[str] = []
    for path in real:
        if (path == "/tmp" or path.startswith("/tmp/")) and not any(path.startswith(k + "/") for k in kept):
            kept.append(path)
    return kept


def bwrap_args(hidden=(), writable=(), read_only=()) -> list[str]:
    """bubblewrap's arguments for a sandbox: the file system read-only, a private /tmp (with this Python and
    labops visible again if they live there), each of ``hidden`` an empty folder, ``writable`` bound
    read-write, ``read_only`` bound read-only (in that order: a writable folder may sit inside a hidden one)."""
    args = [bwrap_path(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in _python_paths_in_tmp():
        args += ["--ro-bind", path, path]
    for path in hidden:
        if path and os.path.exists(path) and os.path.realpath(path) != "/tmp":  # /tmp is private already
            args += ["--tmpfs", os.path.realpath(path)]
    for path in writable:
        args += ["--bind", str(path), str(path)]
    for path in read_only:
        args += ["--ro-bind", str(path), str(path)]
    return args


def _sandboxed(argv: list[str], job: Path, limits: Limits) -> list[str]:
    want = limits.sandbox
    if want == "none" or (want == "auto" and bwrap_path() is None):
        return argv
    if bwrap_path() is None:
        raise RuntimeError("labops grading: sandbox = 'bwrap' but bubblewrap is not installed "
                           "(Debian/Ubuntu: apt install bubblewrap)")
    return bwrap_args(limits.hidden_paths, [job]) + [
        "--chdir", str(job / "work"), "--unshare-all", "--die-with-parent", "--setenv", "HOME", str(job / "work"),
        "--", *argv]


def _child_env(job: Path) -> dict:
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "LABOPS_CSRC", "CXX", "CC",
            "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    work = str(job / "work")
    env.update(HOME=work, TMPDIR=work, MPLBACKEND="Agg", MPLCONFIGDIR=work, PYTHONDONTWRITEBYTECODE="1",
               TORCH_EXTENSIONS_DIR=str(job / "work" / "torch_extensions"), PYTHONWARNINGS="ignore",
               TORCHINDUCTOR_CACHE_DIR=str(job / "work" / "inductor"), LABOPS_GRADING_CHILD="1",
               # Triton (the triton_* exercises): the child runs on the CPU, so its kernels run interpreted;
               # what Triton caches goes under its home, the job's folder, the only one the child may write.
               TRITON_INTERPRET="1", TRITON_HOME=work, TRITON_CACHE_DIR=str(job / "work" / "triton"))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _set_limits(limits: Limits):
    def apply():
        import resource

        os.setsid()  # a process group of its own: the parent kills it whole
        for which, value in ((resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_FSIZE, limits.file_bytes),
                             (resource.RLIMIT_CORE, 0)):
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                pass
    return apply


def _kill_group(proc: subprocess.Popen):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def signal_name(returncode: int) -> str | None:
    """The signal that ended a process ("SIGSEGV"), or None when it exited: Popen reports a signal as
    -number, bubblewrap (which waits for the sandboxed process) as 128 + number."""
    if 0 <= returncode <= 128:
        return None
    number = -returncode if returncode < 0 else returncode - 128
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _death(returncode: int, memory_bytes: int) -> str:
    name = signal_name(returncode)
    if name is not None:
        why = {"SIGSEGV": "a segmentation fault (a read or write outside an array or tensor?)",
               "SIGBUS": "a bus error (a read or write outside an array or tensor?)",
               "SIGABRT": "aborted (an uncaught C++ exception or a failed assertion)",
               "SIGKILL": f"killed (over {memory_bytes >> 30} GB of memory?)"}.get(name, name)
        return f"crashed the process running it: {why}"
    return (f"ended the process running it with exit status {returncode} "
            "(os._exit, sys.exit, or the memory limit)")


def _step_limit(step, item, limits: Limits) -> float:
    """The limit of one thing the child announces, as the parent plans it (never as the child says)."""
    kind = item[0]
    if kind == "code" or isinstance(step, KernelStep):
        return limits.cell_time_limit_s
    if kind == "prepare":
        from . import EXERCISES

        return EXERCISES[step.exercise].prepare_time_limit_s
    k, j = item[2], item[3]
    return float(step.cases[k][j].time_limit_s)


def run_steps(steps: list, limits: Limits | None = None) -> tuple[dict, dict]:
    """Run ``steps`` in bounded children; return ({(step, check, case): Outcome}, {step: note}).

    A code step's note is set when the cell raised, hung or killed its process; a grade step's cases
    that never ran get an Outcome saying why.
    """
    limits = limits or Limits()
    outcomes: dict = {}
    notes: dict = {}
    # cells that hung or killed a child (or the notebook's kernel): no child runs them (again)
    skip: set = {s for s, step in enumerate(steps) if isinstance(step, CodeStep) and step.skip}
    notes.update({s: step.skip for s, step in enumerate(steps) if isinstance(step, CodeStep) and step.skip})
    with tempfile.TemporaryDirectory(prefix="labops-grading-") as tmp:
        job = Path(tmp)
        (job / "in").mkdir()
        (job / "out").mkdir()
        (job / "work").mkdir()
        plan = []
        for s, step in enumerate(steps):
            if isinstance(step, CodeStep):
                plan.append({"kind": "code", "label": step.label, "source": step.source})
            elif isinstance(step, KernelStep):
                sizes = [{str(k): int(v) for k, v in d.items()} for d in
                         (step.sizes if isinstance(step.sizes, list) else [step.sizes])]
                plan.append({"kind": "kernel", "exercise": step.exercise, "fn": step.fn_name, "language": step.language,
                             "sizes": sizes if isinstance(step.sizes, list) else sizes[0]})
            else:
                cases = [[{"label": c.label, "names": list(c.names), "time_limit_s": c.time_limit_s,
                           "args": _encode(tuple(c.args), job / "in", f"s{s}_k{k}_c{j}", [])}
                          for j, c in enumerate(check)] for k, check in enumerate(step.cases)]
                plan.append({"kind": "grade", "exercise": step.exercise, "fn": step.fn_name, "cases": cases})
        start = 0
        while start < len(steps):
            (job / "job.json").write_text(json.dumps({"steps": plan, "start": start, "skip": sorted(skip),
                                                       "cell_time_limit_s": limits.cell_time_limit_s}))
            failed_at, why = _run_child(steps, job, limits)
            if failed_at is None:
                break
            s = failed_at[1]
            if failed_at[0] == "start":  # it died before running anything: a broken install, not the learner
                log = (job / "child.log").read_bytes().decode(errors="replace")[-1500:]
                why = f"the grading process could not start ({why}):\n{log}"
                for key in _case_keys(steps):
                    outcomes.setdefault(key, Outcome(raised=Raised(("GradingProcessDied",), why)))
                break
            if failed_at[0] == "code":
                skip.add(s)
                notes[s] = why
            else:
                for key in _case_keys(steps, s):
                    if key not in outcomes and (job / "out" / f"s{s}_k{key[1]}_c{key[2]}.json").exists():
                        continue  # it finished before the child died: its result is read below
                    here = failed_at[0] == "prepare" or failed_at[2:] == key[1:]
                    text = why if here else f"was not run: on an earlier case it {why}"
                    outcomes.setdefault(key, Outcome(raised=Raised(("GradingProcessDied",), text)))
            start = s + 1
        for s, step in enumerate(steps):
            if isinstance(step, CodeStep):
                note = _read_outcome(job / "out", f"s{s}.json")
                if note is not None and note.raised is not None and s not in notes:
                    notes[s] = note.raised.text
        for s, k, j in _case_keys(steps):
            if (s, k, j) not in outcomes:
                found = _read_outcome(job / "out", f"s{s}_k{k}_c{j}.json", not isinstance(steps[s], KernelStep))
                outcomes[(s, k, j)] = found or Outcome(raised=Raised(
                    ("GradingProcessDied",), "was not run: the grading process stopped before it"))
    return outcomes, notes


def _case_keys(steps, only: int | None = None):
    """(step, check, case) of every case of every grade step (or of step ``only``); a kernel step's is (s, 0, 0)."""
    for s, step in enumerate(steps):
        if isinstance(step, KernelStep) and only in (None, s):
            yield s, 0, 0
        if isinstance(step, GradeStep) and only in (None, s):
            for k, check in enumerate(step.cases):
                for j in range(len(check)):
                    yield s, k, j


def _run_child(steps, job: Path, limits: Limits):
    """One child from job.json's start; None when it finished, else (the item it was on, why it failed)."""
    read_end, write_end = os.pipe()
    argv = [sys.executable, "-m", "labops.exercises.sandbox", str(job), str(write_end)]
    with open(job / "child.log", "ab") as log:
        proc = subprocess.Popen(_sandboxed(argv, job, limits), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                pass_fds=(write_end,), env=_child_env(job), cwd=job / "work",
                                preexec_fn=_set_limits(limits))
    os.close(write_end)
    lines: queue.Queue = queue.Queue()

    def reader():
        with os.fdopen(read_end, "r", errors="replace") as pipe:
            for line in pipe:
                lines.put(line.split())
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    item, limit = ("start",), 120.0  # importing torch on a busy machine
    # However many lines the child writes, it has at most the sum of every limit in the plan.
    total = 120.0 + sum(limits.cell_time_limit_s + SLACK_S if isinstance(s, KernelStep) else
                        limits.cell_time_limit_s if isinstance(s, CodeStep) else
                        sum(c.time_limit_s + SLACK_S for check in s.cases for c in check) + 400.0 for s in steps)
    deadline_all = time.monotonic() + total
    deadline = time.monotonic() + limit
    try:
        while True:
            try:
                words = lines.get(timeout=max(0.0, min(deadline, deadline_all) - time.monotonic()))
            except queue.Empty:
                _kill_group(proc)
                return _item(item), f"did not finish within {limit:g} s (an endless loop?); the grader stopped it"
            if words is None:  # the child closed its end: it exited
                proc.wait()
                if item == ("finished",):
                    return None, ""
                return _item(item), _death(proc.returncode, limits.memory_bytes)
            if words[:1] == ["begin"] and len(words) in (3, 5):
                try:
                    parsed = (words[1], int(words[2]), *(int(w) for w in words[3:]))
                    step = steps[parsed[1]]
                    limit = _step_limit(step, parsed, limits) + SLACK_S
                except (ValueError, IndexError, KeyError, AttributeError):
                    continue  # not a line the worker writes
                item, deadline = parsed, time.monotonic() + limit
            elif words == ["finished"]:
                item = ("finished",)
    finally:
        _kill_group(proc)  # also whatever it left running in its group (a compiler, say)


def _item(item):
    return item if item and item[0] in ("code", "prepare", "case") else ("start", -1)


# ---- the child ----

class _NoIPython:
    """What ``get_ipython()`` returns in the child: magics and settings do nothing here."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None

    def __setattr__(self, name, value):
        pass


def _worker(job: Path, progress_fd: int):
    import linecache
    import traceback

    from . import EXERCISES
    from ._core import Case, Outcome as _Outcome, cases_after_a_hang, prepare, raised, run_case, time_limit

    progress = os.fdopen(progress_fd, "w", buffering=1)
    spec = json.loads((job / "job.json").read_text())
    start, skip = spec["start"], set(spec["skip"])
    cell_time_limit_s = float(spec["cell_time_limit_s"])
    out = job / "out"
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        transform = TransformerManager().transform_cell
    except ImportError:
        transform = None
    namespace = {"__name__": "__main__", "get_ipython": _NoIPython}

    def write(name, outcome):
        try:
            if outcome.raised is not None:
                data = {"raised": [list(outcome.raised.type_names), outcome.raised.text]}
            else:
                data = _encode(outcome.got, out, name, [])
        except Exception as exc:
            data = {"opaque": ["unsaved result", f"{type(exc).__name__}: {exc}"[:200]]}
        (out / f"{name}.json").write_text(json.dumps(data))

    for s, step in enumerate(spec["steps"]):
        if step["kind"] == "code":
            if s in skip:
                continue
            print("begin code", s, file=progress)
            filename = f"<{step['label']}>"
            source = step["source"]
            try:
                source = transform(source) if transform else source
                linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
                with time_limit(cell_time_limit_s):
                    exec(compile(source, filename, "exec"), namespace)
            except BaseException as exc:  # the cell failed; later cells still run, as in a notebook
                if s >= start:
                    write(f"s{s}", _Outcome(raised=raised(exc)))
                traceback.clear_frames(exc.__traceback__)
            continue
        if s < start:
            continue
        undefined = NameError(f"name {step['fn']!r} is not defined: no cell above the check defines it "
                              "(was it renamed, deleted, or did its cell raise?)")
        if step["kind"] == "kernel":
            print("begin case", s, 0, 0, file=progress)
            try:
                if step["fn"].isidentifier() and step["fn"] not in namespace:
                    raise undefined
                arrays = kernel_arrays
                if step.get("language") == "triton":
                    from .triton_kernels import kernel_arrays as arrays
                with time_limit(cell_time_limit_s):
                    outcome = _Outcome(got=arrays(eval(step["fn"], namespace), step["sizes"]))
            except BaseException as exc:  # launch() raised, or returned a launch CUDA does not accept
                outcome = _Outcome(raised=raised(exc))
            write(f"s{s}_k0_c0", outcome)
            continue
        exercise = EXERCISES[step["exercise"]]
        fn = namespace.get(step["fn"])
        print("begin prepare", s, file=progress)
        if fn is None:
            failed = raised(undefined)
            target = None
        else:
            try:
                target, failed = prepare(exercise, fn)
            except BaseException as exc:
                target, failed = None, raised(exc)
        stop = None
        for k, check in enumerate(step["cases"]):
            for j, c in enumerate(check):
                print("begin case", s, k, j, file=progress)
                if failed is not None:
                    outcome = _Outcome(raised=failed)
                elif stop is not None:
                    outcome = stop
                else:
                    args = _decode(c["args"], job / "in")
                    case = Case(c["label"], tuple(args), None, tuple(c["names"]), float(c["time_limit_s"]))
                    try:
                        outcome = run_case(exercise, target, case)
                    except BaseException as exc:  # SystemExit, KeyboardInterrupt raised by the code itself
                        outcome = _Outcome(raised=raised(exc))
                    stop = cases_after_a_hang(outcome)
                write(f"s{s}_k{k}_c{j}", outcome)
    print("finished", file=progress)
    progress.close()


if __name__ == "__main__":  # python -m labops.exercises.sandbox <job folder> <progress fd>
    _worker(Path(sys.argv[1]), int(sys.argv[2]))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: the learner's objects' finalizers have nothing to add
