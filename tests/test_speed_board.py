"""The speed leaderboard: kernels out of the grader's child as plain data, checked, timed, written.

The CPU tests cover everything but the timing: the child hands back each reference's body and launch,
the parent refuses a body that reads a file through the preprocessor and a launch that breaks a rule
(whatever the child was made to say), and ``board`` turns a fake class into the CSV rows with a fake
timer. The GPU test times the reference GELU.
"""

import textwrap
import time

import numpy as np
import pytest
import torch

from labops import rtc
from labops.exercises import cuda, speed
from labops.exercises._core import Outcome
from labops.exercises.sandbox import LARGEST_KERNEL_BODY, CodeStep, KernelStep, bwrap_path, run_steps
from labops.exercises.speed_board import (KernelScore, RefusedKernel, benchmark_sizes, board, kernel_from_child,
                                          preprocessor_file_read, time_kernel)

nbformat = pytest.importorskip("nbformat")

IDS = sorted(cuda.PROBLEMS)
INCLUDE = '#include "/etc/hostname"\n'


def _launch_array(solution, sizes):
    launch = cuda._check_launch(solution.launch(**sizes), "launch")
    return [*launch.grid, *launch.block, launch.shared_mem]


def test_the_child_hands_back_each_reference_as_bytes_and_its_launch():
    cells = ["from labops.exercises.cuda import SOLUTIONS, kernel_submission\n"
             "big = kernel_submission('//' + 'x' * 70000, lambda n: (1, 32))\n"
             "too_wide = kernel_submission('y[0] = x[0];', lambda n: (1, 2048))\n"
             "not_a_kernel = lambda x, gy: x\n"]
    steps = [CodeStep("cell 1", cells[0])]
    steps += [KernelStep(exercise_id, f"SOLUTIONS[{exercise_id!r}]", benchmark_sizes(exercise_id))
              for exercise_id in IDS]
    gelu_sizes = benchmark_sizes("cuda_gelu")
    steps += [KernelStep("cuda_gelu", name, gelu_sizes) for name in ("big", "too_wide", "not_a_kernel", "missing")]
    outcomes, notes = run_steps(steps)
    assert notes == {}
    for s, exercise_id in enumerate(IDS, start=1):
        outcome, solution, sizes = outcomes[(s, 0, 0)], cuda.SOLUTIONS[exercise_id], benchmark_sizes(exercise_id)
        assert outcome.raised is None, outcome.raised
        data, launch = outcome.got
        assert data.dtype == np.uint8 and data.tobytes() == solution.body.encode("utf-8")
        assert launch.dtype == np.int64 and launch.tolist() == _launch_array(solution, sizes)
        body, checked = kernel_from_child(exercise_id, outcome, sizes)
        assert body == solution.body
        assert checked == cuda._check_launch(solution.launch(**sizes), "launch")
    big, too_wide, not_a_kernel, missing = (outcomes[(s, 0, 0)].raised for s in range(len(IDS) + 1, len(steps)))
    assert f"at most {LARGEST_KERNEL_BODY}" in big.text
    assert "LaunchConfigError" in too_wide.type_names and "at most 1024" in too_wide.text
    assert "must be a kernel_submission(body, launch), got function" in not_a_kernel.text
    assert "name 'missing' is not defined" in missing.text


@pytest.mark.parametrize("body", [
    INCLUDE, '  #  include <cstdio>\n', '#/* a comment */include "x"\n', '%:include "x"\n', '??=include "x"\n',
    '#\\\ninclude "x"\n', '#inc\\\nlude "x"\n', '#include_next "x"\n', '#embed "/etc/hostname"\n',
    '#import "x"\n', '#if __has_include("/etc/shadow")\n#endif\n', '#\\u0069nclude "x"\n',
    # a raw string that hides the directive from a scanner that reads "/*" inside strings as a comment
    'auto s = R"ab(" /* )ab";\n#/**/include "x"\n// */\n',
])
def test_a_body_that_makes_the_preprocessor_read_a_file_is_refused(body):
    assert preprocessor_file_read(body) is not None
    got = (np.frombuffer((body + "y[0] = x[0];").encode(), dtype=np.uint8).copy(),
           np.array([1, 1, 1, 32, 1, 1, 0], dtype=np.int64))
    with pytest.raises(RefusedKernel, match="uses the preprocessor to read a file"):
        kernel_from_child("cuda_gelu", Outcome(got=got), {"n": 32})


