"""The compiled-op exercise: PReLU in C++, built with ``load_inline``, registered with ``torch.library``.

The learner's function returns C++ source defining

    at::Tensor prelu_forward(const at::Tensor& x, const at::Tensor& weight);
    std::tuple<at::Tensor, at::Tensor> prelu_backward(const at::Tensor& grad_y,
                                                      const at::Tensor& x, const at::Tensor& weight);

for float64 ``x`` of shape (N, C, ...) and ``weight`` of shape (C,):
``y = x`` where ``x > 0`` and ``weight[c] * x`` elsewhere; the backward returns
``grad_x`` and ``grad_weight`` (PReLU's accGradParameters: the sum over every
position of channel c of ``grad_y * x`` where ``x <= 0``).

``build_prelu(source)`` wraps that source in the registration below (one
schema per function, a CPU kernel, a fake for ``torch.compile`` and an
autograd formula), compiles it with ``torch.utils.cpp_extension.load_inline``
and returns the op. The op is built and run in a bounded child process
(``labops.exercises.sandbox``), so a segmentation fault or an endless loop in
the learner's C++ becomes a line of feedback instead of a dead Jupyter kernel;
the child hands back the op's outputs as plain arrays and the comparisons are
made outside it. That is why the autograd and compile checks return data (the
Jacobian through autograd, the compiled op's output and the inputs after the
calls) rather than running ``gradcheck``/``opcheck`` and reporting a verdict:
a verdict computed where the learner's code runs could be anything it likes.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F

from ._core import Case, Check, CheckResult, Exercise, Mistake, evaluate, randn

__all__ = ["EXERCISES", "PRELU_CHECKS", "REGISTRATION", "build_prelu", "check_in_subprocess"]

# Lean headers: with <torch/extension.h> the build takes 45 s on a 2-core laptop, with these 10 s.
PRELUDE = """\
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>
#include <cmath>
#include <tuple>
"""

# What build_prelu appends to the learner's source; NAMESPACE is unique per source, so a
# re-run after an edit registers a fresh library instead of clashing with the old one.
REGISTRATION = """\
TORCH_LIBRARY(NAMESPACE, m) {
  m.def("prelu(Tensor x, Tensor weight) -> Tensor");
  m.def("prelu_backward(Tensor grad_y, Tensor x, Tensor weight) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(NAMESPACE, CPU, m) {
  m.impl("prelu", &prelu_forward);
  m.impl("prelu_backward", &prelu_backward);
}
"""

BUILD_TIME_LIMIT_S = 300
CHECK_TIME_LIMIT_S = 120


def build_prelu(source: str):
    """Compile ``source`` with the registration above and return ``torch.ops.<namespace>.prelu``.

    Raises RuntimeError with the compiler's messages (line numbers of ``source``,
    in a file called your_code.cpp) when it does not compile.
    """
    from torch.utils.cpp_extension import load_inline

    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    namespace = f"labops_exercise_{digest}"
    if not hasattr(getattr(torch.ops, namespace), "prelu"):
        code = PRELUDE + '#line 1 "your_code.cpp"\n' + source + "\n#line 1 \"registration.cpp\"\n" + \
            REGISTRATION.replace("NAMESPACE", namespace)
        try:
            load_inline(namespace, cpp_sources=[code], is_python_module=False, no_implicit_headers=True,
                        extra_cflags=["-O2"], verbose=False)
        except Exception as exc:
            errors = [line for line in str(exc).splitlines() if "your_code.cpp" in line or "error" in line]
            raise RuntimeError("your C++ did not compile:\n" + "\n".join(errors[:12] or [str(exc)[-2000:]])) \
                from None
        _register_python_side(namespace)
    return getattr(torch.ops, namespace).prelu


def _register_python_side(namespace):
    prelu_name, backward_name = f"{namespace}::prelu", f"{namespace}::prelu_backward"

    @torch.library.register_fake(prelu_name)
    def _(x, weight):
        return torch.empty_like(x)

    @torch.library.register_fake(backward_name)
    def _(grad_y, x, weight):
        return torch.empty_like(x), torch.empty_like(weight)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        grad_x, grad_weight = getattr(torch.ops, namespace).prelu_backward(grad_y.contiguous(), x, weight)
        return grad_x, grad_weight

    torch.library.register_autograd(prelu_name, backward, setup_context=setup_context)


# ---- the checks, run in the worker process on the built op ----

def _prelu_reference(x, weight):
    xr, wr = x.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    y = F.prelu(xr, wr)
    return y, xr, wr


def _prelu_case(label, shape, seed):
    x = randn(*shape, seed=seed)
    weight = randn(shape[1], seed=seed + 1, scale=0.5)
    g = randn(*shape, seed=seed + 2)
    y, xr, wr = _prelu_reference(x, weight)
    y.backward(g)
    return Case(f"{label} {tuple(shape)}", (x, weight, g), (y.detach(), xr.grad, wr.grad),
                ("output", "grad_x", "grad_weight"))


def _op_call(op, args):
    x, weight, g = args
    xr, wr = x.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    y = op(xr, wr)
    y.backward(g)
    return y.detach(), xr.grad, wr.grad


def _jacobian(f, x, weight):
    """d f(x, weight) / d(x, weight) through autograd, one row per output element: what gradcheck compares."""
    x, weight = x.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    jx, jw = torch.autograd.functional.jacobian(f, (x, weight))
    n = x.numel()
    return torch.cat([jx.reshape(n, -1), jw.reshape(n, -1)], dim=1)


def _jacobian_case():
    x, weight = randn(2, 3, 4, seed=301), randn(3, seed=302, scale=0.5)
    return Case("the Jacobian through autograd (what torch.autograd.gradcheck compares), (2, 3, 4)",
                (x, weight), _jacobian(F.prelu, x, weight), ("jacobian",))


def _compiled_case():
    # torch.compile traces the op through its fake and autograd registrations: seconds on an idle machine,
    # over 20 s on a busy one, so this case gets most of the check's time.
    x, weight = randn(2, 3, 5, seed=303), randn(3, seed=304, scale=0.5)
    y = F.prelu(x, weight)
    return Case("under torch.compile (fake tensors, AOT autograd), and the inputs left unchanged, (2, 3, 5)",
                (x, weight), (y, x, weight), ("compiled output", "x after the calls", "weight after the calls"),
                time_limit_s=0.75 * CHECK_TIME_LIMIT_S)


def _build_from(source_fn):
    source = source_fn()
    if not isinstance(source, str):
        raise TypeError(f"source() must return the C++ code as a str, got {type(source).__name__}")
    return build_prelu(source)


class _PreluChecks(Exercise):
    def run(self, op, case):
        x, weight = case.args[0].clone(), case.args[1].clone()
        if case.names == ("jacobian",):
            return _jacobian(op, x, weight)
        if case.names[0] == "compiled output":
            torch._dynamo.reset()
            y = torch.compile(op, backend="aot_eager", fullgraph=True)(x, weight)
            xr, wr = x.clone().requires_grad_(True), weight.clone().requires_grad_(True)
            op(xr, wr).backward(torch.ones_like(x))
            return y, x, weight
        return _op_call(op, case.args)


def _wrong_weight(kind):
    def wrong(x, weight, g):
        neg = (x <= 0).to(x.dtype)
        dims = [d for d in range(x.dim()) if d != 1]
        y, xr, wr = _prelu_reference(x, weight)
        y.backward(g)
        if kind == "sign":
            gw = -wr.grad
        elif kind == "positive side":
            gw = (g * x * (1 - neg)).sum(dims)
        elif kind == "no grad_y":
            gw = (x * neg).sum(dims)
        else:
            raise AssertionError(kind)
        return y.detach(), xr.grad, gw
    return wrong


PRELU_CHECKS = _PreluChecks(
    "prelu_op", "PReLU as a compiled op: forward, updateGradInput, accGradParameters",
    "source() -> str   (C++ defining prelu_forward and prelu_backward)",
    lambda hidden: [
        Check("forward and both gradients, (N, C, H, W)", [_prelu_case("random", (2, 3, 4, 5), 311)]
              + ([_prelu_case("random", (3, 2, 7, 1), 312)] if hidden else [])),
        Check("batch of 1, odd sizes, 3-D input", [_prelu_case("random", (1, 5, 3, 7), 313),
                                                  _prelu_case("random", (2, 4, 9), 315)]),
        Check("autograd: the Jacobian of the registered op", [_jacobian_case()]),
        Check("torch.compile and no input changed", [_compiled_case()]),
    ],
    mistakes=[
        Mistake("Sign error in grad_weight: dy/da = x where x <= 0, added with a plus sign.",
                wrong=_wrong_weight("sign")),
        Mistake("grad_weight uses the wrong side: the slope a only acts where x <= 0, so only those "
                "positions contribute grad_y * x.", wrong=_wrong_weight("positive side")),
        Mistake("grad_weight forgot grad_y: the chain rule gives sum of grad_y * x over the positions where "
                "x <= 0.", wrong=_wrong_weight("no grad_y")),
    ],
    prepare=_build_from,
    prepare_time_limit_s=BUILD_TIME_LIMIT_S,
)


def check_in_subprocess(fn, hidden: bool = False) -> CheckResult:
    """Get the source from ``fn()`` here, then build and run the op in a bounded child; compare here."""
    from ._core import describe_exception
    from .sandbox import CodeStep, GradeStep, run_steps

    checks = PRELU_CHECKS.make_checks(hidden)
    total = float(sum(c.points for c in checks))
    try:
        source = fn()
    except Exception as exc:
        return CheckResult("prelu_op", False, 0.0, total, [f"prelu_op: 0/{total:g} points",
                                                          f"FAIL source(): your function {describe_exception(exc)}"])
    steps = [CodeStep("your source()", f"SOURCE = {source!r}\ndef source():\n    return SOURCE\n"),
             GradeStep("prelu_op", "source", [c.cases for c in checks])]
    outcomes, _ = run_steps(steps)
    return evaluate(PRELU_CHECKS, checks, lambda k, j, case: outcomes[(1, k, j)], hidden)


EXERCISES = [PRELU_CHECKS]
