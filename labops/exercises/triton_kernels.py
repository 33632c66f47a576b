"""Triton kernel exercises: the learner writes a ``@triton.jit`` kernel, the grader launches it.

A submission is ``triton_submission(kernel, launch)``: ``kernel`` is the learner's ``@triton.jit`` function
and ``launch(**sizes)`` returns ``(grid, meta)``: the grid (an int or a tuple of 1 to 3 ints, how many
programs) and a dict of the kernel's ``tl.constexpr`` arguments (``{"BLOCK": 1024}``)::

    from labops.exercises import check, triton_submission
    check("triton_gelu", triton_submission(gelu_kernel, lambda n: (triton.cdiv(n, 1024), {"BLOCK": 1024})))

The grader, never the learner's Python, allocates the tensors and launches ``kernel[grid](*tensors,
*sizes, **meta)``: the answer is what the kernel stored. Before the launch every output is filled with
NaN (an element no program stored shows as NaN), and every tensor sits inside a larger buffer whose
guard zones, on both sides, hold a sentinel: a store outside a tensor changes a guard
(``OutOfBoundsWriteError``, ``OffByOneWriteError`` when it is exactly the element after the end), a load
outside one reads the sentinel (a huge value). The same buffers are used on a GPU, so a kernel gets the
same verdict there.

Where the kernels run: on the CPU (the default) through Triton's interpreter (``triton.runtime.
interpreter``, NumPy on the tensors' memory), whatever ``TRITON_INTERPRET`` said when the kernel was
decorated; ``LABOPS_EXERCISE_DEVICE=cuda`` compiles the same function for the GPU. On the CPU a load or
store that reaches past the guard zones is stopped before it touches memory (``WildAccessError``).

What is allowed, and enforced: the answer is what the learner's Triton kernel stores. The kernel must be a
``@triton.jit`` function (a JITFunction or the interpreter's InterpretedFunction, else
``NotATritonKernelError``); everything its source names from outside itself must be triton.language, another
``@triton.jit`` function of the learner's (checked the same way), a number or one of a few builtins
(``check_source``); and it must compile to Triton IR for an sm_80 target (``check_triton_ir``, the
compiler's front end, no GPU needed). Either failing is a ``TritonIRError``. So a kernel cannot hand its
data to torch, NumPy or a Python function of the learner's (Triton's compiler alone would call such a
function at compile time, and the interpreter on the data). ``launch`` returns numbers only: the grader
allocates the outputs after it returns.

In ``check`` the learner's cells run in the process that launches the kernel, so they could patch labops
there; the grader does not trust that process: ``grading.grade_cells`` has the learner's child hand back
only the kernel's source and launches (``kernel_arrays``), keeps only ``@triton.jit`` definitions
(``harness``) and runs the cases in a fresh child where none of the learner's cells ran.

Triton is imported when a kernel is first run: ``import labops.exercises`` works without it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import math
import numbers
import textwrap
from dataclasses import dataclass
from typing import Callable

import torch

from . import cuda
from ._core import Check, Exercise, Mistake, randn
from .cuda import RTOL, ATOL, EmptyGridError, LaunchConfigError, exercise_device

__all__ = ["EXERCISES", "EXERCISES_BY_ID", "MISTAKES", "NotATritonKernelError", "OffByOneWriteError",
           "OutOfBoundsWriteError", "TritonIRError", "TritonSubmission", "WildAccessError", "triton_submission"]

# What a guard zone of an input holds (a load past a tensor reads it) and of an output (a store there changes
# it): huge, so that a product with it shows, and not what any kernel of these exercises would store.
INPUT_GUARD = {torch.float32: -1.0e30, torch.float16: -6.0e4}
OUTPUT_GUARD = 3.0e38
GUARD_ELEMENTS = 1 << 16  # on each side of every tensor: past any block's overrun the launch rules allow


class NotATritonKernelError(TypeError):
    """The submission's kernel is not a ``@triton.jit`` function."""


class TritonIRError(ValueError):
    """The kernel does not compile to Triton IR (it calls something that is not Triton, say)."""


class OutOfBoundsWriteError(IndexError):
    """The kernel stored outside a tensor (a guard zone changed)."""


class OffByOneWriteError(OutOfBoundsWriteError):
    """The only store outside a tensor was to the element right after its end (``offs <= n``)."""


class WildAccessError(IndexError):
    """On the CPU: a load or store beyond the guard zones, stopped before it touched memory."""


def _triton():
    """triton, imported on first use, with what the interpreter needs imported before it patches anything."""
    try:
        import triton
        import triton.language  # noqa: F401
        from triton.runtime import interpreter  # noqa: F401
    except ImportError:
        raise ImportError("the triton_* exercises need Triton: pip install triton (or labops[triton])") from None
    with contextlib.suppress(ImportError):
        import triton.experimental.gluon  # noqa: F401  (imported lazily by the interpreter, which must not be mid-patch)
    _fix_interpreter_index()
    return triton


@functools.cache
def _fix_interpreter_index():
    """Triton 3.6's interpreter cannot convert a loop bound under NumPy 2.4 (labops/_triton_fix.py); a grading
    child runs only interpreted kernels, so the fix stays for the process."""
    from triton.runtime import interpreter

    from .._triton_fix import with_index_fix

    interpreter._patch_lang_tensor = with_index_fix(interpreter._patch_lang_tensor)


def _is_kernel(kernel) -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return isinstance(kernel, (JITFunction, InterpretedFunction))


class TritonSubmission:
    """A learner's Triton kernel (a ``@triton.jit`` function) and ``launch`` (sizes -> (grid, meta))."""

    __slots__ = ("kernel", "launch")

    def __init__(self, kernel, launch: Callable):
        _triton()
        if not _is_kernel(kernel):
            raise NotATritonKernelError(f"triton_submission: kernel must be a @triton.jit function, got "
                                        f"{type(kernel).__name__}")
        if not callable(launch):
            raise TypeError(f"triton_submission: launch must be a function of the exercise's sizes returning "
                            f"(grid, meta), got {type(launch).__name__}")
        self.kernel, self.launch = kernel, launch

    def __call__(self, exercise_id: str, *inputs):
        return cuda.run_problem(PROBLEMS, self, exercise_id, inputs)

    def __repr__(self):
        return f"triton_submission({self.kernel.fn.__name__}, {getattr(self.launch, '__name__', 'launch')})"


