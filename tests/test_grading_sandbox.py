"""The grader's child process: plain data back, no expected answer inside, every failure contained.

These run ``labops.exercises.sandbox.run_steps`` directly (the nbgrader flow is in
test_exercise_grading.py): each test hands it a learner's cells and one exercise's cases, then scores
the outcomes in this process with ``evaluate``, as the grader does.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from labops.exercises import EXERCISES, check
from labops.exercises._core import Case, Opaque, compare, evaluate, seeds_from, to_plain
from labops.exercises.sandbox import CodeStep, GradeStep, Limits, bwrap_path, run_steps

RIGHT_TANH = "def tanh_backward(output, grad_output):\n    return grad_output * (1 - output * output)\n"


def _grade(cells, exercise="tanh_backward", fn="tanh_backward", limits=None, checks=None):
    """Score each ``check`` the cells end with: [CheckResult per exercise step], {cell: note}."""
    ex = EXERCISES[exercise]
    checks = checks or ex.make_checks(True)
    steps = []
    for cell in cells:
        steps.append(GradeStep(exercise, fn, [c.cases for c in checks]) if cell is None else CodeStep("cell", cell))
    outcomes, notes = run_steps(steps, limits)
    results = [evaluate(ex, checks, lambda k, j, case, s=s: outcomes[(s, k, j)], True)
               for s, step in enumerate(steps) if isinstance(step, GradeStep)]
    return results, notes


def test_a_tensor_subclass_is_reduced_to_its_numbers():
    class Yes(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("isclose", "eq", "__eq__", "allclose", "equal"):
                return torch.ones(args[0].shape, dtype=torch.bool)
            return super().__torch_function__(func, types, args, kwargs or {})

    fake = torch.zeros(3, 4).as_subclass(Yes)
    plain = to_plain(fake)
    assert type(plain) is torch.Tensor and plain.dtype == torch.float64
    expected = torch.randn(3, 4, dtype=torch.float64)
    assert "12 of 12 values wrong" in compare(plain, expected)
    assert isinstance(to_plain(object()), Opaque) and "not an array of numbers" in compare(to_plain(object()), expected)


def test_the_child_holds_no_expected_answer():
    # It looks for one everywhere it can: every object in its memory, every frame above it.
    snoop = RIGHT_TANH.replace("def tanh_backward", "def right") + textwrap.dedent("""
        import gc, inspect, torch
        def tanh_backward(output, grad_output):
            for obj in gc.get_objects():
                try:
                    found = obj.expected if type(obj).__name__ == "Case" else None
                except Exception:
                    continue
                if found is not None:
                    return found
            frame = inspect.currentframe().f_back
            while frame is not None:
                for value in frame.f_locals.values():
                    if type(value).__name__ == "Case" and value.expected is not None:
                        return value.expected
                frame = frame.f_back
            return torch.zeros_like(output)
    """)
    (result,), _ = _grade([snoop, None])
    assert result.score == 0 and "values wrong" in "\n".join(result.messages)


def test_a_crash_costs_only_its_own_exercise():
    segfault = "import ctypes\ndef tanh_backward(output, grad_output):\n    ctypes.string_at(0)\n"
    exits = "import os\ndef tanh_backward(output, grad_output):\n    os._exit(7)\n"
    results, _ = _grade([RIGHT_TANH, None, segfault, None, RIGHT_TANH, None, exits, None, RIGHT_TANH, None])
    assert [r.score for r in results] == [3, 0, 3, 0, 3]
    assert "segmentation fault" in results[1].messages[1]
    assert "exit status 7" in results[3].messages[1]
    assert all("was not run" in m for m in results[1].messages[2:4])


def test_a_hang_the_child_cannot_interrupt_is_stopped_by_the_parent():
    # SIGALRM blocked: the child's own limit cannot fire, the parent's does (case limit + slack).
    blocked = RIGHT_TANH + textwrap.dedent("""
        import signal
        _right = tanh_backward
        def tanh_backward(output, grad_output):
            if output.shape == (3, 5):
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
                while True:
                    pass
            return _right(output, grad_output)
    """)
    checks = EXERCISES["tanh_backward"].make_checks(False)
    for c in checks:
        for case in c.cases:
            case.time_limit_s = 2.0
    start = time.monotonic()
    (hung, after), _ = _grade([blocked, None, RIGHT_TANH, None], checks=checks)
    assert time.monotonic() - start < 40
    assert "did not finish within 12 s" in hung.messages[1], hung.messages
    assert hung.score == 0 and after.score == 3  # a fresh child grades the next exercise


def test_a_cell_that_hangs_or_raises_is_a_note_and_the_rest_is_graded():
    (result,), notes = _grade(["while True:\n    pass\n", "1 / 0\n", RIGHT_TANH, None],
                              limits=Limits(cell_time_limit_s=2.0))
    assert result.score == 3
    assert "did not finish within 2 s" in notes[0] and "ZeroDivisionError" in notes[1]


def test_memory_is_limited():
    hog = "import numpy as np\ndef tanh_backward(output, grad_output):\n    return np.ones(1 << 31)\n"
    (result,), _ = _grade([hog, None], limits=Limits(memory_bytes=2 << 30))
    assert result.score == 0 and "MemoryError" in result.messages[1], result.messages


@pytest.mark.skipif(bwrap_path() is None, reason="needs bubblewrap")
def test_the_sandbox_hides_the_course_and_the_secret_and_writes_nothing(tmp_path):
    course, secret = tmp_path / "course", tmp_path / "instructor"
    course.mkdir()
    secret.mkdir()
    (secret / "grader_secret").write_text("s3cret")
    (course / "gradebook.db").write_text("grades")
    probe = RIGHT_TANH.replace("def tanh_backward", "def right") + textwrap.dedent(f"""
        import os, torch
        SEEN = os.path.exists({str(secret / "grader_secret")!r}) or os.path.exists({str(course / "gradebook.db")!r})
        open({str(course / "gradebook.db")!r}, "w").write("99 points")  # lands in a throw-away tmpfs
        try:
            open(os.path.join(os.path.dirname(torch.__file__), "written"), "w").write("x")
            WROTE = True
        except OSError:  # read-only
            WROTE = False
        def tanh_backward(output, grad_output):
            if SEEN or WROTE:
                return torch.zeros_like(output)
            return right(output, grad_output)
    """)
    (result,), _ = _grade([probe, None], limits=Limits(sandbox="bwrap", hidden_paths=[str(course), str(secret)]))
    assert result.score == 3, result.messages
    assert (course / "gradebook.db").read_text() == "grades"
    assert not os.path.exists(os.path.join(os.path.dirname(torch.__file__), "written"))


def test_hidden_cases_are_drawn_from_the_secret():
    ex = EXERCISES["tanh_backward"]
    released = ex.make_checks(True)[0].cases[0].args[0]
    with seeds_from("one secret"):
        one = ex.make_checks(True)[0].cases[0].args[0]
    with seeds_from("another"):
        other = ex.make_checks(True)[0].cases[0].args[0]
    assert one.shape == released.shape == other.shape
    assert not torch.equal(one, released) and not torch.equal(one, other)
    assert torch.equal(ex.make_checks(True)[0].cases[0].args[0], released)  # the salt is gone after the block


def test_hidden_without_the_secret_runs_the_released_cases(capsys):
    result = check("tanh_backward", lambda y, g: g * (1 - y * y), hidden=True)
    out = capsys.readouterr().out
    assert result.passed and "they run only when your notebook is graded" in " ".join(out.split())


def test_ctrl_c_stops_a_check_at_once():
    script = textwrap.dedent("""
        import sys
        from labops.exercises import check
        def tanh_backward(output, grad_output):
            while True:
                pass
        print("checking", flush=True)
        check("tanh_backward", tanh_backward)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "checking"
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    assert time.monotonic() - sent < 3, "Ctrl-C did not stop the check promptly"
    assert "KeyboardInterrupt" in err and proc.returncode != 0


