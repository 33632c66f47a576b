"""The machinery behind ``labops.exercises.check``: run cases, compare, name the mistake.

An exercise is a list of *checks*, each worth points; a check is a list of
*cases* (inputs and the expected answer from an independent oracle). A check
passes when every case matches. When a case does not, the feedback says where
(the first wrong index), expected vs got with the ``rel_error``, and then tries
the exercise's *mistakes*: each is a classic wrong answer computed from the same
inputs (the result with the sign flipped, the weight gradient transposed, ...)
or a property of the wrong result (NaN at large logits). The first mistake that
the learner's answer matches is named in one sentence.
"""

from __future__ import annotations

import contextlib
import copy
import linecache
import os
import signal
import sys
import tempfile
import threading
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from labops.testing import rel_error

# How long one call of the learner's function may take before we call it an endless loop.
TIME_LIMIT_S = 20.0
# Feedback lines are wrapped at this width: nbgrader's feedback page shows them in a fixed-width box.
FEEDBACK_WIDTH = 100


@dataclass
class CheckResult:
    """What ``check`` found: ``passed`` (every check), ``score`` out of ``max_score``, ``messages``.

    Example:
        >>> from labops.exercises import check
        >>> check("tanh_backward", lambda y, g: g * (1 - y), show=False)  # doctest: +ELLIPSIS
        CheckResult('tanh_backward': 0/3 points, passed=False)
    """

    exercise: str
    passed: bool
    score: float
    max_score: float
    messages: list[str]
    figure: Any = None  # a matplotlib Figure, for exercises that draw their feedback

    def __repr__(self):
        return f"CheckResult({self.exercise!r}: {self.score:g}/{self.max_score:g} points, passed={self.passed})"


@dataclass
class Case:
    """One input to the learner's function and the answer the oracle gives."""

    label: str
    args: tuple
    expected: Any
    names: tuple[str, ...] = ("result",)  # what each returned value is called in feedback
    time_limit_s: float = TIME_LIMIT_S  # longer for a case that runs torch's own test machinery


@dataclass
class Check:
    """A named property worth ``points``: it holds when every case matches."""

    name: str
    cases: list[Case]
    points: float = 1.0


@dataclass
class Mistake:
    """A classic error and the sentence that names it.

    Recognised when the learner's answer matches ``wrong(*case.args)``, when
    ``test(case, got)`` is true, or when the call raised ``raises``.
    """

    sentence: str
    wrong: Callable | None = None
    test: Callable | None = None
    raises: type | None = None


@dataclass
class Exercise:
    """An exercise: its id, the signature the learner implements, its checks and its mistakes."""

    id: str
    title: str
    signature: str
    make_checks: Callable[[bool], list[Check]]  # hidden -> checks (hidden adds cases, never points)
    mistakes: list[Mistake] = field(default_factory=list)
    call: Callable | None = None  # (fn, case) -> what to compare; default fn(*copies of args)
    rtol: float = 1e-7
    atol: float = 1e-9
    # (case, got) -> Figure, for exercises with a picture: drawn from the first case's answer, never by
    # running the learner's code again.
    draw: Callable | None = None
    # Trailing values of what ``run`` returns that are kept for ``draw`` and not compared.
    extras: int = 0
    # fn -> what ``run`` calls (the compiled-op exercise builds the learner's C++ here), and its time limit.
    prepare: Callable | None = None
    prepare_time_limit_s: float = TIME_LIMIT_S
    # What the learner hands in: "function" (a callable), or "body" (a str of CUDA C statements)
    takes: str = "function"
    # (case, got) -> what is compared with case.expected, computed where the verdict is made (for the grader,
    # the process that never ran the learner's code): an exercise whose answer is judged by running labops's
    # own code on it (the learner's test inputs, given to planted ops) does that here.
    judge: Callable | None = None

    def run(self, fn, case: Case):
        args = copy_args(case.args)
        if self.call is not None:
            return self.call(fn, args)
        return fn(*args)


class _TimeLimit(BaseException):
    """Raised inside the learner's code when it runs too long (BaseException: `except Exception` won't hide it)."""


def copy_args(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else copy.deepcopy(a) for a in args)


# Added to every seed while the grader builds its cases (see ``seeds_from``); 0 for the released cases.
_seed_salt = 0


