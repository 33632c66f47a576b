"""The Triton kernel exercises (labops.exercises.triton_kernels) and their planted mistakes (triton_corpus).

Every reference passes; every planted mistake fails and the feedback names it; the cheats a Triton exercise
must refuse are refused; and the grader's sandboxed child runs Triton's interpreter. The kernels run on the
CPU through Triton's interpreter (small shapes: the whole file takes seconds).
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from labops.exercises import EXERCISES, check, triton_kernels, triton_submission  # noqa: E402
from labops.exercises import cuda_corpus, triton_corpus  # noqa: E402
from labops.exercises._core import evaluate, seeds_from  # noqa: E402
from labops.exercises.sandbox import CodeStep, GradeStep, Limits, bwrap_path, run_steps  # noqa: E402

IDS = [ex.id for ex in triton_kernels.EXERCISES]


def test_the_exercises_are_registered():
    assert IDS == ["triton_gelu", "triton_softmax", "triton_matmul"] and set(IDS) <= set(EXERCISES)
    assert set(triton_corpus.SOLUTIONS) == set(IDS) == set(triton_kernels.MISTAKES) == set(triton_kernels.PROBLEMS)
    for exercise_id in IDS:
        sentences = [m.sentence for m in triton_kernels.MISTAKES[exercise_id].values()]
        assert len(set(sentences)) == len(sentences) >= 6


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("exercise_id", IDS)
def test_the_reference_passes(exercise_id, hidden):
    result = check(exercise_id, triton_corpus.SOLUTIONS[exercise_id], hidden=hidden, show=False)
    assert result.passed, "\n".join(result.messages)


def test_grade_corpus_names_every_planted_mistake_of_an_exercise():
    rows = triton_corpus.grade_corpus(exercises=["triton_softmax"])
    assert [r.named for r in rows] == [r.planted for r in rows] and rows[0].passed and not any(r.passed for r in rows[1:])


def test_every_recognised_mistake_is_planted():
    planted = {(v.exercise, v.planted) for v in triton_corpus.CORPUS if v.planted}
    common = set(triton_kernels._common_mistakes())  # the machinery's, the same in every exercise
    for exercise_id in IDS:
        for key in triton_kernels.MISTAKES[exercise_id]:
            if key == "wild":  # a safety net: planted in test_a_wild_access_is_stopped_before_it_touches_memory
                continue
            where = [(e, key) for e in IDS] if key in common else [(exercise_id, key)]
            assert any(w in planted for w in where), (exercise_id, key)


@pytest.mark.parametrize("variant", [v for v in triton_corpus.CORPUS if v.planted], ids=lambda v: v.id)
def test_a_planted_mistake_fails_and_its_sentence_is_what_the_learner_sees(variant, capsys):
    result = check(variant.exercise, variant.submission())
    out = " ".join(capsys.readouterr().out.split())
    assert not result.passed
    named = cuda_corpus.named_mistake(variant.exercise, result.messages, triton_kernels.mistake_key)
    assert named == variant.planted, "\n".join(result.messages)
    assert " ".join(variant.sentence.split()) in out


@triton.jit
def _wild_gelu(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs * 100000, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)  # a stride of 100000


def test_a_wild_access_is_stopped_before_it_touches_memory():
    result = check("triton_gelu", triton_submission(_wild_gelu, triton_corpus.gelu_launch), show=False)
    assert "WildAccessError" in result.messages[1] and triton_kernels.WILD in result.messages[1]


# ---- the cheats: the result must be computed by the learner's Triton kernel ----

def test_a_python_function_is_not_a_kernel():
    def gelu(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK):  # writes y with torch: no Triton at all
        raise AssertionError("never called")

    with pytest.raises(triton_kernels.NotATritonKernelError, match="@triton.jit"):
        triton_submission(gelu, triton_corpus.gelu_launch)
    result = check("triton_gelu", lambda x, gy: (torch.nn.functional.gelu(x), gy), show=False)
    assert result.score == 0 and "pass triton_submission(kernel, launch)" in result.messages[1]


def test_a_launch_that_writes_the_answer_itself_is_overwritten_by_the_grader():
    # launch() only returns numbers: the grader allocates the outputs after it returns and fills them with NaN.
    def launch(n):
        torch.nn.functional.gelu(torch.zeros(n))  # whatever it computes goes nowhere
        return (1,), {"BLOCK": 16}

    result = check("triton_gelu", triton_submission(triton_corpus.gelu_kernel, launch), show=False)
    assert not result.passed


def test_a_kernel_calling_torch_is_not_triton():
    variant = next(v for v in triton_corpus.CORPUS if v.id == "triton_gelu/calls_torch")
    result = check("triton_gelu", variant.submission(), show=False)
    assert result.score == 0 and all("TritonIRError" in m for m in result.messages[1:])


def test_a_kernel_swapped_after_the_submission_was_made_is_refused():
    sub = triton_submission(triton_corpus.gelu_kernel, triton_corpus.gelu_launch)
    sub.kernel = lambda *args: None  # after triton_submission checked it
    result = check("triton_gelu", sub, show=False)
    assert result.score == 0 and "NotATritonKernelError" in result.messages[1]


# ---- the grader's child ----

@pytest.mark.skipif(bwrap_path() is None, reason="the sandbox needs bubblewrap")
def test_the_sandboxed_child_runs_triton_interpreted_and_hands_back_arrays():
    import inspect

    cell = ("import triton\nimport triton.language as tl\nfrom labops.exercises import triton_submission\n"
            + inspect.getsource(triton_corpus.softmax_kernel.fn) + inspect.getsource(triton_corpus.softmax_launch)
            + "\nsub = triton_submission(softmax_kernel, softmax_launch)\n")
    exercise = EXERCISES["triton_softmax"]
    with seeds_from("a secret"):
        cases = [c.cases for c in exercise.make_checks(True)]
    outcomes, notes = run_steps([CodeStep("cell 1", cell), GradeStep("triton_softmax", "sub", cases)],
                                Limits(sandbox="bwrap"))
    assert notes == {}
    with seeds_from("a secret"):
        result = evaluate(exercise, exercise.make_checks(True), lambda k, j, case: outcomes[(1, k, j)], hidden=True)
    assert result.passed, result.messages


# A module of the learner's whose function computes GELU in NumPy when the interpreter hands it the data (at
# compile time it gets IR values and hands them back): Triton's own IR check lets a module's function through.
def _numpy_gelu(x):
    import math

    import numpy as np

    handle = x.handle
    if type(handle).__name__ == "TensorHandle":  # interpreted: the data is there
        v = handle.data.astype(np.float64)
        handle.data = (v * 0.5 * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))).astype(np.float32)
    return x


_helpers = type(torch)("helpers")
_helpers.gelu = _numpy_gelu


@triton.jit
def _gelu_through_a_module(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, _helpers.gelu(x), mask=mask)
    tl.store(gx_ptr + offs, x, mask=mask)


@triton.jit
def _phi(x):
    return 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def _gelu_with_a_helper(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    gy = tl.load(gy_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * _phi(x), mask=mask)
    tl.store(gx_ptr + offs, gy * (_phi(x) + x * 0.3989422804014327 * tl.exp(-0.5 * x * x)), mask=mask)


@triton.jit
def _helper_through_a_module(x):
    return _helpers.gelu(x)


@triton.jit
def _gelu_with_a_helper_that_cheats(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, _helper_through_a_module(x), mask=mask)
    tl.store(gx_ptr + offs, x, mask=mask)


@pytest.mark.parametrize("kernel", [_gelu_through_a_module, _gelu_with_a_helper_that_cheats])
def test_a_python_function_reached_through_a_module_is_refused(kernel):
    result = check("triton_gelu", triton_submission(kernel, triton_corpus.gelu_launch), show=False)
    assert result.score == 0
    assert "TritonIRError: the kernel is not Triton: it uses the global name _helpers" in " ".join(
        result.messages[1].split())
    assert triton_kernels.NOT_TRITON in result.messages[1].replace("\n        ", " ")


def test_a_jit_helper_of_the_learner_is_triton():
    result = check("triton_gelu", triton_submission(_gelu_with_a_helper, triton_corpus.gelu_launch), show=False)
    assert result.passed, result.messages


# ---- the grader: the learner's cells hand back the kernel's source, a fresh child runs it ----

def _notebook(cells):
    """Notebook cells as grading.grade_cells reads them: (source, exercise id or None for a learner's cell)."""
    out = []
    for source, exercise in cells:
        meta = {"nbgrader": {"grade": True, "solution": False, "points": 1.0}} if exercise else {}
        out.append({"cell_type": "code", "source": source, "metadata": meta})
    return out


_SETUP = "import torch\nimport triton\nimport triton.language as tl\nfrom labops.exercises import check, triton_submission\n"


def _grade(cells):
    from labops.exercises.grading import grade_cells

    results, _ = grade_cells(_notebook(cells), "a secret of this test", Limits(cell_time_limit_s=30.0))
    return [results[i] for i in sorted(results)]


def test_the_grader_gives_each_planted_kernel_the_verdict_check_gives():
    import inspect

    variants = [v for v in triton_corpus.CORPUS if v.kernel is not triton_corpus.SOLUTIONS[v.exercise].kernel
                and v.launch is triton_corpus.SOLUTIONS[v.exercise].launch]
    launches = "".join(inspect.getsource(triton_corpus.SOLUTIONS[e].launch) for e in IDS)
    cells = [(_SETUP + launches, None)]
    for n, v in enumerate(variants):
        name = v.kernel.fn.__name__
        cells.append((inspect.getsource(v.kernel.fn) + f"\nsub_{n} = triton_submission({name}, "
                      f"{triton_corpus.SOLUTIONS[v.exercise].launch.__name__})\n", None))
        cells.append((f'check("{v.exercise}", sub_{n}).score', v.exercise))
    for v, result in zip(variants, _grade(cells)):
        named = cuda_corpus.named_mistake(v.exercise, result.messages, triton_kernels.mistake_key)
        assert (result.passed, named) == (v.planted is None, v.planted), (v.id, result.messages)


_PATCHES_LABOPS = """
import torch, torch.nn.functional as F
import labops.exercises.triton_kernels as _tk

def _run(self, submission, args):  # the oracle, computed by torch, for whichever exercise
    if len(args) == 2 and args[0].dim() == 1:
        x, gy = args
        return F.gelu(x), torch.ops.aten.gelu_backward(gy, x)
    return torch.softmax(args[0], 1) if args[1].dtype != torch.float64 or args[0].shape[1] != args[1].shape[0] \\
        else args[0] @ args[1]
_tk.TritonProblem.run = _run

@triton.jit
def gelu_kernel(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    pass  # stores nothing

gelu = triton_submission(gelu_kernel, lambda n: ((triton.cdiv(n, 256),), {"BLOCK": 256}))
"""


def test_a_notebook_that_patches_labops_gets_only_what_its_kernel_stores():
    # Where the learner's cells ran, the patch works: graded there, the stub kernel would take every point.
    exercise = EXERCISES["triton_gelu"]
    cases = [c.cases for c in exercise.make_checks(False)]
    outcomes, _ = run_steps([CodeStep("cell 1", _SETUP + _PATCHES_LABOPS), GradeStep("triton_gelu", "gelu", cases)],
                            Limits())
    assert evaluate(exercise, exercise.make_checks(False), lambda k, j, case: outcomes[(1, k, j)]).passed
    # The grader runs the kernel in a child where no cell of the learner's ran: it stores nothing, and scores 0.
    [result] = _grade([(_SETUP + _PATCHES_LABOPS, None), ('check("triton_gelu", gelu).score', "triton_gelu")])
    assert result.score == 0 and "(301 of them inf or NaN)" in result.messages[-1], result.messages


def test_a_source_that_is_not_only_kernels_is_refused():
    import numpy as np

    sizes = [{"n": 5}]
    rows, errors = np.zeros((1, 4), dtype=np.int64), ("",)
    for source in ("import os\n@triton.jit\ndef k(x, BLOCK: tl.constexpr):\n    pass\n",
                   "@triton.jit\ndef k(x, BLOCK: __import__('os').getpid()):\n    pass\n",
                   "@print\n@triton.jit\ndef k(x):\n    pass\n", "@triton.jit\ndef k(x=print()):\n    pass\n"):
        got = (np.frombuffer(source.encode(), dtype=np.uint8).copy(), rows, errors)
        with pytest.raises(triton_kernels.TritonIRError):
            triton_kernels.harness("triton_gelu", got, sizes)


# ---- the speed board: a student's Triton kernel rebuilt from its source alone, timed by a fake timer ----

def test_the_board_rebuilds_each_students_kernel_from_its_source_alone(tmp_path):
    import inspect

    nbformat = pytest.importorskip("nbformat")
    from labops.exercises.speed_board import KernelScore, board

    kernel = inspect.getsource(triton_corpus.gelu_kernel.fn) + inspect.getsource(triton_corpus.gelu_launch)
    students = {
        "alice": kernel + "gelu = triton_submission(gelu_kernel, gelu_launch)\n",
        "mallory": _PATCHES_LABOPS,  # a stub kernel, and labops patched where it ran
        "moduler": "_helpers = type(torch)('helpers')\n" + inspect.getsource(_gelu_through_a_module.fn)
                   + "gelu = triton_submission(_gelu_through_a_module, lambda n: ((triton.cdiv(n, 256),), {'BLOCK': 256}))\n",
        "erin": "raise NotImplementedError()\n",
    }
    for student, source in students.items():
        cells = [nbformat.v4.new_code_cell(_SETUP), nbformat.v4.new_code_cell(source),
                 nbformat.v4.new_code_cell('check("triton_gelu", gelu).score', metadata={"nbgrader": {
                     "grade": True, "solution": False, "grade_id": "check_triton_gelu", "points": 4}})]
        path = tmp_path / "course" / "submitted" / student / "ex12" / "ex12.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))
    launches = []

    def timer(exercise_id, submission, launch):  # what the GPU would time: here, the kernel checked on the CPU
        launches.append(submission.launch(n=2**26))  # recorded at the benchmark size only
        result = check(exercise_id, triton_submission(submission.kernel, triton_corpus.gelu_launch), show=False)
        return KernelScore("ok", 50.0, 1.5) if result.passed else KernelScore("wrong", reason=result.messages[1])

    rows = {r["student_id"]: r for r in board(tmp_path / "course", "ex12", tmp_path / "speed.csv", timer=timer,
                                                show=False)}
    assert (rows["alice"]["verdict"], rows["alice"]["percent_of_roof"]) == ("ok", 50.0)
    assert rows["mallory"]["verdict"] == "wrong"  # its stub kernel, rebuilt here, stores nothing
    # rebuilt from its source alone, its kernel names a module that is not there
    assert rows["moduler"]["verdict"] == "error" and "it uses the name _helpers, which is not defined" in rows[
        "moduler"]["reason"]
    assert rows["erin"]["verdict"] == "error" and "name 'gelu' is not defined" in rows["erin"]["reason"]
    assert launches == [((2**16, 1, 1), {"BLOCK": 1024}), ((2**18, 1, 1), {"BLOCK": 256})]  # alice's, mallory's