def triton_submission(kernel, launch: Callable) -> TritonSubmission:
    """Your kernel for a ``triton_*`` exercise: the ``@triton.jit`` function and the launch it needs.

    Args:
        kernel: your ``@triton.jit`` function, with the arguments the exercise's signature
            (``describe(exercise_id)``) names, in that order.
        launch: a function of the exercise's sizes (keyword arguments) returning ``(grid, meta)``: the
            number of programs (an int or a tuple of 1 to 3 ints) and a dict giving each ``tl.constexpr``
            argument of the kernel its value.

    Returns:
        a ``TritonSubmission`` to pass to ``check``.
    """
    return TritonSubmission(kernel, launch)


# =========================================================================================================
# The machinery: the launch's rules, the guarded buffers, one launch
# =========================================================================================================

def _constexpr_names(fn) -> list[str]:
    names = []
    for p in inspect.signature(fn).parameters.values():
        ann = p.annotation
        if ann is not inspect.Parameter.empty and ("constexpr" in ann if isinstance(ann, str)
                                                   else getattr(ann, "__name__", "") == "constexpr"):
            names.append(p.name)
    return names


def _check_launch(config, fn, where: str) -> tuple[tuple, dict]:
    """(grid as a 3-tuple, meta) of what launch returned, or a LaunchConfigError naming the rule."""
    if not isinstance(config, tuple) or len(config) != 2 or not isinstance(config[1], dict):
        raise LaunchConfigError(f"{where} returned {config!r}: launch must return (grid, meta), meta a dict of "
                                f"the kernel's tl.constexpr arguments")
    grid, meta = config
    dims = [grid] if isinstance(grid, numbers.Integral) and not isinstance(grid, bool) else grid
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3 or not all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims):
        hint = " (n / BLOCK is a float in Python: triton.cdiv(n, BLOCK) rounds up)" if isinstance(grid, float) \
            or (isinstance(grid, (tuple, list)) and any(isinstance(d, float) for d in grid)) else ""
        raise LaunchConfigError(f"{where}: grid must be an int or a tuple of 1 to 3 ints, got {grid!r}{hint}")
    dims = [int(d) for d in dims] + [1] * (3 - len(dims))
    if any(d < 0 for d in dims) or any(d > limit for d, limit in zip(dims, (2**31 - 1, 65535, 65535))):
        raise LaunchConfigError(f"{where}: grid {grid!r} is outside 1 .. (2**31 - 1, 65535, 65535)")
    if 0 in dims:
        raise EmptyGridError(f"{where}: grid {grid!r} has 0 programs along an axis: n // BLOCK is 0 when n < "
                             f"BLOCK; round up, triton.cdiv(n, BLOCK)")
    wanted = _constexpr_names(fn)
    if sorted(meta) != sorted(wanted):
        raise LaunchConfigError(f"{where}: meta must give each tl.constexpr argument of the kernel a value: "
                                f"{wanted}, got {sorted(meta)}")
    for name, value in meta.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise LaunchConfigError(f"{where}: meta[{name!r}] must be an int, got {value!r}")
    return tuple(dims), {k: int(v) for k, v in meta.items()}


def _power_of_two(value) -> bool:
    return value >= 1 and value & (value - 1) == 0


class _Guarded:
    """A tensor inside a buffer with GUARD_ELEMENTS of ``guard`` on each side; ``view`` is what the kernel gets."""

    def __init__(self, values: torch.Tensor, guard: float, device, fill: float | None = None):
        span = values.numel()
        self.buffer = torch.full((2 * GUARD_ELEMENTS + span,), guard, dtype=values.dtype, device=device)
        self.view = self.buffer[GUARD_ELEMENTS:GUARD_ELEMENTS + span].view(values.shape)
        self.view.copy_(values if fill is None else torch.full_like(values, fill))
        self.guard = guard

    def range(self) -> tuple[int, int]:
        start = self.buffer.data_ptr()
        return start, start + self.buffer.numel() * self.buffer.element_size()

    def written_outside(self) -> tuple[int, list]:
        """(how many guard elements before the start changed, the first two changed after the end: 0 is the
        element right after it)."""
        g = torch.full((GUARD_ELEMENTS,), self.guard, dtype=self.buffer.dtype, device=self.buffer.device)
        head, tail = self.buffer[:GUARD_ELEMENTS], self.buffer[-GUARD_ELEMENTS:]
        bits = torch.int16 if self.buffer.element_size() == 2 else torch.int32
        changed_head = (head.view(bits) != g.view(bits))
        changed_tail = (tail.view(bits) != g.view(bits))
        return int(changed_head.sum()), [int(i) for i in changed_tail.nonzero().flatten()[:2]]


@contextlib.contextmanager
def _interpreted(ranges):
    """Triton's interpreter for one launch: triton.language's own @jit helpers (tl.zeros, tl.max, ...) run
    interpreted too, however triton was imported, and every load and store is checked against ``ranges``
    (the guarded buffers) before it touches memory."""
    import numpy as np
    from triton import language as tl
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    scope = interpreter._LangPatchScope()
    for module in (tl, tl.standard, tl.math):
        for name, member in list(vars(module).items()):
            if isinstance(member, JITFunction):
                scope.set_attr(module, name, _interpreted_helper(member))
    builder = interpreter.interpreter_builder

    def inside(ptrs, mask, what):
        addresses = np.asarray(ptrs.data).reshape(-1)[np.asarray(mask.data, dtype=bool).reshape(-1)]
        ok = np.zeros(addresses.shape, dtype=bool)
        for lo, hi in ranges:
            ok |= (addresses >= lo) & (addresses < hi)
        if not ok.all():
            raise WildAccessError(f"a {what} reached memory far outside every tensor (beyond "
                                  f"{GUARD_ELEMENTS} elements past its ends): an index or a stride is wrong")

    load, store = builder.create_masked_load, builder.create_masked_store

    def checked_load(ptrs, mask, *args):
        inside(ptrs, mask, "load")
        return load(ptrs, mask, *args)

    def checked_store(ptrs, value, mask, *args):
        inside(ptrs, mask, "store")
        return store(ptrs, value, mask, *args)

    scope.set_attr(builder, "create_masked_load", checked_load)
    scope.set_attr(builder, "create_masked_store", checked_store)
    try:
        yield
    finally:
        scope.restore()