def test_an_endless_figure_is_never_drawn_by_running_the_kernel_again(monkeypatch):
    # The thread map comes from the writes the first case recorded: the kernel runs once per case.
    from labops import rtc

    launches = []
    launch = rtc.Kernel.__call__
    monkeypatch.setattr(rtc.Kernel, "__call__", lambda self, *a, **k: launches.append(1) or launch(self, *a, **k))
    body = """
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < y_numel;
         i += (long long)blockDim.x * gridDim.x)
      y[i] = alpha[0] * x[i];
    """
    result = check("grid_stride_loop", body, show=False)
    cases = sum(len(chk.cases) for chk in EXERCISES["grid_stride_loop"].make_checks(False))
    assert result.passed and result.figure is not None and len(launches) == cases


def test_the_grading_child_does_not_inherit_the_secret(monkeypatch):
    monkeypatch.setenv("LABOPS_GRADER_SECRET", "s3cret")
    probe = RIGHT_TANH.replace("def tanh_backward", "def right") + textwrap.dedent("""
        import os, torch
        def tanh_backward(output, grad_output):
            if "LABOPS_GRADER_SECRET" in os.environ:
                return torch.zeros_like(output)
            return right(output, grad_output)
    """)
    (result,), _ = _grade([probe, None])
    assert result.score == 3
    assert os.environ["LABOPS_GRADER_SECRET"] == "s3cret"
