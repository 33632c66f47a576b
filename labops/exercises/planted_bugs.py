"""The exercise of notebook 09: test inputs that catch planted bugs.

A test is only as good as the inputs it tries. The learner writes ``gelu_test_inputs() -> list of tensors``:
the inputs a test of a GELU op should give it. Each check plants one bug in an otherwise exact GELU (a
formula right only at 0, the tanh approximation, the last element of an odd-sized tensor forgotten, an
overflow past |x| = 20, the result returned flattened) and passes when at least one of the learner's
inputs exposes it: the planted op's output differs from the exact GELU, in float64, in shape or by more
than a relative 1e-10.

The learner's code only hands back the tensors (the sandboxed child returns plain arrays). The planted
ops run in ``judge``, where the verdict is made: for the grader, the process that never ran the
learner's code, so nothing the learner writes can see or touch an op under test.
"""

from __future__ import annotations

import math

import torch

from ._core import Case, Check, Exercise, Mistake

__all__ = ["EXERCISES", "PLANTED", "exact_gelu"]

MAX_TENSORS = 8
MAX_ELEMENTS = 100_000
RTOL, ATOL = 1e-10, 1e-12


def exact_gelu(x: torch.Tensor) -> torch.Tensor:
    """x * Phi(x), Phi the standard normal CDF: the oracle."""
    return 0.5 * x * (1.0 + torch.special.erf(x / math.sqrt(2.0)))


def _right_only_at_zero(x):
    return 0.5 * x  # the slope at 0, taken for the whole curve


def _tanh_form(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _odd_tail_forgotten(x):
    out = exact_gelu(x).reshape(-1)
    if out.numel() % 2:  # two elements a thread, and the odd one left as it was
        out[-1] = 0.0
    return out.reshape(x.shape)


def _overflow(x):
    return torch.where(x.abs() > 20, torch.full_like(x, math.nan), exact_gelu(x))  # an exp(x*x/2) that overflowed


def _flattened(x):
    return exact_gelu(x).reshape(-1)


# name -> (the planted op, what the check is called, the sentence when the learner's inputs miss it)
PLANTED = {
    "right only at 0": (
        _right_only_at_zero, "an op right only at x = 0 (it returns x / 2)",
        "Every one of your inputs is 0 (or you returned none): x / 2 equals GELU there. Never test on zeros: "
        "random values expose a wrong formula at once."),
    "tanh approximation": (
        _tanh_form, "the tanh approximation passed off as the exact GELU",
        "Your inputs never reach the range where the tanh form and the exact GELU differ (about 1e-4 to 5e-4 "
        "for |x| between 1 and 3): include ordinary values such as torch.randn's, and compare in float64 "
        "with a tight tolerance."),
    "odd tail forgotten": (
        _odd_tail_forgotten, "a kernel that forgets the last element of an odd-sized tensor",
        "Every one of your tensors has an even number of elements (or a last element of 0): a kernel that "
        "handles two elements at a time and forgets the odd one passes them. Use odd sizes, such as (3, 5)."),
    "overflow past |x| = 20": (
        _overflow, "an op whose intermediate overflows for |x| > 20 (it returns NaN there)",
        "None of your inputs is large (|x| > 20): an op whose exp(x * x / 2) overflows passes them. Test the "
        "ends of the range too, not only torch.randn's values."),
    "result flattened": (
        _flattened, "an op that returns its result flattened to 1-D",
        "All your tensors are 1-D: an op that returns its result flattened passes them. Give it a 2-D or "
        "4-D input as well."),
}


def _inputs(got) -> list[torch.Tensor] | None:
    """The learner's tensors, or None when they break the rules of the signature."""
    tensors = list(got) if isinstance(got, (tuple, list)) else [got]
    if not 1 <= len(tensors) <= MAX_TENSORS or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    if sum(t.numel() for t in tensors) > MAX_ELEMENTS or not all(bool(torch.isfinite(t).all()) for t in tensors):
        return None
    return tensors


def _exposes(planted, x: torch.Tensor) -> bool:
    want, got = exact_gelu(x), planted(x.clone())
    return got.shape != want.shape or not torch.allclose(got, want, rtol=RTOL, atol=ATOL)


def judge(case: Case, got) -> float:
    """1.0 when one of the learner's inputs exposes the case's planted bug, 0.0 when none does, -1.0 when the
    inputs are not usable (run where the verdict is made, on the tensors the learner's code handed back)."""
    tensors = _inputs(got)
    if tensors is None:
        return -1.0
    planted = PLANTED[case.label][0]
    return 1.0 if any(_exposes(planted, x) for x in tensors) else 0.0


def _call(fn, args):
    return fn()


def _checks(hidden):
    # The same planted ops in hidden mode: the inputs are the learner's, there is nothing else to vary.
    return [Check(f"catches {description}", [Case(name, (), 1.0, ("planted bug caught (1), missed (0)",))])
            for name, (_, description, _) in PLANTED.items()]


def _missed(name):
    return lambda case, got: case.label == name and got == 0.0


GELU_TEST_INPUTS = Exercise(
    "gelu_test_inputs", "Test inputs that catch planted bugs in a GELU op",
    f"fn() -> list of 1 to {MAX_TENSORS} float64 tensors ({MAX_ELEMENTS:,} elements in all at most); each is "
    f"given to an op under test and its output compared with the exact GELU, x * Phi(x), in float64",
    _checks,
    call=_call,
    judge=judge,
    mistakes=[Mistake(f"Your inputs cannot be used: return a list of 1 to {MAX_TENSORS} tensors of finite numbers, "
                      f"{MAX_ELEMENTS:,} elements in all at most (a good test picks its inputs).",
                      test=lambda case, got: got == -1.0)]
    + [Mistake(sentence, test=_missed(name)) for name, (_, _, sentence) in PLANTED.items()],
)

EXERCISES = [GELU_TEST_INPUTS]