_HELPERS: dict = {}


def _learner_helpers(fn) -> list:
    """(globals, name, kernel) of each @triton.jit helper of the learner's that ``fn`` can name, and they in turn
    (each function's globals: a helper defined in a notebook shares the kernel's)."""
    found, seen = [], set()

    def walk(function):
        if function in seen:
            return
        seen.add(function)
        for name, value in list(function.__globals__.items()):
            if _is_kernel(value) and value.fn is not function and value.fn is not fn and _learners(value):
                found.append((function.__globals__, name, value))
                walk(value.fn)

    walk(fn)
    return found


@contextlib.contextmanager
def _helpers_as(fn, make):
    """For the block, each @triton.jit helper of the learner's that ``fn`` names (and they, in turn) replaced in
    its globals by ``make(helper)``: interpreted for the interpreter, a JITFunction for the compiler."""
    changes = []
    for namespace, name, value in _learner_helpers(fn):
        changes.append((namespace, name, value))
        namespace[name] = make(value)
    try:
        yield
    finally:
        for namespace, name, value in reversed(changes):
            namespace[name] = value


def _jit_helper(member):
    from triton.runtime.jit import JITFunction

    if (member.fn, "jit") not in _HELPERS:
        _HELPERS[(member.fn, "jit")] = JITFunction(member.fn)
    return _HELPERS[(member.fn, "jit")]


def _interpreted_helper(member):
    """triton.language's own @jit ``member`` (tl.max, tl.zeros, ...) run by the interpreter. Triton's
    InterpretedFunction, called from a kernel, patches triton.language for the interpreter and never puts it
    back, which breaks every later compile in the process; this one puts back what it patched."""
    from triton.runtime import interpreter

    class Helper(interpreter.InterpretedFunction):
        def __call__(self, *args, **kwargs):
            scope = interpreter._patch_lang(self.fn)
            try:
                return self.rewrite()(*args, **kwargs)
            except Exception as exc:
                raise interpreter.InterpreterError(repr(exc)) from exc
            finally:
                scope.restore()

    if member.fn not in _HELPERS:
        _HELPERS[member.fn] = Helper(member.fn)
    return _HELPERS[member.fn]


@contextlib.contextmanager
def _unpatched_language():
    """triton.language as the compiler needs it, for the block: its own helpers (tl.max, tl.zeros, ...)
    JITFunctions even when triton was imported under TRITON_INTERPRET=1, and what an interpreted run elsewhere
    in this process (a kernel the learner called) left patched put back. A patched builtin is the
    interpreter's lambda, holding the builtin as its default ``member``."""
    from triton import language as tl
    from triton.runtime import interpreter

    scope = interpreter._LangPatchScope()
    for owner in (tl, tl.core, tl.math, tl.standard, tl.core.tensor):
        for name, value in list(vars(owner).items()):
            original = (getattr(value, "__kwdefaults__", None) or {}).get("member")
            if getattr(value, "__name__", "") == "<lambda>" and original is not None and tl.core.is_builtin(original):
                scope.set_attr(owner, name, original)
            elif isinstance(value, interpreter.InterpretedFunction):
                scope.set_attr(owner, name, _jit_helper(value))
    try:
        yield
    finally:
        scope.restore()


_COMPILED: dict = {}


def _device_kernel(kernel, device):
    """The learner's function as this device runs it: interpreted on the CPU, compiled (JITFunction) on CUDA."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    fn = kernel.fn
    key = (fn, device.type)
    if key not in _COMPILED:
        _COMPILED[key] = InterpretedFunction(fn) if device.type == "cpu" else JITFunction(fn)
    return _COMPILED[key]


_PYTHON_BUILTINS = {"range", "min", "max", "len", "int", "float", "bool", "abs", "print"}


def _learners(kernel) -> bool:
    """A @triton.jit function that is not one of triton.language's own (tl.max, tl.zeros, ...)."""
    return not (kernel.fn.__module__ or "").startswith("triton.")


def _allowed(value) -> bool:
    """What a kernel may name from outside itself: triton.language (its modules, functions, dtypes and
    constexpr values), other @triton.jit functions, numbers, and a few of Python's builtins."""
    import builtins

    from triton import language as tl

    if _is_kernel(value) or isinstance(value, (bool, int, float, tl.dtype, tl.constexpr)):
        return True
    if any(value is getattr(builtins, name) for name in _PYTHON_BUILTINS):
        return True
    module = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None) or ""
    return module == "triton" and inspect.ismodule(value) or module.startswith("triton.language")


