"""Checks for the classroom exercises, with feedback that names the mistake.

    from labops.exercises import check
    result = check("tanh_backward", my_tanh_backward)

``check`` runs the exercise's checks on random inputs and edge cases, prints
one line per check (which failed, where, expected vs got, the rel_error, and
the classic mistake it recognises) and returns a ``CheckResult`` with
``passed``, ``score``, ``max_score`` and ``messages``. The exercise notebooks
(``notebooks/exercises``) end each graded cell with ``check(...).score``, for
the learner's own feedback. The points nbgrader records do not come from it:
``grading.TrustedScores`` runs the learner's cells again in a bounded child
process (``sandbox``) and computes each score in nbgrader's own process.

Nothing here builds the compiled labops library: the oracles are native
PyTorch in float64, finite differences, NumPy ports and ``labops.rtc``'s recorded launches.
"""

from __future__ import annotations

import os

from ._core import CheckResult, Exercise, run_checks, wrap_lines
from . import compiled as _compiled, convolution as _convolution, cuda as _cuda, kernel as _kernel, layers as _layers
from . import planted_bugs as _planted_bugs, training as _training, triton_kernels as _triton_kernels
from .cuda import kernel_submission
from .triton_kernels import triton_submission

__all__ = ["CheckResult", "EXERCISES", "check", "describe", "kernel_submission", "triton_submission"]

EXERCISES: dict[str, Exercise] = {
    ex.id: ex for ex in (*_layers.EXERCISES, *_convolution.EXERCISES, *_kernel.EXERCISES, *_compiled.EXERCISES,
                         *_cuda.EXERCISES, *_triton_kernels.EXERCISES, *_training.EXERCISES,
                         *_planted_bugs.EXERCISES)
}


def describe(exercise_id: str | None = None) -> str:
    """The signature of one exercise, or a line per exercise.

    Args:
        exercise_id: a ``check`` id (see ``EXERCISES``), or None for the list of all.

    Returns:
        str.

    Example:
        >>> print(describe("tanh_backward"))  # doctest: +ELLIPSIS
        tanh_backward: ...
    """
    if exercise_id is not None:
        ex = _get(exercise_id)
        return f"{ex.id}: {ex.title}\n    {ex.signature}"
    return "\n".join(f"{ex.id:28s} {ex.title}" for ex in EXERCISES.values())


def _get(exercise_id: str) -> Exercise:
    if exercise_id not in EXERCISES:
        raise ValueError(f"check: exercise_id must be one of {sorted(EXERCISES)}, got {exercise_id!r}")
    return EXERCISES[exercise_id]


def check(exercise_id: str, fn, hidden: bool = False, show: bool = True) -> CheckResult:
    """Check ``fn`` against exercise ``exercise_id``; print the feedback (``show``) and return the result.

    The checks run here, in your notebook, for your feedback. A grade never comes from this function:
    your instructor's grader runs your cells again in a separate process, on cases drawn from a secret
    (``hidden``: those run only there), and computes the points itself.

    Args:
        exercise_id: which exercise (``describe()`` lists them).
        fn: your function, with the signature ``describe(exercise_id)`` shows.
        hidden: the grader's extra cases; without the instructor's secret only the released cases run.
        show: print the feedback.

    Returns:
        a :class:`CheckResult`.

    Example:
        >>> result = check("tanh_backward", lambda output, grad_output: grad_output * (1 - output**2), show=False)
        >>> result.passed, result.score
        (True, 3.0)
    """
    ex = _get(exercise_id)
    if ex.takes == "body" and not isinstance(fn, str):
        raise TypeError(f"check: {exercise_id} takes your kernel's body, a str of CUDA C statements, got "
                        f"{type(fn).__name__}")
    if ex.takes == "function" and not callable(fn):
        raise TypeError(f"check: fn must be your function, got {type(fn).__name__}")
    notes = []
    if hidden:
        notes.append("(the hidden cases are drawn from your instructor's secret: they run only when your "
                     "notebook is graded; these are the released cases)")
    if ex is _compiled.PRELU_CHECKS and os.environ.get("LABOPS_GRADING_KERNEL"):
        # Under autograde the grader builds and checks the op itself; building it here too would cost one to five minutes.
        result = CheckResult(ex.id, False, float("nan"), 0.0, [f"{ex.id}: built and checked by the grader"])
    elif ex is _compiled.PRELU_CHECKS:
        result = _compiled.check_in_subprocess(fn, False)
    else:
        result = run_checks(ex, fn, False)
    result.messages += notes
    if show:
        print(wrap_lines(result.messages), flush=True)
        if result.figure is not None:
            _display(result.figure)
    return result


def _display(figure) -> None:
    """Show a figure in a running notebook as a PNG (works with any matplotlib backend)."""
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        return
    if get_ipython() is None or not hasattr(get_ipython(), "kernel"):
        return
    import io

    buf = io.BytesIO()
    figure.savefig(buf, format="png", dpi=90)
    display(Image(data=buf.getvalue(), format="png"))
