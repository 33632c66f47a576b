"""The instructor's flow, run with nbgrader's own commands on a copy of notebooks/exercises.

One module-scoped class: ``generate_assignment`` (compared with the committed
release/), then ``autograde`` of every student in parallel (one nbgrader
process per student, two at a time, one SQLite gradebook), then ``export``
and ``labops audit-grades``. The class:

- honest work: the solutions (full marks), the blank release (zero, with
  labops's feedback), a half-right notebook (partial credit and its reason);
- cheats: every trick that once gave a blank notebook full marks, each its
  own submission of ex01 with wrong or blank answers -- each must score
  exactly what those answers are worth;
- bad notebooks of ex04 (a hang, a memory hog, os._exit, a segfault, a syntax
  error, a deleted check cell), each in its first exercise only -- each must
  cost only that exercise.
"""

import copy
import csv
import filecmp
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbgrader")
from nbgrader.utils import determine_grade, is_grade  # noqa: E402

from labops.exercises.sandbox import bwrap_path  # noqa: E402

COURSE = Path(__file__).resolve().parent.parent / "notebooks" / "exercises"
ASSIGNMENTS = sorted(p.name for p in (COURSE / "source").iterdir() if p.is_dir())
KERNEL_TIMEOUT_S = 20  # the notebook's own run of a cell; the PReLU build is not done there under autograde
WORKERS = 2

EX01, EX02, EX04 = "ex01_layer_contract", "ex02_compiled_op", "ex04_global_avg_pooling"

# Each trick goes into ex01 after wrong answers (those two are worth 0 of 7), or replaces them. In the
# student's own kernel most of them show full marks.
WRONG_TANH = "def tanh_backward(output, grad_output):\n    return grad_output  # tanh's derivative left out\n"
WRONG_LINEAR = ("def linear_acc_grad_parameters(input, grad_output, grad_weight, grad_bias, scale):\n"
                "    pass  # nothing accumulated\n")
TRICKS = {
    "rebinds_check": """
class _Full:
    score = 4.0
check = lambda *args, **kwargs: _Full()
""",
    "patches_compare": """
import labops.exercises._core as _core
_core.compare = lambda *args, **kwargs: None
import labops.exercises.compiled as _compiled
_compiled.check_in_subprocess = lambda fn, hidden=False: None
""",
    "no_display": """
get_ipython().ast_node_interactivity = "none"
""",
    "floats_say_done": """
get_ipython().display_formatter.formatters["text/plain"].for_type(float, lambda o, p, cycle: p.text("done"))
""",
    "reads_the_expected_answer": """
import inspect
def _expected():
    frame = inspect.currentframe().f_back.f_back
    while frame is not None:
        case = frame.f_locals.get("case")
        if case is not None and getattr(case, "expected", None) is not None:
            return case.expected
        frame = frame.f_back
    raise NotImplementedError()
def tanh_backward(output, grad_output):
    return _expected()
def linear_acc_grad_parameters(input, grad_output, grad_weight, grad_bias, scale):
    want = _expected()
    grad_weight.copy_(want[0]); grad_bias.copy_(want[1])
""",
    "patches_check_result": """
import labops.exercises._core as _core
_init = _core.CheckResult.__init__
def _full(self, exercise, passed, score, max_score, *rest, **kw):
    _init(self, exercise, True, max_score, max_score, *rest, **kw)
_core.CheckResult.__init__ = _full
""",
    "replaces_isclose": """
import torch
torch.isclose = lambda a, b, *args, **kwargs: torch.ones(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.bool)
""",
    "writes_the_gradebook": """
import glob, json, os, sqlite3
for path in glob.glob("../../../gradebook.db") + glob.glob("/**/gradebook.db", recursive=True)[:5]:
    try:
        db = sqlite3.connect(path, timeout=1)
        db.execute("UPDATE grade SET manual_score = 99")
        db.commit()
    except Exception:
        pass
os.makedirs("../../../trusted_scores/mallory_gradebook", exist_ok=True)
""",
    "tensor_says_yes": """
import torch
class _Yes(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("isclose", "eq", "__eq__", "allclose", "equal"):
            return True if name in ("allclose", "equal") else torch.ones(args[0].shape, dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})
def tanh_backward(output, grad_output):
    return torch.zeros_like(output).as_subclass(_Yes)
def linear_acc_grad_parameters(input, grad_output, grad_weight, grad_bias, scale):
    grad_weight.mul_(0)
""",
}