@contextlib.contextmanager
def seeds_from(secret: str):
    """Draw every case built inside the block from ``secret`` (the instructor's), not the released seeds.

    The grader's cases then have the released shapes and edge cases but values no learner has seen;
    without the secret they cannot be rebuilt.
    """
    global _seed_salt
    import hashlib

    previous = _seed_salt
    _seed_salt = int.from_bytes(hashlib.sha256(secret.encode()).digest()[:6], "little")
    try:
        yield
    finally:
        _seed_salt = previous


def generator(seed: int) -> torch.Generator:
    """The generator of every case's random values: ``seed``, moved by the grader's secret while it builds."""
    return torch.Generator().manual_seed(seed + _seed_salt)


def randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    """Seeded float64 normal values, the same on every machine."""
    return torch.randn(*shape, generator=generator(seed), dtype=torch.float64) * scale


# ---- what the learner's code hands back: plain values only ----

@dataclass(frozen=True)
class Opaque:
    """Something returned that is not a number or an array of numbers: kept as its type and repr only."""

    type_name: str
    text: str

    def __repr__(self):
        return f"{self.text} ({self.type_name})"


@dataclass(frozen=True)
class Raised:
    """The learner's code raised: the exception's class names (its MRO) and one line describing it."""

    type_names: tuple[str, ...]
    text: str


def to_plain(value, depth: int = 0):
    """``value`` as plain data: None, bool, int, float, str, a float64 tensor of the plain Tensor class,
    a tuple of these, or an ``Opaque``.

    This is all a comparison ever sees: a Tensor subclass that overrides ``==`` or ``isclose``, a NumPy
    subclass, or any object of the learner's making is reduced to its numbers (or to its repr).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    try:
        if isinstance(value, torch.Tensor):
            with torch._C.DisableTorchFunction():
                data = torch.Tensor.detach(value).to("cpu").to(torch.float64).numpy()
            return torch.from_numpy(np.array(data, dtype=np.float64, copy=True))
        if isinstance(value, np.ndarray):
            return torch.from_numpy(np.array(np.asarray(value), dtype=np.float64, copy=True))
    except Exception as exc:
        return Opaque(type(value).__name__, f"an array that is not real numbers ({exc})"[:200])
    if isinstance(value, (tuple, list, torch.Size)) and depth < 4 and len(value) <= 64:
        return tuple(to_plain(v, depth + 1) for v in value)
    try:
        text = repr(value)[:200]
    except Exception:
        text = "?"
    return Opaque(type(value).__name__, text)


@dataclass
class Outcome:
    """What one case of the learner's code produced: plain values, or what it raised."""

    got: Any = None
    raised: Raised | None = None


# ---- comparing an answer with the oracle ----

def _as_tensor(value):
    if isinstance(value, Opaque):
        raise TypeError(f"{value!r} is not a number")
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.float64)
    return torch.as_tensor(np.asarray(value, dtype=np.float64))


def _index_str(index) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def compare(got, expected, name: str = "result", rtol: float = 1e-7, atol: float = 1e-9) -> str | None:
    """None when ``got`` matches ``expected``; otherwise one line saying where and how it differs."""
    if isinstance(expected, tuple):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"expected {len(expected)} results, got {_describe(got)}"
        names = name if isinstance(name, tuple) else tuple(f"{name}[{i}]" for i in range(len(expected)))
        for g, e, n in zip(got, expected, names):
            problem = compare(g, e, n, rtol, atol)
            if problem:
                return problem
        return None
    if isinstance(expected, (int, np.integer)) and not isinstance(expected, bool):
        if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
            return f"{name} is {got!r} ({type(got).__name__}), expected the int {expected}"
        return None if int(got) == int(expected) else f"{name} is {got}, expected {expected}"
    if got is None:
        return f"{name} is None: the function returned nothing (a missing `return`?)"
    if isinstance(got, Opaque):
        return f"{name} is {got!r}, which is not an array of numbers"
    try:
        g = _as_tensor(got)
    except (TypeError, ValueError) as exc:
        return f"{name} is {_describe(got)}, which is not an array of numbers ({exc})"
    e = _as_tensor(expected)
    if tuple(g.shape) != tuple(e.shape):
        return f"{name} has shape {tuple(g.shape)}, expected {tuple(e.shape)}"
    bad = ~torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    if not bool(bad.any()):
        return None
    first = tuple(np.argwhere(bad.numpy())[0]) if bad.dim() else ()
    gv, ev = float(g[first]), float(e[first])
    where = f"{name}{_index_str(first)}" if first else name
    head = f"{where} = {gv:.6g}, expected {ev:.6g}; {int(bad.sum())} of {bad.numel()} values wrong"
    nonfinite = int((~torch.isfinite(g) & torch.isfinite(e)).sum())
    if nonfinite:
        return head + f" ({nonfinite} of them inf or NaN)"
    if torch.equal(e, e.round()) and torch.equal(g, g.round()):
        return head  # counts, not measurements: a rel_error would say nothing
    return head + f", rel_error {rel_error(g, e):.1e} (a correct float64 answer: 1e-12 or less)"


