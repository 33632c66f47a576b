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
and returns the op. The check runs in a separate Python process, so a
segmentation fault or an endless loop in the learner's C++ becomes a line of
feedback instead of a dead Jupyter kernel.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys

import torch
import torch.nn.functional as F

from ._core import Case, Check, CheckResult, Exercise, Mistake, randn, run_checks

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


def _gradcheck_case():
    return Case("torch.autograd.gradcheck", (randn(2, 3, 4, seed=301), randn(3, seed=302, scale=0.5)), True,
                ("gradcheck",))


def _opcheck_case():
    # opcheck traces the op through AOT autograd: seconds on an idle machine, over 20 s on a busy one
    # (an H100 host running 14 test workers), so this case gets most of the check's time.
    return Case("torch.library.opcheck (schema, fake, autograd registration, AOT dispatch)",
                (randn(2, 3, 5, seed=303), randn(3, seed=304, scale=0.5)), True, ("opcheck",),
                time_limit_s=0.75 * CHECK_TIME_LIMIT_S)


class _PreluChecks(Exercise):
    def run(self, op, case):
        x, weight = case.args[0].clone(), case.args[1].clone()
        if case.names == ("gradcheck",):
            return torch.autograd.gradcheck(op, (x.requires_grad_(True), weight.requires_grad_(True)))
        if case.names == ("opcheck",):
            results = torch.library.opcheck(op, (x.requires_grad_(True), weight.requires_grad_(True)))
            failed = {k: v for k, v in results.items() if v != "SUCCESS"}
            return True if not failed else json.dumps(failed)[:300]
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
        Check("gradcheck (float64, finite differences)", [_gradcheck_case()]),
        Check("opcheck", [_opcheck_case()]),
    ],
    mistakes=[
        Mistake("Sign error in grad_weight: dy/da = x where x <= 0, added with a plus sign.",
                wrong=_wrong_weight("sign")),
        Mistake("grad_weight uses the wrong side: the slope a only acts where x <= 0, so only those "
                "positions contribute grad_y * x.", wrong=_wrong_weight("positive side")),
        Mistake("grad_weight forgot grad_y: the chain rule gives sum of grad_y * x over the positions where "
                "x <= 0.", wrong=_wrong_weight("no grad_y")),
    ],
)


def _check_in_this_process(source: str, hidden: bool) -> CheckResult:
    try:
        op = build_prelu(source)
    except RuntimeError as exc:
        checks = PRELU_CHECKS.make_checks(hidden)
        total = float(sum(c.points for c in checks))
        return CheckResult("prelu_op", False, 0.0, total,
                           [f"prelu_op: 0/{total:g} points", f"FAIL it compiles -- {exc}"])
    return run_checks(PRELU_CHECKS, op, hidden)


def _worker_main():  # python -m labops.exercises.compiled <source file> <hidden>
    source = open(sys.argv[1]).read()
    result = _check_in_this_process(source, sys.argv[2] == "1")
    print("LABOPS-RESULT " + json.dumps({"passed": result.passed, "score": result.score,
                                         "max_score": result.max_score, "messages": result.messages}))


def check_in_subprocess(fn, hidden: bool) -> CheckResult:
    """Get the source from ``fn()``, then build and check it in a child process."""
    import tempfile

    total = float(sum(c.points for c in PRELU_CHECKS.make_checks(hidden)))

    def failed(why):
        return CheckResult("prelu_op", False, 0.0, total, [f"prelu_op: 0/{total:g} points", f"FAIL {why}"])

    from ._core import describe_exception

    try:
        source = fn()
    except Exception as exc:
        return failed(f"source(): your function {describe_exception(exc)}")
    if not isinstance(source, str):
        return failed(f"source() must return the C++ code as a str, got {type(source).__name__}")
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(source)
    try:
        proc = subprocess.run([sys.executable, "-m", "labops.exercises.compiled", f.name, "1" if hidden else "0"],
                              capture_output=True, text=True, timeout=BUILD_TIME_LIMIT_S + CHECK_TIME_LIMIT_S,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    except subprocess.TimeoutExpired:
        return failed(f"building and checking your op took over {BUILD_TIME_LIMIT_S + CHECK_TIME_LIMIT_S} s: "
                      "an endless loop in your C++?")
    finally:
        os.unlink(f.name)
    for line in proc.stdout.splitlines():
        if line.startswith("LABOPS-RESULT "):
            data = json.loads(line[len("LABOPS-RESULT "):])
            return CheckResult("prelu_op", data["passed"], data["score"], data["max_score"], data["messages"])
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        why = {"SIGSEGV": "segmentation fault: a read or write outside a tensor (check the index bounds and "
                          "that data_ptr<double>() matches the dtype)",
               "SIGABRT": "aborted (an uncaught C++ exception or a failed assertion)",
               "SIGKILL": "killed, probably for using too much memory"}.get(name, name)
        return failed(f"your op crashed the checking process: {why}")
    return failed("the checking process failed:\n" + (proc.stderr or proc.stdout)[-1500:])


EXERCISES = [PRELU_CHECKS]

if __name__ == "__main__":
    _worker_main()