def check_source(fn, seen=None) -> None:
    """Raise TritonIRError unless every name ``fn``'s source takes from outside itself is ``_allowed`` (and so,
    in turn, for each @triton.jit function it calls), and every method it calls on a value is a method of a
    Triton tensor. Triton's compiler calls a plain Python function it meets at compile time, and the
    interpreter would run it on the data: a module of the learner's whose function computes the answer in
    NumPy would pass the IR check. This check refuses it."""
    import builtins

    from triton import language as tl

    seen = set() if seen is None else seen
    if fn in seen:
        return
    seen.add(fn)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    function = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    local = {a.arg for a in function.args.args} | {
        node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}

    def refuse(what, why="which is not part of triton.language"):
        raise TritonIRError(f"the kernel is not Triton: it uses {what}, {why} (inside a kernel only tl.*, other "
                            f"@triton.jit functions, numbers and {', '.join(sorted(_PYTHON_BUILTINS))} may be named)")

    def resolve(node):
        """The object an expression of names and attributes outside the function stands for, or None (local)."""
        if isinstance(node, ast.Name):
            if node.id in local:
                return None
            if node.id in fn.__globals__:
                value = fn.__globals__[node.id]
                named = {"tl": "triton.language", "triton": "triton"}.get(node.id)
                if not (named and inspect.ismodule(value) and value.__name__ == named) and not (
                        _is_kernel(value) and _learners(value)):
                    refuse(f"the global name {node.id}", "which the grader's process, where the kernel runs alone, "
                           "does not have")
                return value
            if hasattr(builtins, node.id):
                return getattr(builtins, node.id)
            refuse(f"the name {node.id}", "which is not defined")
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                refuse(f"the attribute {node.attr}")
            base = resolve(node.value) if isinstance(node.value, (ast.Name, ast.Attribute)) else None
            if base is None:  # a method or attribute of a value the kernel computed: a Triton tensor's
                if not hasattr(tl.tensor, node.attr) and node.attr not in ("value", "dtype", "shape"):
                    refuse(f"the attribute .{node.attr} of a value")
                return None
            if not inspect.ismodule(base) and not _allowed(base):
                refuse(f"{ast.unparse(node.value)}")
            return getattr(base, node.attr) if hasattr(base, node.attr) else refuse(ast.unparse(node))
        return None

    function.decorator_list = []  # @triton.jit is how the kernel was made, not what it does
    for node in ast.walk(function):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            value = resolve(node)
            if value is not None and not inspect.ismodule(value) and not _allowed(value):
                refuse(ast.unparse(node))
            if value is not None and inspect.ismodule(value) and not _allowed(value):
                parent_is_attribute = any(isinstance(p, ast.Attribute) and p.value is node
                                          for p in ast.walk(function))
                if not parent_is_attribute:
                    refuse(f"the module {ast.unparse(node)}")
            if _is_kernel(value) and value.fn is not fn and _learners(value):
                check_source(value.fn, seen)  # the learner's own @triton.jit helper
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Lambda)):
            refuse(f"`{ast.unparse(node)}`")


def check_triton_ir(kernel, args, meta) -> None:
    """Raise TritonIRError unless ``kernel`` compiles to Triton IR for these arguments (no GPU needed: the
    front end only, for an sm_80 target)."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource, make_backend
    from triton.runtime.jit import JITFunction, mangle_type

    fn = kernel.fn
    jit = _COMPILED.get((fn, "ir")) or JITFunction(fn)
    _COMPILED[(fn, "ir")] = jit
    names = [p for p in inspect.signature(fn).parameters]
    values = dict(zip([n for n in names if n not in meta], args))
    signature = {name: "constexpr" if name in meta else mangle_type(values[name]) for name in names}
    target = GPUTarget("cuda", 80, 32)
    backend = make_backend(target)
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    try:
        with _unpatched_language(), _helpers_as(fn, _jit_helper):
            ASTSource(jit, signature, constexprs=dict(meta)).make_ir(
                target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)
    except Exception as exc:  # CompilationError: what Triton says, with the line
        text = str(exc).strip().splitlines()
        raise TritonIRError("the kernel is not Triton: it does not compile to Triton IR, as it must to run on a "
                            "GPU (" + " | ".join(line.strip() for line in text[-4:] if line.strip())[:400] + ")") \
            from None


@dataclass(frozen=True)
class TritonProblem:
    """How one exercise's case becomes a launch: the case args -> (inputs, output shapes, the scalar arguments
    after the tensors, the sizes ``launch`` is called with); the exercise's own launch rule."""

    setup: Callable
    rule: Callable | None = None  # (grid, meta, sizes) -> None or the rule broken (one sentence)
    output_dtype: torch.dtype = torch.float32

    def launch(self, submission, sizes) -> tuple[tuple, dict]:
        """(grid, meta) of ``submission.launch(**sizes)``, checked by the launch rules and the exercise's own."""
        where = "launch(" + ", ".join(f"{k}={v}" for k, v in sizes.items()) + ")"
        grid, meta = _check_launch(submission.launch(**sizes), submission.kernel.fn, where)
        broken = self.rule(grid, meta, sizes) if self.rule is not None else None
        if broken:
            raise LaunchConfigError(f"{where} returned grid={grid}, meta={meta}: {broken}")
        return grid, meta

    def run(self, submission, args):
        if not isinstance(submission, TritonSubmission):
            raise TypeError(f"this exercise checks a Triton kernel: pass triton_submission(kernel, launch), got "
                            f"{type(submission).__name__}")
        triton = _triton()
        if not _is_kernel(submission.kernel):  # a TritonSubmission whose kernel was swapped after it was made
            raise NotATritonKernelError("the submission's kernel is not a @triton.jit function")
        device = exercise_device()
        inputs, out_shapes, scalars, sizes = self.setup(*args)
        grid, meta = self.launch(submission, sizes)
        ins = [_Guarded(t, INPUT_GUARD[t.dtype], device) for t in inputs]
        outs = [_Guarded(torch.empty(s, dtype=self.output_dtype), OUTPUT_GUARD, device, fill=math.nan)
                for s in out_shapes]
        tensors = [g.view for g in ins + outs]
        check_source(submission.kernel.fn)
        check_triton_ir(submission.kernel, tensors + list(scalars), meta)
        kernel = _device_kernel(submission.kernel, device)
        if device.type == "cpu":
            with _interpreted([g.range() for g in ins + outs]), _helpers_as(submission.kernel.fn, _interpreted_helper):
                try:
                    kernel[grid](*tensors, *scalars, **meta)
                except triton.runtime.errors.InterpreterError as exc:
                    cause = exc.__cause__
                    while isinstance(cause, triton.runtime.errors.InterpreterError):
                        cause = cause.__cause__
                    if isinstance(cause, WildAccessError):
                        raise cause from None
                    raise
        else:
            kernel[grid](*tensors, *scalars, **meta)
            torch.cuda.synchronize()
        names = ["an input"] * len(ins) + ["an output"] * len(outs)
        for g, name in zip(ins + outs, names):
            before, after = g.written_outside()
            if before or after:
                if not before and after == [0]:
                    raise OffByOneWriteError(f"the kernel stored to the element right after the end of {name} "
                                             f"(index n of a tensor of n elements)")
                raise OutOfBoundsWriteError(f"the kernel stored outside {name} ({before} elements before its "
                                            f"start, {'some' if after else 'none'} after its end)")
        results = [g.view.to("cpu", torch.float64) for g in outs]
        return results[0] if len(results) == 1 else tuple(results)