def _describe(value) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"an array of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return repr(value)


def matches(got, wrong, rtol=1e-7, atol=1e-9) -> bool:
    try:
        return compare(got, wrong, "x", rtol, atol) is None
    except Exception:  # a candidate that cannot be compared is simply not the mistake
        return False


# ---- running the learner's code safely ----

@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the block after ``seconds`` (main thread, POSIX only; elsewhere no limit)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise _TimeLimit(seconds)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def quiet_stderr(notes: list[str]):
    """Keep everything off stderr while checking, and turn what was written there into notes.

    nbgrader gives 0 points to a graded cell that writes to stderr, so a
    warning (or a compiler's chatter at the file-descriptor level) inside a
    check must not reach it.
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved_fd = None
    with tempfile.TemporaryFile() as sink:
        try:
            saved_fd = os.dup(2)
            os.dup2(sink.fileno(), 2)
        except OSError:
            saved_fd = None
        python_stderr, sys.stderr = sys.stderr, sys.stdout
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield
            finally:
                sys.stderr = python_stderr
                if saved_fd is not None:
                    os.dup2(saved_fd, 2)
                    os.close(saved_fd)
                sink.seek(0)
                written = sink.read().decode(errors="replace").strip()
                for w in caught:
                    notes.append(f"note: a warning was raised: {w.category.__name__}: {w.message}")
                if written:
                    notes.append("note: the code wrote to stderr: " + written[-500:])


_LIBRARY_DIRS = tuple(str(Path(m.__file__).resolve().parent) for m in (torch, np)) + (
    str(Path(__file__).resolve().parent.parent),)


def describe_exception(exc: BaseException) -> str:
    """One line: the error and the line of the learner's own code it came from."""
    if isinstance(exc, NotImplementedError):
        return "is not written yet: replace `raise NotImplementedError()` with your code"
    if isinstance(exc, _TimeLimit):
        seconds = exc.args[0] if exc.args else TIME_LIMIT_S
        return (f"did not finish within {seconds:g} s: an endless loop? "
                "(check that the loop variable moves towards its end condition)")
    where = ""
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        filename = str(Path(frame.f_code.co_filename).resolve()) if not frame.f_code.co_filename.startswith("<") \
            else frame.f_code.co_filename
        if not filename.startswith(_LIBRARY_DIRS) and "site-packages" not in filename:
            line = linecache.getline(frame.f_code.co_filename, lineno).strip()
            where = f" in {frame.f_code.co_name}, line {lineno}" + (f": `{line}`" if line else "")
    return f"raised {type(exc).__name__}: {exc}{where}"


def diagnose(exercise: Exercise, case: Case, got=None, raised: Raised | None = None) -> str | None:
    """The sentence of the first mistake the answer (or what it raised) matches."""
    for m in exercise.mistakes:
        if raised is not None:
            if m.raises is not None and m.raises.__name__ in raised.type_names:
                return m.sentence
            continue
        try:
            if m.test is not None and m.test(case, got):
                return m.sentence
            if m.wrong is not None and matches(got, m.wrong(*copy_args(case.args)),
                                               exercise.rtol, exercise.atol):
                return m.sentence
        except Exception:
            continue
    return None


def raised(exc: BaseException) -> Raised:
    """What the learner's code raised, as plain data."""
    return Raised(tuple(k.__name__ for k in type(exc).__mro__), describe_exception(exc))


def cases_after_a_hang(outcome: Outcome) -> Outcome | None:
    """What the rest of an exercise's cases get once one case ran out of time: no second wait."""
    if outcome.raised is not None and "_TimeLimit" in outcome.raised.type_names:
        return Outcome(raised=Raised(("_TimeLimit",), "was not run: an earlier case did not finish in time"))
    return None


