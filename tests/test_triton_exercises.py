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


@pytest.mark.parametrize("kernel, what", [(_gelu_through_a_module, "helpers.gelu"),
                                          (_gelu_with_a_helper_that_cheats, "helpers.gelu")])
def test_a_python_function_reached_through_a_module_is_refused(kernel, what):
    result = check("triton_gelu", triton_submission(kernel, triton_corpus.gelu_launch), show=False)
    assert result.score == 0
    assert f"TritonIRError: the kernel is not Triton: it uses _{what}" in " ".join(result.messages[1].split())
    assert triton_kernels.NOT_TRITON in result.messages[1].replace("\n        ", " ")


def test_a_jit_helper_of_the_learner_is_triton():
    result = check("triton_gelu", triton_submission(_gelu_with_a_helper, triton_corpus.gelu_launch), show=False)
    assert result.passed, result.messages
