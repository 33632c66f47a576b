"""Checks for the classroom exercises, with feedback that names the mistake.

    from labops.exercises import check
    result = check("tanh_backward", my_tanh_backward)

``check`` runs the exercise's checks on random inputs and edge cases, prints
one line per check (which failed, where, expected vs got, the rel_error, and
the classic mistake it recognises) and returns a ``CheckResult`` with
``passed``, ``score``, ``max_score`` and ``messages``. The exercise notebooks
(``notebooks/exercises``) end each graded cell with ``check(...).score``:
nbgrader reads that number as the cell's points and shows the printed
feedback beside it.

Nothing here builds the compiled labops library: the oracles are native
PyTorch in float64, finite differences, NumPy ports and ``labops.simt``.
"""

from __future__ import annotations

from ._core import CheckResult, Exercise, quiet_stderr, run_checks
from . import compiled as _compiled, convolution as _convolution, kernel as _kernel, layers as _layers

__all__ = ["CheckResult", "EXERCISES", "check", "describe"]

EXERCISES: dict[str, Exercise] = {
    ex.id: ex for ex in (*_layers.EXERCISES, *_convolution.EXERCISES, *_kernel.EXERCISES, *_compiled.EXERCISES)
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

    hidden: run the grader's extra cases too (more seeds and sizes, same points).

    Args:
        exercise_id: which exercise (``describe()`` lists them).
        fn: your function, with the signature ``describe(exercise_id)`` shows.
        hidden: also run the grader's extra cases.
        show: print the feedback.

    Returns:
        a :class:`CheckResult` (``score`` is what nbgrader records).

    Example:
        >>> result = check("tanh_backward", lambda output, grad_output: grad_output * (1 - output**2), show=False)
        >>> result.passed, result.score
        (True, 3.0)
    """
    ex = _get(exercise_id)
    if not callable(fn):
        raise TypeError(f"check: fn must be your function, got {type(fn).__name__}")
    if ex is _compiled.PRELU_CHECKS:
        result = _compiled.check_in_subprocess(fn, hidden)
    else:
        result = run_checks(ex, fn, hidden)
    written = not any("is not written yet" in m for m in result.messages)
    if ex.draw is not None and written:  # a map of an empty kernel would say nothing
        notes: list[str] = []
        with quiet_stderr(notes):
            result.figure = ex.draw(fn, hidden)
    if show:
        print("\n".join(result.messages), flush=True)
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