def run_case(exercise: Exercise, fn, case: Case) -> Outcome:
    """Call the learner's code on one case under the time limit; plain values or what it raised.

    KeyboardInterrupt is not caught: Ctrl-C stops a check like any other cell.
    """
    try:
        with time_limit(case.time_limit_s):
            got = exercise.run(fn, case)
        return Outcome(got=to_plain(got))
    except (Exception, _TimeLimit) as exc:
        return Outcome(raised=raised(exc))


def prepare(exercise: Exercise, fn):
    """``exercise.prepare(fn)`` under its time limit: (what the cases call, None) or (None, Raised)."""
    if exercise.prepare is None:
        return fn, None
    try:
        with time_limit(exercise.prepare_time_limit_s):
            return exercise.prepare(fn), None
    except (Exception, _TimeLimit) as exc:
        return None, raised(exc)


def evaluate(exercise: Exercise, checks: list[Check], outcome: Callable[[int, int, Case], Outcome],
             hidden: bool = False) -> CheckResult:
    """Score ``checks`` from each case's outcome; ``outcome(check index, case index, case)`` runs or looks it up.

    The one place a verdict is made, for ``check`` in a learner's notebook (outcomes computed in that
    process) and for the grader (outcomes read back from a bounded child process).
    """
    max_score = float(sum(c.points for c in checks))
    score, lines, notes = 0.0, [], []
    first_answer = None  # (case, got) of the very first case, for the figure
    for k, chk in enumerate(checks):
        problem = None
        with quiet_stderr(notes):
            for j, case in enumerate(chk.cases):
                result = outcome(k, j, case)
                if result.raised is not None:
                    problem = f"{case.label}: your function {result.raised.text}"
                    sentence = diagnose(exercise, case, raised=result.raised)
                    if sentence:
                        problem += "\n    -> " + sentence
                    break
                got = result.got
                if exercise.judge is not None:
                    got = exercise.judge(case, got)
                if first_answer is None:
                    first_answer = (case, got)
                if exercise.extras and isinstance(got, tuple):
                    got = got[:len(got) - exercise.extras]
                mismatch = compare(got, case.expected, case.names if len(case.names) > 1 else case.names[0],
                                   exercise.rtol, exercise.atol)
                if mismatch:
                    problem = f"{case.label}: {mismatch}"
                    sentence = diagnose(exercise, case, got)
                    if sentence:
                        problem += "\n    -> " + sentence
                    break
        if problem is None:
            score += chk.points
            lines.append(f"PASS {chk.name}")
        else:
            lines.append(f"FAIL {chk.name} -- {problem}")
        if problem and "is not written yet" in problem:
            # The remaining checks would say the same thing.
            for rest in checks[k + 1:]:
                lines.append(f"FAIL {rest.name} -- not written yet")
            break
    passed = score == max_score
    head = (f"{exercise.id}: {score:g}/{max_score:g} points"
            + (" (with the grader's hidden cases)" if hidden else "")
            + (" -- all checks pass." if passed else ""))
    result = CheckResult(exercise.id, passed, score, max_score, [head] + lines + notes)
    if exercise.draw is not None and first_answer is not None:
        with quiet_stderr([]):
            result.figure = exercise.draw(*first_answer)
    return result


def run_checks(exercise: Exercise, fn, hidden: bool = False) -> CheckResult:
    """Run every check of ``exercise`` on ``fn`` in this process; nothing printed (``check`` prints)."""
    checks = exercise.make_checks(hidden)
    target, failed = prepare(exercise, fn)
    stop = [Outcome(raised=failed) if failed is not None else None]

    def outcome(k, j, case):
        if stop[0] is not None:
            return stop[0]
        result = run_case(exercise, target, case)
        stop[0] = cases_after_a_hang(result)
        return result

    return evaluate(exercise, checks, outcome, hidden)


def wrap_lines(messages: list[str], width: int = FEEDBACK_WIDTH) -> str:
    """Feedback as text with every line wrapped at ``width``, continuation lines indented under their start."""
    import textwrap

    out = []
    for message in messages:
        for line in message.split("\n"):
            indent = " " * (len(line) - len(line.lstrip()) + 4)
            out.extend(textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=True,
                                     break_on_hyphens=False) or [""])
    return "\n".join(out)
