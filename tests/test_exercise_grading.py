"""The instructor's flow, run with nbgrader's own commands on a copy of notebooks/exercises.

One module-scoped run: ``generate_assignment`` (compared with the committed
release/), then one ``autograde`` of a class of submissions -- the source
notebooks (full marks), the released ones (zero, with labops's feedback), a
half-right one (partial credit and its reason), one that hangs and one whose
kernel crashes -- then ``export``.
"""

import copy
import csv
import filecmp
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbgrader")
from nbgrader.utils import determine_grade, is_grade  # noqa: E402

COURSE = Path(__file__).resolve().parent.parent / "notebooks" / "exercises"
ASSIGNMENTS = sorted(p.name for p in (COURSE / "source").iterdir() if p.is_dir())
TIMEOUT_S = 300  # nbgrader's per-cell limit: building the C++ exercise may take a minute on a busy 2-core machine
HANG_TIMEOUT_S = 20  # for the hanging submission alone, graded in its own run: it costs this much


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


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    shutil.copytree(COURSE / "source", course / "source")
    shutil.copy(COURSE / "nbgrader_config.py", course)
    run = _nbgrader(course, "generate_assignment", "*", "--force")
    assert run.returncode == 0, run.stderr

    for a in ASSIGNMENTS:
        source = nbformat.read(course / "source" / a / f"{a}.ipynb", 4)
        _submit(course, "alice", a, source)  # the instructor's solutions
        _submit(course, "bob", a, nbformat.read(course / "release" / a / f"{a}.ipynb", 4))  # handed in blank
    ex01 = nbformat.read(course / "source" / "ex01_layer_contract" / "ex01_layer_contract.ipynb", 4)
    _cell(ex01, "linear_solution").source = _cell(ex01, "linear_solution").source.replace("scale * ", "")
    _submit(course, "carla", "ex01_layer_contract", ex01)  # half right: forgets `scale`
    ex04 = nbformat.read(course / "source" / "ex04_global_avg_pooling" / "ex04_global_avg_pooling.ipynb", 4)
    hang, crash = copy.deepcopy(ex04), copy.deepcopy(ex04)
    _cell(hang, "pool_fwd_solution").source = "while True:\n    pass\n" + _cell(hang, "pool_fwd_solution").source
    _cell(crash, "pool_fwd_solution").source += "\nimport ctypes\nctypes.string_at(0)  # segfault\n"
    _submit(course, "hank", "ex04_global_avg_pooling", hang)
    _submit(course, "dora", "ex04_global_avg_pooling", crash)

    start = time.monotonic()
    autograde = _nbgrader(course, "autograde", "*", f"--Execute.timeout={TIMEOUT_S}", "--CourseDirectory.student_id_exclude=hank")
    seconds = time.monotonic() - start
    hang = _nbgrader(course, "autograde", "ex04_global_avg_pooling", "--student=hank", f"--Execute.timeout={HANG_TIMEOUT_S}")
    assert "hank" not in autograde.stderr and hang.returncode == 0, hang.stderr
    export = _nbgrader(course, "export")
    assert export.returncode == 0, export.stderr
    with open(course / "grades.csv") as f:
        grades = {(r["student_id"], r["assignment"]): (float(r["score"]), float(r["max_score"]))
                  for r in csv.DictReader(f)}
    print(f"autograde of {len(ASSIGNMENTS)} assignments x 2 students + 3 more notebooks: {seconds:.0f} s")
    return course, autograde, grades


def _graded_cells(course, student, assignment):
    nb = nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb", 4)
    return [c for c in nb.cells if is_grade(c) and c.cell_type == "code"]


def _text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_release_is_what_nbgrader_generates(graded):
    course, _, _ = graded
    for a in ASSIGNMENTS:
        new, committed = course / "release" / a / f"{a}.ipynb", COURSE / "release" / a / f"{a}.ipynb"
        assert committed.exists(), f"{committed} is missing: run nbgrader generate_assignment (README)"
        assert filecmp.cmp(new, committed, shallow=False), \
            f"{committed} differs from what nbgrader generates from source/: regenerate it (README)"
        text = new.read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "hidden = True"):
            assert marker not in text, f"{a}: {marker!r} left in the student version"


def test_solutions_get_full_marks_in_every_graded_cell(graded):
    course, _, grades = graded
    for a in ASSIGNMENTS:
        cells = _graded_cells(course, "alice", a)
        assert cells
        for cell in cells:
            score, max_score = determine_grade(cell)
            assert score == max_score > 0, (a, cell.metadata.nbgrader.grade_id, _text(cell))
            assert "with the grader's hidden cases" in _text(cell)  # the hidden tests ran
        score, max_score = grades[("alice", a)]
        assert score == max_score > 0


def test_blank_submission_gets_zero_with_labops_feedback(graded):
    course, _, grades = graded
    for a in ASSIGNMENTS:
        for cell in _graded_cells(course, "bob", a):
            score, _ = determine_grade(cell)
            assert score == 0
            assert not [o for o in cell.outputs if o.output_type == "error"], "a crash, not feedback"
            assert "is not written yet: replace `raise NotImplementedError()`" in _text(cell)
        assert grades[("bob", a)][0] == 0


def test_half_right_gets_partial_credit_and_its_reason(graded):
    course, _, grades = graded
    cell = next(c for c in _graded_cells(course, "carla", "ex01_layer_contract")
                if c.metadata.nbgrader.grade_id == "check_linear_acc_grad_parameters")
    score, max_score = determine_grade(cell)
    assert 0 < score < max_score
    assert "`scale` ignored" in _text(cell)
    assert grades[("carla", "ex01_layer_contract")][0] == 3 + score  # tanh right (3) + partial


def test_bad_submissions_cost_only_their_own_grade(graded):
    course, autograde, grades = graded
    # The hanging notebook: its cell is interrupted after the timeout, its graded cells score 0.
    assert grades[("hank", "ex04_global_avg_pooling")][0] < grades[("alice", "ex04_global_avg_pooling")][0]
    # The crashing one is reported by name and graded 0; everyone else is graded.
    assert "There was an error processing assignment 'ex04_global_avg_pooling' for student 'dora'" \
        in autograde.stderr
    assert not (course / "autograded" / "dora" / "ex04_global_avg_pooling").exists()
    assert grades[("dora", "ex04_global_avg_pooling")][0] == 0
    assert grades[("alice", "ex04_global_avg_pooling")] == (6.0, 6.0)
