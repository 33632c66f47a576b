"""Grades a class can trust: nbgrader's autograde, every point computed outside the student's kernel.

The rule: a score is computed by a process that never ran student code, from
values it produced itself. ``notebooks/exercises/nbgrader_config.py`` puts
three pieces of this module into nbgrader's own autograde pipeline:

``ContainedExecute``
    nbgrader's Execute, with the student's kernel started in a bubblewrap
    sandbox (``SandboxedKernelManager``: the file system read-only, the course
    folder -- gradebook, other students, the instructor's secret -- hidden, its
    own process namespace) and a kernel that dies or hangs costing only the
    cells it did not finish: the notebook is still graded and gets feedback.
``TrustedScores``
    after the kernel has run, for each graded cell ``check("<id>", <fn>)``: the
    student's own cells above it (their source, as submitted) run again in a
    bounded child process (``labops.exercises.sandbox``) on inputs drawn from
    the instructor's secret; the child hands back plain arrays, and this
    process compares them with the oracle, computed after the child returned.
    The graded cell's outputs are replaced by that feedback and that score,
    which is what nbgrader's SaveAutoGrades then records. Whatever the kernel
    printed or displayed, or patched, does not reach the gradebook; when it
    disagrees with the trusted score, the feedback says so.
``audit``
    ``labops audit-grades`` after autograde: every score in the gradebook
    against the trusted scores this module wrote beside it, to flag a score a
    submission wrote for itself (or any manual change).
"""

from __future__ import annotations

import ast
import base64
import io
import json
import os
import secrets
import sys
from pathlib import Path

from ._core import evaluate, seeds_from, wrap_lines
from .sandbox import CodeStep, GradeStep, KernelStep, Limits, bwrap_args, bwrap_path, run_steps, signal_name

__all__ = ["ContainedExecute", "SandboxedKernelManager", "TrustedScores", "audit", "grade_cells", "load_secret",
           "notebook_steps"]

DEFAULT_SECRET_FILE = "~/.config/labops/grader_secret"
LEDGER_DIRECTORY = "trusted_scores"


def load_secret(path: str = DEFAULT_SECRET_FILE, create: bool = True) -> str:
    """The instructor's secret: $LABOPS_GRADER_SECRET, else the file at ``path`` (made, mode 600, if missing).

    The grader's cases are drawn from it: it lives outside release/, outside the installed package and
    outside anything the student's code can see (the sandboxes hide its folder).
    """
    if os.environ.get("LABOPS_GRADER_SECRET"):
        return os.environ["LABOPS_GRADER_SECRET"]
    file = Path(os.path.expanduser(path))
    if not file.exists():
        if not create:
            raise FileNotFoundError(f"no grader secret at {file}")
        file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    return file.read_text().strip()


def secret_folder(path: str = DEFAULT_SECRET_FILE) -> str:
    return str(Path(os.path.expanduser(path)).parent)


# ---- which cells are the student's, which are checks ----