# Each replaces ex04's first exercise (the forward); the second (3 points) is honest and must keep them.
BAD_FORWARDS = {
    "hangs": "def global_avg_pool_forward(x):\n    while True:\n        pass\n",
    "hangs_at_top_level": "while True:\n    pass\n",
    "hogs_memory": "import torch\ndef global_avg_pool_forward(x):\n    return torch.ones(1 << 38)\n",
    "exits": "import os\ndef global_avg_pool_forward(x):\n    os._exit(3)\n",
    "segfaults": "import ctypes\ndef global_avg_pool_forward(x):\n    ctypes.string_at(0)\n",
    "syntax_error": "def global_avg_pool_forward(x)\n    return x\n",
}


def _trick_notebook(course, code):
    """ex01 with wrong answers and ``code`` after them (or in their place, when it defines the functions)."""
    nb = _read(course, "release", EX01)
    _cell(nb, "tanh_solution").source = ("" if "def tanh_backward" in code else WRONG_TANH) + code
    _cell(nb, "linear_solution").source = "" if "def linear_acc_grad_parameters" in code else WRONG_LINEAR
    return nb


def _nbgrader(course, *args):
    exe = Path(sys.executable).with_name("nbgrader")
    return subprocess.run([str(exe), *args, "--log-level=WARN"], cwd=course, capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _submit(course, student, assignment, nb):
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{assignment}.ipynb")


def _read(course, kind, assignment):
    return nbformat.read(course / kind / assignment / f"{assignment}.ipynb", 4)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    shutil.copytree(COURSE / "source", course / "source")
    shutil.copy(COURSE / "nbgrader_config.py", course)
    secret_dir = tmp_path_factory.mktemp("instructor")
    (secret_dir / "secret").write_text("a secret of this test run\n")
    config = course / "nbgrader_config.py"
    config.write_text(config.read_text() + f"\nc.TrustedScores.secret_file = {str(secret_dir / 'secret')!r}\n"
                      "c.TrustedScores.cell_time_limit_s = 15.0\n")
    run = _nbgrader(course, "generate_assignment", "*", "--force")
    assert run.returncode == 0, run.stderr

    for a in ASSIGNMENTS:
        _submit(course, "alice", a, _read(course, "source", a))  # the instructor's solutions
        _submit(course, "bob", a, _read(course, "release", a))  # handed in blank
    ex01 = _read(course, "source", EX01)
    _cell(ex01, "linear_solution").source = _cell(ex01, "linear_solution").source.replace("scale * ", "")
    _submit(course, "carla", EX01, ex01)  # half right: forgets `scale`

    for trick, code in TRICKS.items():
        _submit(course, f"trick_{trick}", EX01, _trick_notebook(course, code))
    nb = _read(course, "release", EX02)  # the C++ exercise's own trick: a check that never builds anything
    _cell(nb, "prelu_solution").source = ("def prelu_source():\n    return 'this is not C++'\n" + TRICKS["patches_compare"])
    _submit(course, "trick_patches_compiled_check", EX02, nb)

    for bad, code in BAD_FORWARDS.items():
        nb = _read(course, "source", EX04)
        if bad == "hangs_at_top_level":
            _cell(nb, "pool_fwd_solution").source = code + _cell(nb, "pool_fwd_solution").source
        else:
            _cell(nb, "pool_fwd_solution").source = code
        _submit(course, f"bad_{bad}", EX04, nb)
    nb = _read(course, "source", EX04)
    nb.cells.remove(_cell(nb, "check_global_avg_pool_forward"))
    _submit(course, "bad_deleted_check_cell", EX04, nb)

    students = sorted(p.name for p in (course / "submitted").iterdir())
    start = time.monotonic()
    seconds = {}

    def autograde(student):
        t = time.monotonic()
        done = _nbgrader(course, "autograde", "*", f"--student={student}", f"--Execute.timeout={KERNEL_TIMEOUT_S}")
        seconds[student] = time.monotonic() - t
        return student, done

    with ThreadPoolExecutor(WORKERS) as pool:
        runs = dict(pool.map(autograde, students))
    total = time.monotonic() - start
    export = _nbgrader(course, "export")
    assert export.returncode == 0, export.stderr
    with open(course / "grades.csv") as f:
        grades = {(r["student_id"], r["assignment"]): (float(r["score"]), float(r["max_score"]))
                  for r in csv.DictReader(f)}
    print(f"\nautograde of {len(students)} students ({WORKERS} at a time): {total:.0f} s; alice's "
          f"{len(ASSIGNMENTS)} notebooks {seconds['alice']:.0f} s; the hangs {seconds['bad_hangs']:.0f} s and "
          f"{seconds['bad_hangs_at_top_level']:.0f} s")
    return course, runs, grades, seconds


def _graded_cells(course, student, assignment):
    nb = nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb", 4)
    return {c.metadata.nbgrader.grade_id: c for c in nb.cells if is_grade(c) and c.cell_type == "code"}


def _text(cell):
    """The cell's printed feedback with its line wrapping undone (runs of whitespace become one space)."""
    return " ".join("".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream").split())


def test_every_autograde_run_succeeds(graded):
    _, runs, _, _ = graded
    for student, run in runs.items():
        assert run.returncode == 0 and "There was an error processing" not in run.stderr, (student, run.stderr[-3000:])


def test_release_is_what_nbgrader_generates(graded):
    course = graded[0]
    for a in ASSIGNMENTS:
        new, committed = course / "release" / a / f"{a}.ipynb", COURSE / "release" / a / f"{a}.ipynb"
        assert committed.exists(), f"{committed} is missing: run nbgrader generate_assignment (README)"
        assert filecmp.cmp(new, committed, shallow=False), \
            f"{committed} differs from what nbgrader generates from source/: regenerate it (README)"
        text = new.read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "hidden = True"):
            assert marker not in text, f"{a}: {marker!r} left in the student version"


def test_solutions_get_full_marks_in_every_graded_cell(graded):
    course, _, grades, _ = graded
    for a in ASSIGNMENTS:
        cells = _graded_cells(course, "alice", a)
        assert cells
        for grade_id, cell in cells.items():
            score, max_score = determine_grade(cell)
            assert score == max_score > 0, (a, grade_id, _text(cell))
            assert "with the grader's hidden cases" in _text(cell)
        assert grades[("alice", a)][0] == grades[("alice", a)][1] > 0


def test_blank_submission_gets_zero_with_labops_feedback(graded):
    course, _, grades, _ = graded
    for a in ASSIGNMENTS:
        for cell in _graded_cells(course, "bob", a).values():
            assert determine_grade(cell)[0] == 0
            assert "is not written yet: replace `raise NotImplementedError()`" in _text(cell)
        assert grades[("bob", a)][0] == 0


def test_half_right_gets_partial_credit_and_its_reason(graded):
    course, _, grades, _ = graded
    cell = _graded_cells(course, "carla", EX01)["check_linear_acc_grad_parameters"]
    score, max_score = determine_grade(cell)
    assert 0 < score < max_score
    assert "`scale` ignored" in _text(cell)
    assert grades[("carla", EX01)][0] == 3 + score  # tanh right (3) + partial


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_a_trick_scores_what_its_answers_are_worth(graded, trick):
    course, _, grades, _ = graded
    assert grades[(f"trick_{trick}", EX01)] == (0.0, 7.0)
    for cell in _graded_cells(course, f"trick_{trick}", EX01).values():
        assert determine_grade(cell)[0] == 0, _text(cell)


def test_the_compiled_check_cannot_be_patched(graded):
    course, _, grades, _ = graded
    assert grades[("trick_patches_compiled_check", EX02)] == (0.0, 7.0)
    cell = _graded_cells(course, "trick_patches_compiled_check", EX02)["check_prelu_op"]
    assert "your C++ did not compile" in _text(cell), _text(cell)


@pytest.mark.parametrize("trick, shown", [("rebinds_check", 4), ("patches_compare", 3), ("patches_check_result", 3),
                                          ("replaces_isclose", 3), ("reads_the_expected_answer", 3)])
def test_a_kernel_that_showed_more_is_told_so(graded, trick, shown):
    # In the student's own kernel these tricks work: it shows full marks; the feedback says what counts.
    cell = _graded_cells(graded[0], f"trick_{trick}", EX01)["check_tanh_backward"]
    assert f"your notebook's own run of this check showed {shown}; the grader" in _text(cell), _text(cell)


@pytest.mark.skipif(bwrap_path() is None, reason="the sandbox needs bubblewrap")
def test_no_submission_wrote_the_gradebook_and_the_audit_flags_a_write(graded):
    from labops.exercises.grading import audit

    course = graded[0]
    assert not (course / "trusted_scores" / "mallory_gradebook").exists()
    assert audit(str(course)) == []  # every score is the trusted one
    # What the trick would have done without the sandbox: the audit must name it.
    with sqlite3.connect(course / "gradebook.db") as db:
        db.execute("UPDATE grade SET manual_score = 99 WHERE id IN (SELECT grade.id FROM grade "
                   "JOIN submitted_notebook ON grade.notebook_id = submitted_notebook.id "
                   "JOIN submitted_assignment ON submitted_notebook.assignment_id = submitted_assignment.id "
                   "WHERE submitted_assignment.student_id = 'trick_writes_the_gradebook')")
    flags = audit(str(course))
    assert flags and all("trick_writes_the_gradebook" in f and "manual score of 99" in f for f in flags), flags
    cli = subprocess.run([sys.executable, "-m", "labops", "audit-grades", str(course)], capture_output=True, text=True)
    assert cli.returncode == 1 and "trick_writes_the_gradebook" in cli.stdout, cli.stdout + cli.stderr


@pytest.mark.parametrize("bad", sorted(BAD_FORWARDS) + ["deleted_check_cell"])
def test_a_bad_notebook_costs_only_its_own_exercise(graded, bad):
    course, runs, grades, seconds = graded
    student = f"bad_{bad}"
    assert runs[student].returncode == 0, runs[student].stderr[-2000:]
    assert grades[(student, EX04)] == (3.0, 6.0)  # the forward lost, the backward kept
    cells = _graded_cells(course, student, EX04)
    assert determine_grade(cells["check_global_avg_pool_backward"])[0] == 3
    if bad != "deleted_check_cell":
        text = _text(cells["check_global_avg_pool_forward"])
        words = {"hangs": "did not finish within", "hangs_at_top_level": "ran past the",
                 "hogs_memory": "raised RuntimeError", "exits": "exit status 3", "segfaults": "segmentation fault",
                 "syntax_error": "is not defined"}[bad]
        assert words in text, text
    if bad.startswith("hangs"):  # a hang costs its limits (the notebook's run, then the grader's), not more
        assert seconds[student] < 2 * KERNEL_TIMEOUT_S + 60, seconds[student]


def test_feedback_pages_are_made_for_every_graded_notebook(graded):
    course = graded[0]
    done = _nbgrader(course, "generate_feedback", "*")
    assert done.returncode == 0, done.stderr
    for student in ("alice", "carla", "bad_segfaults", "bad_hangs"):
        for page in (course / "feedback" / student).glob("*/*.html"):
            assert page.stat().st_size > 1000
        assert list((course / "feedback" / student).glob("*/*.html")), student
    page = (course / "feedback" / "carla" / EX01 / f"{EX01}.html").read_text()
    assert "`scale` ignored" in " ".join(page.split())