def gpu_runner(exercise_id, args, submission):
    """(make_inputs, run) to time ``submission`` on a GPU (``speed.time_submission``) on the setup of ``args``
    (real or "meta"): make_inputs draws the kernel's inputs afresh on the GPU, run(inputs) allocates the
    outputs and launches the compiled kernel. No guard zones: the checks are ``check``'s, and every timed rep
    is compared with native torch."""
    _triton()
    problem = PROBLEMS[exercise_id]
    inputs, out_shapes, scalars, sizes = problem.setup(*args)
    grid, meta = problem.launch(submission, sizes)
    kernel = _device_kernel(submission.kernel, torch.device("cuda"))
    shapes = [(t.shape, t.dtype) for t in inputs]

    def make_inputs(generator):
        return tuple(torch.randn(shape, generator=generator, device="cuda").to(dtype) for shape, dtype in shapes)

    def run(ins):
        outs = [torch.empty(shape, dtype=problem.output_dtype, device="cuda") for shape in out_shapes]
        kernel[grid](*ins, *outs, *scalars, **meta)
        return tuple(outs)
    return make_inputs, run


# ---- grading in two children: the learner's cells hand back the kernel's source, a fresh child runs it ----
# The grader (grading.grade_cells) runs a notebook's cells in a child, which hands back, for each triton_*
# check, the kernel's source and its launches at every case's sizes (``kernel_arrays``: plain arrays and
# strings). The grader checks that source here (``harness``: only @triton.jit definitions) and a second,
# fresh child, in which none of the learner's cells ran, defines the kernel from it and runs the cases:
# whatever those cells patched (labops included) is not in the process that computes the answers.

LARGEST_SOURCE = 64 << 10  # bytes of UTF-8: a kernel and its helpers (the references are under 2 KiB)


def kernel_arrays(submission, sizes_list) -> tuple:
    """What a ``KernelStep`` of a triton_* exercise hands back (run in the learner's child): (the UTF-8 source
    of the kernel and of every @triton.jit helper of the learner's it can name, kernel first; a row per
    sizes: the grid's 3 ints, then the tl.constexpr values in the kernel's order, or -1s where launch
    raised; the text of what it raised, "" where it did not, as a tuple of str)."""
    import numpy as np

    if not isinstance(submission, TritonSubmission) or not _is_kernel(submission.kernel):
        raise TypeError(f"this exercise checks a Triton kernel: pass triton_submission(kernel, launch), got "
                        f"{type(submission).__name__}")
    fn = submission.kernel.fn
    functions = [fn] + [kernel.fn for _, _, kernel in _learner_helpers(fn)]
    text = "\n\n".join(dict.fromkeys(textwrap.dedent(inspect.getsource(f)) for f in functions))
    names = _constexpr_names(fn)
    rows, errors = [], []
    for sizes in sizes_list:
        where = "launch(" + ", ".join(f"{k}={v}" for k, v in sizes.items()) + ")"
        try:
            grid, meta = _check_launch(submission.launch(**sizes), fn, where)
            rows.append([*grid, *(meta[n] for n in names)])
            errors.append("")
        except Exception as exc:  # the check's own error for this case, as run in the learner's process
            rows.append([-1] * (3 + len(names)))
            errors.append(f"{type(exc).__name__}: {exc}"[:1000])
    source = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()
    return source, np.array(rows, dtype=np.int64).reshape(len(rows), 3 + len(names)), tuple(errors)


def _annotation_ok(node) -> bool:
    return node is None or ast.unparse(node) in ("tl.constexpr", "triton.language.constexpr", "'tl.constexpr'")