def check_call(source: str) -> tuple[str, str] | None:
    """(exercise id, function name) of a graded cell's ``check("<id>", <name>, ...)``, or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "check" \
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and isinstance(node.args[1], ast.Name):
            return node.args[0].value, node.args[1].id
    return None


def _is_graded_check(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and meta.get("grade") and not meta.get("solution")


def notebook_steps(cells: list, skip: dict | None = None) -> tuple[list, dict]:
    """A notebook's code cells as sandbox steps: a CodeStep per student cell, a GradeStep (its cases not drawn
    yet) per labops ``check`` cell; and {step index: cell index}. ``skip`` as for ``grade_cells``."""
    from . import EXERCISES

    steps, where = [], {}  # where: step index -> cell index
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        found = check_call(cell.get("source", "")) if _is_graded_check(cell) else None
        if _is_graded_check(cell):
            if found is None or found[0] not in EXERCISES:
                continue  # not a labops check: left as nbgrader graded it
            where[len(steps)] = index
            steps.append(GradeStep(found[0], found[1], None))
        else:
            where[len(steps)] = index
            steps.append(CodeStep(f"cell {index + 1}", cell.get("source", ""), (skip or {}).get(index)))
    return steps, where


def grade_cells(cells: list, secret: str, limits: Limits | None = None, skip: dict | None = None) \
        -> tuple[dict, dict]:
    """Grade every ``check`` cell of a notebook from its student cells' source; never runs them here.

    ``skip``: {cell index: why} for cells not to run (they hung or crashed the notebook's kernel).
    Returns ({cell index: CheckResult}, {cell index: note on a student cell that raised, hung or crashed}).
    """
    from . import EXERCISES

    steps, where = notebook_steps(cells, skip)

    def checks_of(step):
        with seeds_from(secret):
            return EXERCISES[step.exercise].make_checks(True)

    # The inputs go to the child; these checks (and their expected answers) are dropped before it runs.
    for step in steps:
        if isinstance(step, GradeStep):
            step.cases = [c.cases for c in checks_of(step)]
    # A triton_* check: the learner's child hands back the kernel's source and launches; a fresh child runs it.
    first = [_triton_kernel_step(step) if _is_triton(step) else step for step in steps]
    outcomes, notes = run_steps(first, limits)
    outcomes.update(_run_triton_kernels(steps, outcomes, limits))
    for step in steps:
        if isinstance(step, GradeStep):
            step.cases = None

    results = {}
    for s, step in enumerate(steps):
        if isinstance(step, GradeStep):
            exercise = EXERCISES[step.exercise]
            results[where[s]] = evaluate(exercise, checks_of(step), lambda k, j, case, s=s: outcomes[(s, k, j)],
                                         hidden=True)
    return results, {where[s]: note for s, note in notes.items() if s in where}


def _is_triton(step) -> bool:
    return isinstance(step, GradeStep) and step.exercise.startswith("triton_")


def _triton_kernel_step(step) -> KernelStep:
    from . import triton_kernels

    sizes = [triton_kernels.case_sizes(step.exercise, case) for check in step.cases for case in check]
    return KernelStep(step.exercise, step.fn_name, sizes, language="triton")


def _run_triton_kernels(steps, outcomes, limits) -> dict:
    """The outcomes of each triton_* grade step's cases: its kernel's source (handed back by the learner's child
    as ``outcomes[(s, 0, 0)]``), checked by ``triton_kernels.harness``, defined and run in a fresh child where
    no cell of the learner's ran. What the learner's child raised, or a source refused, is every case's
    outcome."""
    from . import triton_kernels
    from ._core import Outcome, raised

    found, second, where = {}, [], {}
    for s, step in enumerate(steps):
        if not _is_triton(step):
            continue
        keys = [(s, k, j) for k, check in enumerate(step.cases) for j in range(len(check))]
        handed = outcomes.pop((s, 0, 0))
        if handed.raised is not None:
            found.update({key: handed for key in keys})
            continue
        sizes = [triton_kernels.case_sizes(step.exercise, case) for check in step.cases for case in check]
        try:
            cell = triton_kernels.harness(step.exercise, handed.got, sizes)
        except triton_kernels.TritonIRError as exc:
            found.update({key: Outcome(raised=raised(exc)) for key in keys})
            continue
        second.append(CodeStep(f"your {step.exercise} kernel", cell))
        where[len(second)] = s
        second.append(GradeStep(step.exercise, "_submission", step.cases))
    if second:
        ran, _ = run_steps(second, limits)
        for (s2, k, j), outcome in ran.items():
            found[(where[s2], k, j)] = outcome
    return found


# ---- nbgrader: the kernel in a sandbox, and a dead kernel that costs only what it did not finish ----

try:
    from jupyter_client.manager import AsyncKernelManager
    from nbgrader.preprocessors import Execute, NbGraderPreprocessor
    from nbformat.v4 import new_output
    from traitlets import Float, Unicode
except ImportError:  # nbgrader is the instructors' extra ("teach"); the rest of labops works without it
    AsyncKernelManager = Execute = NbGraderPreprocessor = None

if AsyncKernelManager is not None:

    class SandboxedKernelManager(AsyncKernelManager):
        """A kernel started inside bubblewrap: it can write only its own folder and /tmp (private), and with
        bubblewrap it has no network: it talks to nbgrader through Unix sockets in a folder of its own."""

        hidden_paths: list = []
        memory_bytes: int = 6 << 30

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if bwrap_path() is not None:
                import tempfile

                self._ipc_folder = tempfile.mkdtemp(prefix="labops-kernel-")
                self.transport, self.ip = "ipc", os.path.join(self._ipc_folder, "ipc")

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            await super()._async_cleanup_resources(restart)
            if not restart and getattr(self, "_ipc_folder", None):
                import shutil

                shutil.rmtree(self._ipc_folder, ignore_errors=True)

        def format_kernel_cmd(self, extra_arguments=None):
            # The address-space limit is set by a tiny launcher that then becomes the kernel (exec).
            # It also drops the secret from the environment, should it be there.
            limit = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]),) * 2); "
                     "os.environ.pop('LABOPS_GRADER_SECRET', None); os.execv(sys.argv[2], sys.argv[2:])")
            cmd = [sys.executable, "-c", limit, str(self.memory_bytes)] + super().format_kernel_cmd(extra_arguments)
            if bwrap_path() is None:
                return cmd
            cwd = os.path.realpath(str(self._launch_args.get("cwd") or os.getcwd()))
            connection = os.path.realpath(self.connection_file)
            # Hidden: the course folder, the secret's folder, and Jupyter's runtime folder (other kernels' keys).
            sandbox = bwrap_args([*self.hidden_paths, os.path.dirname(connection)], [cwd, self._ipc_folder],
                                 [connection])
            sandbox += ["--chdir", cwd,
                        "--unshare-all", "--die-with-parent",
                        "--setenv", "MPLCONFIGDIR", "/tmp", "--setenv", "IPYTHONDIR", "/tmp/ipython",
                        # Its parent is outside its process namespace: 1 tells ipykernel not to poll for it
                        # (and not to print the connection banner a kernel without a parent prints).
                        "--setenv", "JPY_PARENT_PID", "1",
                        "--setenv", "LABOPS_GRADING_KERNEL", "1", "--"]
            return sandbox + cmd

    def _exit_text(code) -> str:
        if code is None:
            return "stopped responding"
        name = signal_name(code)
        return f"died ({name})" if name else f"exited with status {code}"

    class ContainedExecute(Execute):
        """nbgrader's Execute in a sandboxed kernel; a kernel that dies or hangs stops only the cells after it."""

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
            super().__init__(*args, **kwargs)

        def preprocess(self, nb, resources=None, km=None):
            self._stopped, self._stopped_at = None, None
            SandboxedKernelManager.hidden_paths = _hidden_paths(self)
            memory_gb = self.config.get("TrustedScores", {}).get("memory_gb", 6.0)
            SandboxedKernelManager.memory_bytes = int(float(memory_gb) * (1 << 30))
            try:
                nb, resources = super().preprocess(nb, resources, km)
            except Exception as exc:  # the kernel could not start or shut down: the cells keep what they have
                self._stopped = self._stopped or f"the notebook's kernel failed ({type(exc).__name__})"
            resources.setdefault("labops", {}).update(kernel=self._stopped, stopped_at=self._stopped_at)
            return nb, resources

        def preprocess_cell(self, cell, resources, index):
            if self._stopped:
                if cell.cell_type == "code":
                    cell.outputs = [new_output("stream", name="stdout",
                                               text=f"(not run in the notebook's kernel: {self._stopped})\n")]
                return cell, resources
            try:
                cell, resources = super().preprocess_cell(cell, resources, index)
            except Exception as exc:
                name = type(exc).__name__
                if name == "DeadKernelError":
                    code = getattr(getattr(getattr(self, "km", None), "provisioner", None), "process", None)
                    code = code.poll() if code is not None else None
                    self._stopped = f"the kernel {_exit_text(code)} in cell {index + 1}"
                elif name == "CellTimeoutError":  # nbclient gave up waiting for the interrupted cell's output
                    self._stopped = f"cell {index + 1} ran past the {self.timeout} s limit"
                else:
                    raise
                self._stopped_at = index
                cell.outputs.append(new_output("error", ename=name, evalue=self._stopped, traceback=[self._stopped]))
                return cell, resources
            if any(o.get("ename") == "CellTimeoutError" for o in cell.get("outputs", [])):
                self._stopped = f"cell {index + 1} ran past the {self.timeout} s limit"
                self._stopped_at = index
            return cell, resources

    class TrustedScores(NbGraderPreprocessor):
        """Each graded ``check`` cell's outputs and points, from the trusted check of the submitted source."""

        secret_file = Unicode(DEFAULT_SECRET_FILE, help="the instructor's secret the grader's cases are drawn "
                              "from (created on first use)").tag(config=True)
        memory_gb = Float(6.0, help="address-space limit of the process that runs a student's code").tag(config=True)
        sandbox = Unicode("auto", help="'auto' (bubblewrap when installed), 'bwrap' or 'none'").tag(config=True)
        cell_time_limit_s = Float(60.0, help="how long one of the student's cells may run in the grading "
                                  "process").tag(config=True)
        ledger_directory = Unicode(LEDGER_DIRECTORY, help="where the trusted scores are kept for "
                                   "`labops audit-grades`, relative to the course folder").tag(config=True)

        def preprocess(self, nb, resources):
            secret = load_secret(self.secret_file)
            limits = Limits(memory_bytes=int(self.memory_gb * (1 << 30)), sandbox=self.sandbox,
                            hidden_paths=_hidden_paths(self), cell_time_limit_s=self.cell_time_limit_s)
            kernel = resources.get("labops", {}).get("kernel")
            stopped_at = resources.get("labops", {}).get("stopped_at")
            skip = {stopped_at: f"was not run again: in your notebook, {kernel}"} if stopped_at is not None else {}
            results, notes = grade_cells(nb.cells, secret, limits, skip)
            ledger = {}
            previous = -1
            for index in sorted(results):
                cell, result = nb.cells[index], results[index]
                lines = list(result.messages)
                for cell_index, note in sorted(notes.items()):
                    if previous < cell_index < index:
                        lines.append(f"note: cell {cell_index + 1} {note}")
                shown = _kernel_value(cell)
                if kernel and shown is None:
                    lines.append(f"note: {kernel}; the grader ran your code in a fresh process, and the points "
                                 "above are what it found.")
                elif shown is not None and shown != result.score:
                    lines.append(f"note: your notebook's own run of this check showed {shown:g}; the grader ran "
                                 f"your code again outside the notebook and gives {result.score:g}. Only the "
                                 "grader's number counts.")
                outputs = [new_output("stream", name="stdout", text=wrap_lines(lines) + "\n")]
                if result.figure is not None:
                    buffer = io.BytesIO()
                    result.figure.savefig(buffer, format="png", dpi=90)
                    outputs.append(new_output("display_data", data={
                        "image/png": base64.b64encode(buffer.getvalue()).decode()}))
                outputs.append(new_output("execute_result", data={"text/plain": f"{result.score:g}"},
                                          execution_count=cell.get("execution_count")))
                cell.outputs = outputs
                ledger[cell.metadata.nbgrader.grade_id] = result.score
                previous = index
            self._write_ledger(resources, ledger)
            return nb, resources

        def _write_ledger(self, resources, ledger):
            info = resources.get("nbgrader", {})
            if not info.get("student"):
                return
            folder = Path(self.ledger_directory) / info["student"] / info["assignment"]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{info['notebook']}.json").write_text(json.dumps(ledger, indent=1, sort_keys=True))

    def _hidden_paths(preprocessor) -> list[str]:
        """What a student's code must not see: the course folder (gradebook, submissions, ledger), the secret."""
        course = preprocessor.config.get("CourseDirectory", {}).get("root") or os.getcwd()
        secret = preprocessor.config.get("TrustedScores", {}).get("secret_file") or DEFAULT_SECRET_FILE
        return [os.path.realpath(str(course)), secret_folder(str(secret))]

    def _kernel_value(cell) -> float | None:
        """The number the student's kernel showed for a graded cell, if it showed one."""
        for output in cell.get("outputs", []):
            if output.get("output_type") == "execute_result":
                try:
                    value = float(str(output.get("data", {}).get("text/plain", "")).strip().strip("'\""))
                except ValueError:
                    return None
                return value if value == value else None
        return None


# ---- the audit ----

def audit(course: str = ".", db_url: str | None = None, ledger_directory: str = LEDGER_DIRECTORY) -> list[str]:
    """Every gradebook score that differs from the trusted score (or has none): one line each.

    A manual score an instructor set in formgrader is listed too: the audit cannot tell who wrote it.
    """
    from nbgrader.api import Gradebook

    course_path = Path(course)
    db_url = db_url or f"sqlite:///{(course_path / 'gradebook.db').resolve()}"
    flags = []
    with Gradebook(db_url) as gb:
        for assignment in gb.assignments:
            for submission in gb.assignment_submissions(assignment.name):
                student = submission.student.id
                for notebook in submission.notebooks:
                    path = course_path / ledger_directory / student / assignment.name / f"{notebook.name}.json"
                    ledger = json.loads(path.read_text()) if path.exists() else None
                    for grade in notebook.grades:
                        where = f"{student} / {assignment.name} / {notebook.name} / {grade.name}"
                        if grade.manual_score is not None:
                            trusted = None if ledger is None else ledger.get(grade.name)
                            flags.append(f"{where}: a manual score of {grade.manual_score:g} was written "
                                         f"(the trusted check gave {trusted}): by an instructor in formgrader, "
                                         "or by a submission")
                        if grade.extra_credit:
                            flags.append(f"{where}: extra credit {grade.extra_credit:g} was written")
                        if ledger is None:
                            if grade.auto_score:
                                flags.append(f"{where}: {grade.auto_score:g} points but no trusted score "
                                             f"({path} is missing)")
                            continue
                        if grade.name in ledger and grade.auto_score != ledger[grade.name]:
                            flags.append(f"{where}: the gradebook's automatic score {grade.auto_score} is not the "
                                         f"trusted {ledger[grade.name]:g}")
    return flags