def test_ordinary_bodies_are_not_refused_and_the_scan_is_linear():
    for body in [*(cuda.SOLUTIONS[i].body for i in IDS), "#pragma unroll\nfor (int k = 0; k < 4; ++k) {}\n"
                 "// include the last tile\nconst int include_count = 0;\n", "#define TILE 16\n"]:
        assert preprocessor_file_read(body) is None, body
    start = time.monotonic()
    assert preprocessor_file_read("#/*" * 20000) is None and preprocessor_file_read("# /**/" * 10000) is None
    assert time.monotonic() - start < 2


def test_the_parent_checks_what_the_child_hands_back():
    def got(body=b"y[0] = x[0];", launch=(1, 1, 1, 32, 1, 1, 0), dtype=np.uint8):
        return Outcome(got=(np.frombuffer(body, dtype=np.uint8).astype(dtype), np.array(launch, dtype=np.int64)))

    sizes = benchmark_sizes("cuda_softmax")
    for outcome, words in [
        (got(launch=(1, 1, 1, 2048, 1, 1, 0)), "at most 1024"),
        (got(launch=(1, 1, 1, 48, 1, 1, 0)), "multiple of 32"),  # the softmax's own rule: whole warps
        (got(launch=(1, 1, 1, 32, 1, 1, 1 << 20)), "shared_mem must be an int of bytes"),
        (got(body=b"\xff\xfe"), "not UTF-8"),
        (got(dtype=np.float64), "not a kernel's body and launch"),
        (Outcome(got=(1, 2)), "not a kernel's body and launch"),
    ]:
        with pytest.raises(RefusedKernel, match=words):
            kernel_from_child("cuda_softmax", outcome, sizes)


# ---- board, on a fake class, with a fake timer ----

GELU = cuda.SOLUTIONS["cuda_gelu"].body
SETUP = "from labops.exercises import check, kernel_submission\n"


def _gelu(body):
    return f"gelu = kernel_submission({body!r}, lambda n: ((n + 255) // 256, 256))\n"


RIGHT = _gelu(GELU)


def _notebook(path, *student_cells, check_cell='check("cuda_gelu", gelu).score'):
    cells = [nbformat.v4.new_code_cell(SETUP)]
    for source in student_cells:
        cells.append(nbformat.v4.new_code_cell(source, metadata={"nbgrader": {"solution": True, "grade": False}}))
    cells.append(nbformat.v4.new_code_cell(check_cell, metadata={"nbgrader": {
        "grade": True, "solution": False, "grade_id": "check_cuda_gelu", "points": 4}}))
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))


def _course(tmp_path, students: dict):
    for student, cells in students.items():
        _notebook(tmp_path / "course" / "submitted" / student / "ex09" / "ex09.ipynb", *cells)
    return tmp_path / "course"


class CpuCompiler:
    """A fake timer: builds the kernel with rtc on the CPU (a real compile, a tiny launch) and scores it 50 %."""

    def __init__(self):
        self.calls = []

    def __call__(self, exercise_id, body, launch):
        self.calls.append((exercise_id, body, launch))
        problem = cuda.PROBLEMS[exercise_id]
        kernel = rtc.kernel(problem.kernel_name, list(problem.inputs), list(problem.outputs), body)
        x = torch.randn(8)
        kernel(x, x.clone(), torch.empty(8), torch.empty(8), grid=1, block=8)
        return KernelScore("ok", 50.0, 1.5)