def harness(exercise_id, got, sizes_list) -> str:
    """The cell a fresh child runs for a triton_* check, from what ``kernel_arrays`` handed back (``got``): the
    imports, the kernel's source -- refused (TritonIRError) unless it is nothing but @triton.jit function
    definitions without defaults, whose only annotations are tl.constexpr -- and ``_submission``, the kernel
    with a launch that returns the recorded launches (``recorded_submission``)."""
    import numpy as np

    if exercise_id not in PROBLEMS:
        raise ValueError(f"exercise_id must be one of {sorted(PROBLEMS)}, got {exercise_id!r}")
    if not (isinstance(got, tuple) and len(got) == 3 and isinstance(got[0], np.ndarray) and got[0].dtype == np.uint8
            and got[0].ndim == 1 and isinstance(got[1], np.ndarray) and got[1].dtype == np.int64
            and got[1].ndim == 2 and got[1].shape[0] == len(sizes_list) and isinstance(got[2], tuple)
            and len(got[2]) == len(sizes_list) and all(isinstance(e, str) for e in got[2])):
        raise TritonIRError(f"the grading process handed back {got!r:.200}, not a kernel's source and launches")
    if got[0].size > LARGEST_SOURCE:
        raise TritonIRError(f"the kernel's source is {got[0].size} bytes; at most {LARGEST_SOURCE} are taken")
    try:
        text = got[0].tobytes().decode("utf-8")
        tree = ast.parse(text)
    except (UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise TritonIRError(f"the kernel's source does not parse ({exc})") from None
    functions = tree.body
    for node in functions:
        args = node.args if isinstance(node, ast.FunctionDef) else None
        if args is None or [ast.unparse(d) for d in node.decorator_list] not in (["triton.jit"], ["jit"]) \
                or args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults \
                or node.returns is not None or not all(_annotation_ok(a.annotation) for a in args.args):
            raise TritonIRError("the kernel's source must be @triton.jit functions alone, their arguments without "
                                "defaults and annotated with tl.constexpr or nothing: "
                                f"{ast.unparse(node).splitlines()[0][:120]!r} is not")
    if not functions:
        raise TritonIRError("the kernel's source holds no function")
    rows = [[int(v) for v in row] for row in got[1]]
    return ("import triton\nimport triton.language as tl\nfrom triton import jit\n"
            "from labops.exercises.triton_kernels import recorded_submission\n\n" + text
            + f"\n\n_submission = recorded_submission({functions[0].name}, {rows!r}, {list(got[2])!r}, "
            f"{[dict(s) for s in sizes_list]!r})\n")


_LAUNCH_ERRORS = {"LaunchConfigError": LaunchConfigError, "EmptyGridError": EmptyGridError}


def recorded_submission(kernel, rows, errors, sizes_list) -> TritonSubmission:
    """``kernel`` with a launch that gives, for each of ``sizes_list``, the grid and meta recorded in ``rows``
    (or raises again what the learner's launch raised there)."""
    names = _constexpr_names(kernel.fn)
    table = {tuple(sorted(sizes.items())): (row, error) for sizes, row, error in zip(sizes_list, rows, errors)}

    def launch(**sizes):
        row, error = table[tuple(sorted(sizes.items()))]
        if error:
            name, _, text = error.partition(": ")
            raise _LAUNCH_ERRORS.get(name, RuntimeError)(text if name in _LAUNCH_ERRORS else error)
        if len(row) != 3 + len(names):
            raise LaunchConfigError(f"launch: {len(row) - 3} tl.constexpr values recorded, the kernel takes {names}")
        return tuple(row[:3]), dict(zip(names, row[3:]))
    launch.__name__ = "launch"
    return TritonSubmission(kernel, launch)


def case_sizes(exercise_id, case) -> dict:
    """The sizes ``launch`` is called with for ``case``."""
    return PROBLEMS[exercise_id].setup(*case.args)[3]


# ---- shared by the mistakes ----

def _caught(cls, sentence, **how) -> Mistake:
    return Mistake(sentence, raises=cls, **how)


def _some_written(case, got) -> bool:
    """Some elements are NaN, at least one is written, and every element written is right (cuda._unwritten)."""
    outputs = cuda._outputs(got)
    return cuda._unwritten(case, got) and any(bool((~torch.isnan(torch.as_tensor(g))).any()) for g in outputs)


LAUNCH_RULE = ("Your launch() returned a configuration this exercise does not accept (the error names the rule): "
               "grid is an int or a tuple of ints (triton.cdiv rounds up; / gives a float), and meta gives each "
               "tl.constexpr argument of the kernel an int.")
NOT_TRITON = ("Your kernel is not Triton: it must compile to Triton IR, so inside it use only triton.language "
              "(tl.load, tl.store, tl.arange, tl.exp, ...) on the pointers it is given: no torch, no NumPy, no "
              "Python functions of your own (another @triton.jit function is fine).")
WILD = ("A load or store reached far outside every tensor: an offset is computed from the wrong size or stride "
        "(check each pointer's arithmetic: base + row * stride + column).")


def _common_mistakes() -> dict:
    return {
        "not_triton": _caught(TritonIRError, NOT_TRITON),
        "launch_rule": _caught(LaunchConfigError, LAUNCH_RULE),
        "wild": _caught(WildAccessError, WILD),
    }


MISTAKES: dict[str, dict[str, Mistake]] = {}
PROBLEMS: dict[str, TritonProblem] = {}


def mistake_key(exercise_id: str, sentence: str | None) -> str | None:
    """The key of the mistake of ``exercise_id`` whose sentence is ``sentence`` (None for none)."""
    return next((k for k, m in MISTAKES[exercise_id].items() if m.sentence == sentence), None)


def _exercise(exercise_id, title, signature, checks, problem, mistakes) -> Exercise:
    PROBLEMS[exercise_id], MISTAKES[exercise_id] = problem, mistakes
    return Exercise(exercise_id, title, signature, checks, mistakes=list(mistakes.values()),
                    call=lambda fn, args: problem.run(fn, args), rtol=RTOL, atol=ATOL)


# =========================================================================================================
# a. triton_gelu: exact GELU and its gradient, a block of elements per program, the mask on the tail
# =========================================================================================================
# The cases, the oracle and the wrong formulas are cuda_gelu's: the same op, written in Triton.

def _gelu_setup(x, gy):
    n = x.numel()
    return [x.float().reshape(-1), gy.float().reshape(-1)], [(n,), (n,)], [n], {"n": n}


def _gelu_result_shape(checks_of):
    """cuda_gelu's checks, with the answers flattened as the kernel sees them (x.reshape(-1))."""
    def checks(hidden):
        out = checks_of(hidden)
        for chk in out:
            for case in chk.cases:
                case.expected = tuple(e.reshape(-1) for e in case.expected)
                case.args = tuple(a.reshape(-1) for a in case.args)
        return out
    return checks


def _gelu_rule(grid, meta, sizes):
    if grid[1:] != (1, 1):
        return "the grid is 1-D: (number of programs,)"
    if not _power_of_two(meta.get("BLOCK", 0)) or meta["BLOCK"] > 8192:
        return "BLOCK must be a power of two (tl.arange's rule) from 1 to 8192"
    return None


GELU_MISTAKES = {
    **_common_mistakes(),
    "off_by_one": _caught(OffByOneWriteError,
        "Off by one: the kernel stored the element at index n, one past the end. The last valid offset is n - 1, "
        "so the mask is offs < n, not offs <= n."),
    "mask": _caught(OutOfBoundsWriteError,
        "The kernel stored past the end of an output: the last program's block runs past n when n is not a "
        "multiple of BLOCK, so every load and store takes mask=offs < n."),
    "unwritten": _caught(EmptyGridError,
        "Some elements were never written (they still hold the NaN the output was filled with) and every "
        "element written is right: the grid must cover n, triton.cdiv(n, BLOCK) programs, and program pid "
        "takes its own block, offs = pid * BLOCK + tl.arange(0, BLOCK).", test=_some_written),
    # recognised by cuda_gelu's wrong formulas, named here in Triton's words
    **{key: Mistake(sentence, test=cuda.GELU_MISTAKES[key].test) for key, sentence in (
        ("tanh", "That is GELU's tanh approximation; this exercise wants the exact GELU, x * Phi(x) with "
                 "Phi(x) = (1 + tl.erf(x / sqrt(2))) / 2."),
        ("erf_argument", "The erf argument is wrong: Phi(x) = (1 + erf(x / sqrt(2))) / 2, so tl.erf takes x times "
                         "0.70710678, not x or x * sqrt(2)."),
        ("product_rule", "The gradient misses a term of the product rule: d/dx [x * Phi(x)] = Phi(x) + x * phi(x), "
                         "so gx = gy * (Phi(x) + x * phi(x))."),
        ("chain_rule", "The gradient forgot the chain rule: gx is the incoming gradient gy times GELU'(x), "
                       "gx = gy * (Phi(x) + x * phi(x))."),
        ("swapped_outputs", "y and gx are swapped: y_ptr gets the forward, x * Phi(x), and gx_ptr the gradient."),
    )},
}

TRITON_GELU = _exercise(
    "triton_gelu", "A Triton kernel: exact GELU and its gradient, a masked block of elements per program",
    "triton_submission(kernel, launch)   kernel(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr) sets "
    "y = x * Phi(x), gx = gy * (Phi(x) + x * phi(x)) for the n float32 elements; launch(n) -> (grid, "
    "{'BLOCK': ...}) with a 1-D grid and BLOCK a power of two",
    _gelu_result_shape(cuda._gelu_checks),
    TritonProblem(_gelu_setup, rule=_gelu_rule),
    GELU_MISTAKES,
)


# =========================================================================================================
# b. triton_softmax: one row per program, the whole row in one block
# =========================================================================================================
# x is handed to the kernel as the first `cols` columns of a wider matrix (width >= cols), so its row
# stride need not be cols; y is contiguous.

def _softmax_case(label, shape, seed, row_scales=None, width=None):
    case = cuda._softmax_case(label, shape, seed, row_scales)
    rows, cols = shape
    width = width or cols
    pad = cuda._f32(randn(rows, width - cols, seed=seed + 7))
    if width != cols:
        case.label += f" (a row stride of {width})"
    case.args = (case.args[0], pad)
    return case


def _softmax_checks(hidden):
    c = _softmax_case
    return [
        Check("rows of 16 (a power of two: no masked lanes)", [c("random", (4, 16), 481)]),
        Check("rows that are not a power of two (masked lanes)", [c("random", (5, 10), 441), c("random", (3, 100), 445)]
              + ([c("random", (6, 20), 442)] if hidden else [])),
        Check("one element", [c("one element", (1, 1), 447)]),
        Check("rows of a wider matrix (row stride != cols)", [c("strided", (4, 12), 483, width=20)]
              + ([c("strided", (3, 9), 484, width=16)] if hidden else [])),
        Check("large logits (exp overflows float32 beyond 88)",
              [c("rows scaled by 100", (4, 40), 449, row_scales=[100, 1, 100, 1])]
              + ([c("rows scaled by 300", (3, 7), 450, row_scales=[1, 300, 300])] if hidden else [])),
    ]


def _softmax_setup(x, pad):
    rows, cols = x.shape
    wide = torch.cat([x, pad], 1).float()
    return [wide], [(rows, cols)], [wide.shape[1], cols, cols], {"rows": rows, "cols": cols}


def _softmax_rule(grid, meta, sizes):
    if grid != (sizes["rows"], 1, 1):
        return f"one program per row: grid = (rows,) = ({sizes['rows']},)"
    block = meta.get("BLOCK", 0)
    if not _power_of_two(block) or not sizes["cols"] <= block <= 8192:
        return (f"the whole row is one block: BLOCK must be a power of two >= cols = {sizes['cols']} "
                f"(triton.next_power_of_2(cols)), and at most 8192")
    return None


def _softmax_zero_lanes(case, got):
    """Masked lanes loaded as 0: the max and the sum include BLOCK - cols zeros, for a BLOCK >= cols."""
    x = case.args[0]
    cols = x.shape[1]
    block = 1 << (cols - 1).bit_length()
    if block == cols:
        return False
    for b in (block, 2 * block, 4 * block):
        m = torch.clamp(x.max(1, keepdim=True).values, min=0.0)
        s = torch.exp(x - m).sum(1, keepdim=True) + (b - cols) * torch.exp(-m)
        if cuda._close(got, torch.exp(x - m) / s):
            return True
    return False


def _softmax_row_stride(case, got):
    """Rows read at row * cols of the wider matrix instead of row * stride."""
    x, pad = case.args
    if pad.shape[1] == 0:
        return False
    rows, cols = x.shape
    flat = torch.cat([x, pad], 1).reshape(-1)
    return cuda._close(got, torch.softmax(flat[:rows * cols].reshape(rows, cols), 1))


SOFTMAX_MISTAKES = {
    **_common_mistakes(),
    "mask": _caught(OutOfBoundsWriteError,
        "The kernel stored outside y: the block is a power of two, longer than the row when cols is not, so "
        "the store takes mask=cols < n_cols (and so does the load)."),
    "no_max": Mistake(
        "NaN at large logits: exp(x) overflows float32 beyond x = 88 and inf / inf is NaN. Subtract the row's "
        "max first: softmax(x) = exp(x - m) / sum(exp(x - m)) with m = tl.max(x, axis=0).",
        test=cuda._softmax_overflow),
    "zero_lanes": Mistake(
        "The masked lanes were loaded as 0 (tl.load's default other): each adds exp(0 - max) to the sum when "
        "cols is not a power of two. Load them as -inf, other=-float('inf'): exp(-inf) = 0 adds nothing.",
        test=_softmax_zero_lanes),
    "row_stride": Mistake(
        "Rows are read at row * n_cols: x's rows are x_row_stride elements apart (here x is part of a wider "
        "matrix), so row r starts at x_ptr + r * x_row_stride.", test=_softmax_row_stride),
    "no_normalize": Mistake(
        "y is not divided by the row's sum: softmax(x) = exp(x - m) / sum(exp(x - m)), the sum by "
        "tl.sum(e, axis=0).", test=cuda.SOFTMAX_MISTAKES["no_normalize"].test),
}

TRITON_SOFTMAX = _exercise(
    "triton_softmax", "A Triton kernel: row softmax, one program per row, the whole row in one block",
    "triton_submission(kernel, launch)   kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, "
    "BLOCK: tl.constexpr) sets each row of y (rows, n_cols) to the softmax of that row of x (float32; row r "
    "of x starts at x_ptr + r * x_row_stride); launch(rows, cols) -> ((rows,), {'BLOCK': a power of two >= "
    "cols})",
    _softmax_checks,
    TritonProblem(_softmax_setup, rule=_softmax_rule),
    SOFTMAX_MISTAKES,
)


# =========================================================================================================
# c. triton_matmul: C = A B, float16 in, float32 accumulated, tiles by tl.dot and a loop over K
# =========================================================================================================

def _f16(t):
    return t.to(torch.float16).to(torch.float64)


def _matmul_checks(hidden):
    c = functools.partial(cuda._sgemm_case, exact=_f16)
    return [
        Check("M, N, K multiples of 16", [c("whole tiles", 16, 32, 16, 461)]),
        Check("ragged M, N (partial tiles at the edges of C)", [c("ragged", 20, 18, 32, 463)]
              + ([c("ragged", 33, 17, 16, 464)] if hidden else [])),
        Check("ragged K (a partial last tile along K)", [c("ragged K", 16, 16, 40, 465), c("ragged", 33, 17, 23, 466)]
              + ([c("ragged", 17, 3, 70, 467)] if hidden else [])),
        Check("long K (accumulated in float32)", [c("K = 256", 16, 16, 256, 468)]),
        Check("wide and flat (more tiles along one side)", [c("M < N", 5, 40, 16, 469)]
              + ([c("M > N", 40, 5, 17, 470)] if hidden else [])),
    ]


def _matmul_setup(a, b):
    (m, k), n = a.shape, b.shape[1]
    return [a.half(), b.half()], [(m, n)], [m, n, k, k, 1, n, 1, n, 1], {"m": m, "n": n, "k": k}


def _matmul_rule(grid, meta, sizes):
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        value = meta.get(name, 0)
        if not _power_of_two(value) or not 16 <= value <= 128:
            return f"{name} must be a power of two from 16 to 128 (tl.dot takes tiles of at least 16)"
    if grid[2] != 1:
        return "the grid is 1-D or 2-D"
    return None


def _matmul_k_tail(case, got):
    """The K tail unmasked in both loads: past K, a row of A runs on into the next row (past A's end, its
    guard), and B's rows past K are past B's end (its guard); tried for each BLOCK_K the launch allows."""
    a, b = case.args
    (m, k), n = a.shape, b.shape[1]
    guard = INPUT_GUARD[torch.float16]
    flat = torch.cat([a.reshape(-1), torch.full((GUARD_ELEMENTS,), guard, dtype=a.dtype)])
    for block_k in (16, 32, 64, 128):
        pad = -k % block_k
        if pad:
            tail = flat[torch.arange(m)[:, None] * k + k + torch.arange(pad)[None, :]]
            if cuda._close(got, a @ b + tail @ torch.full((pad, n), guard, dtype=a.dtype)):
                return True
    return False


def _matmul_k_range(case, got):
    """C summed over a part of K only, from one tile boundary to another (BLOCK_K is at least 16)."""
    a, b = case.args
    k = a.shape[1]
    ends = sorted(set(range(0, k, 16)) | {k})
    return any(cuda._close(got, a[:, k0:k1] @ b[k0:k1]) for k0 in ends for k1 in ends if k0 < k1 and (k0, k1) != (0, k))


def _matmul_low_precision(case, got):
    """Right to float16's precision (about 1e-3) but not float32's: summed in float16."""
    from labops.testing import rel_error

    g = torch.as_tensor(got)
    if g.shape != case.expected.shape or not bool(torch.isfinite(g).all()):
        return False
    return 1e-5 < rel_error(g, case.expected) < 3e-2


MATMUL_MISTAKES = {
    **_common_mistakes(),
    "mask": _caught(OutOfBoundsWriteError,
        "C was stored outside its M x N elements: a tile at the edge of C runs past it, so the store takes "
        "mask=(rm[:, None] < M) & (rn[None, :] < N)."),
    "k_tail": Mistake(
        "The last tile along K read past the end of A's rows and B's columns: when K is not a multiple of "
        "BLOCK_K, both loads need the K mask too, (k + rk) < K, with other=0.0, so the tail adds nothing.",
        test=_matmul_k_tail),
    "unwritten": _caught(EmptyGridError,
        "Some tiles of C were never written (they still hold NaN) and every tile written is right: the grid "
        "must have a program for every tile, (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N)), and each "
        "program must find its own tile: pid_m from the axis (or the part of pid) that counts M's tiles.",
        test=_some_written),
    "accumulator_dtype": Mistake(
        "C is right only to float16's precision: the sum was kept in the inputs' dtype. Accumulate in float32, "
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), acc += tl.dot(a, b), and store acc.",
        test=_matmul_low_precision),
    "transposed": Mistake(
        "C is stored transposed: element (m, n) goes to c_ptr + m * stride_cm + n * stride_cn.",
        test=cuda.SGEMM_MISTAKES["transposed"].test),
    "k_range": Mistake(
        "Only part of the K dimension was added: loop over every tile of K, for k in range(0, K, BLOCK_K), "
        "and set the accumulator once, before the loop (acc += tl.dot(...), not acc = ...).",
        test=_matmul_k_range),
}

TRITON_MATMUL = _exercise(
    "triton_matmul", "A Triton kernel: tiled matmul, tl.dot on float16 tiles accumulated in float32",
    "triton_submission(kernel, launch)   kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, "
    "stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr) sets "
    "C = A B for A (M, K) and B (K, N) float16, C (M, N) float32; launch(m, n, k) -> (grid, {'BLOCK_M': ..., "
    "'BLOCK_N': ..., 'BLOCK_K': ...}), each a power of two from 16 to 128",
    _matmul_checks,
    TritonProblem(_matmul_setup, rule=_matmul_rule),
    MATMUL_MISTAKES,
)


EXERCISES = [TRITON_GELU, TRITON_SOFTMAX, TRITON_MATMUL]
EXERCISES_BY_ID = {ex.id: ex for ex in EXERCISES}