def test_board_writes_a_row_per_kernel(tmp_path, capsys):
    course = _course(tmp_path, {"alice": [RIGHT], "bob": [_gelu(GELU.replace("const float v = x[i];", "not C++"))],
                                "carla": ["gelu = lambda x, gy: x\n"], "dan": [_gelu(INCLUDE + GELU)],
                                "erin": ["raise NotImplementedError()\n"]})
    timer = CpuCompiler()
    out = tmp_path / "speed.csv"
    rows = board(course, "ex09", out, timer=timer)
    assert [call[0] for call in timer.calls] == ["cuda_gelu", "cuda_gelu"]  # alice, bob: dan's is refused first
    assert timer.calls[0][1] == GELU and timer.calls[0][2] == cuda._check_launch(
        ((2**26 + 255) // 256, 256), "launch")
    written = speed.read_leaderboard(out)
    assert [(r["student_id"], r["percent_of_roof"], r["time_over_native"], r["verdict"]) for r in written] == [
        ("alice", 50.0, 1.5, "ok"), ("bob", None, None, "error"), ("carla", None, None, "error"),
        ("dan", None, None, "error"), ("erin", None, None, "error")]
    reasons = {r["student_id"]: r["reason"] for r in rows}
    assert reasons["bob"].startswith("CompileError") and "failed to compile" in reasons["bob"]
    assert "must be a kernel_submission(body, launch), got function" in reasons["carla"]
    assert "uses the preprocessor to read a file (#include)" in reasons["dan"]
    assert "name 'gelu' is not defined" in reasons["erin"]
    printed = capsys.readouterr().out
    assert "alice" in printed and "50.0" in printed and f"wrote {out}" in printed


TAMPER = textwrap.dedent("""
    import json, os
    import labops.exercises.cuda as cuda_module
    import labops.exercises.speed as speed_module
    import labops.exercises.speed_board as board_module
    from labops.exercises.speed import Timing
    # the child's own checks and timing, patched
    cuda_module._check_launch = lambda config, where: cuda_module.Launch((1, 1, 1), (2048, 1, 1), 0)
    speed_module.time_submission = lambda *args, **kwargs: Timing(1e-9, 1e-9, 100, True)
    board_module.time_kernel = lambda *args, **kwargs: board_module.KernelScore("ok", 1000.0, 0.001)
    # files: a mark in the grader's folder, and forged results beside the child's own
    try:
        open(MARK, "w").write("tampered")
    except OSError:
        pass
    for s in range(8):
        try:
            open(os.path.join("..", "out", f"s{s}_k0_c0.json"), "w").write(json.dumps({"str": "forged"}))
        except OSError:
            pass
""")


def test_what_the_learner_does_in_the_child_changes_nothing_here(tmp_path):
    mark = tmp_path / "mark"
    original = (speed.time_submission, cuda._check_launch)
    course = _course(tmp_path, {"honest": [RIGHT], "tamper": [RIGHT, f"MARK = {str(mark)!r}\n" + TAMPER]})
    timer = CpuCompiler()
    rows = board(course, "ex09", tmp_path / "speed.csv", timer=timer, show=False)
    assert (speed.time_submission, cuda._check_launch) == original
    # the child's launch check said block 2048; the parent checked again and refused it
    honest, tamper = rows
    assert honest["verdict"] == "ok" and tamper["verdict"] == "error"
    assert "block.x = 2048, but CUDA allows at most 1024" in tamper["reason"]
    assert len(timer.calls) == 1
    if bwrap_path() is not None:
        assert not mark.exists()  # the child's file system is read-only, its /tmp its own


def test_a_student_to_skip_and_a_lost_cuda_context(tmp_path):
    from labops.exercises.speed_board import CudaContextLost

    course = _course(tmp_path, {"a": [RIGHT], "b": [RIGHT], "c": [RIGHT]})

    def breaks_on_b(exercise_id, body, launch):
        if not hasattr(breaks_on_b, "seen"):
            breaks_on_b.seen = True
            raise CudaContextLost("an illegal memory access was encountered")
        raise AssertionError("nothing is timed after the context is lost")

    rows = board(course, "ex09", tmp_path / "speed.csv", timer=breaks_on_b, skip=("a",), show=False)
    assert [(r["student_id"], r["verdict"]) for r in rows] == [("a", "error"), ("b", "error"), ("c", "error")]
    assert rows[0]["reason"] == "skipped (--skip)"
    assert "illegal memory access" in rows[1]["reason"]
    assert "b's cuda_gelu kernel broke this process's CUDA context" in rows[2]["reason"]
    assert "--skip b" in rows[2]["reason"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this is the message on a machine without CUDA")
def test_without_cuda_timing_says_so(tmp_path):
    from labops.__main__ import main

    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        time_kernel("cuda_gelu", GELU, ((2**26 + 255) // 256, 256))
    (tmp_path / "submitted").mkdir()
    assert main(["speed-board", "--course", str(tmp_path), "--assignment", "ex09"]) == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times a kernel on a CUDA GPU")
def test_the_reference_gelu_is_timed_near_the_memory_roof():
    solution = cuda.SOLUTIONS["cuda_gelu"]
    score = time_kernel("cuda_gelu", solution.body, solution.launch(**benchmark_sizes("cuda_gelu")))
    assert score.verdict == "ok", score.reason
    assert 20 <= score.percent_of_roof <= 120
    assert score.time_over_native > 0
