"""The exercise of notebook 10: Torch7's training loop, written with a Torch7-style ``Sequential``.

The learner's ``train_steps(model, inputs, targets, lr, steps)`` runs ``steps`` steps of
``zeroGradParameters``, ``forward``, the MSE gradient, ``backward`` and ``updateParameters(lr)`` on a model
the check builds from the case's parameters; the check then reads the model's weights and biases. The
oracle is the same loop in float64 with ``torch.autograd`` on copies of those parameters. Each mistake is
that loop with one thing changed (the gradients not cleared, the step ascending, the loss not averaged...).

The model is ``labops.torch7``'s: a ``Sequential`` of ``Linear`` and ``Tanh`` layers, its Tanh computed by torch
instead of the compiled op, so that the grading process need not build the labops library.
"""

from __future__ import annotations

import torch

from labops import torch7

from ._core import Case, Check, Exercise, Mistake, copy_args, matches, randn

__all__ = ["EXERCISES", "Tanh", "torch7_model"]


# ---- the model the learner trains: labops.torch7's layers ----

class Tanh(torch7.Tanh):
    """``torch7.Tanh`` with torch's tanh instead of the compiled op (the same math: the gradient from the output)."""

    def updateOutput(self, input):
        self.output = torch.tanh(input)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = gradOutput * (1 - self.output * self.output)
        return self.gradInput


def torch7_model(params, grads) -> torch7.Sequential:
    """Linear, Tanh, Linear, ... (no Tanh after the last Linear) with ``params`` = (W1, b1, W2, b2, ...) and
    their gradient buffers ``grads``, used as they are (not copied)."""
    model = torch7.Sequential()
    for k in range(0, len(params), 2):
        if model.modules:
            model.add(Tanh())
        linear = torch7.Linear(params[k].shape[1], params[k].shape[0], dtype=params[k].dtype)
        linear.weight, linear.bias = params[k], params[k + 1]
        linear.gradWeight, linear.gradBias = grads[k], grads[k + 1]
        model.add(linear)
    return model


def _weights(model: torch7.Sequential) -> tuple:
    return tuple(p for m in model.modules if isinstance(m, torch7.Linear)
                 for p in (m.weight, m.bias))


def _call(fn, args):
    params, grads, inputs, targets, lr, steps = args
    model = torch7_model(params, grads)
    fn(model, inputs, targets, lr, steps)
    return _weights(model)


# ---- the oracle: the same loop with torch.autograd, and each mistake as that loop with one change ----

def _loop(params, grads, inputs, targets, lr, steps, *, loss="mean", clear="before", rate=None, sign=1.0,
          only_last=False):
    """The weights after ``steps`` steps of gradient descent on MSE, by autograd in float64.

    loss: "mean" (over all N * K outputs), "sum", "batch" (divided by N only) or "half" (the mean halved);
    clear: when the gradient buffers are zeroed: "before" each backward, "after" each update, "never";
    rate: the step's learning rate (default ``lr``); sign: -1 climbs; only_last: only the last Linear moves.
    """
    params = [p.detach().clone().double() for p in params]
    buffers = [g.detach().clone().double() for g in grads]
    rate = lr if rate is None else rate
    moving = range(len(params) - 2, len(params)) if only_last else range(len(params))
    for _ in range(steps):
        leaves = [p.clone().requires_grad_(True) for p in params]
        x = inputs.double()
        for k in range(0, len(leaves), 2):
            x = x @ leaves[k].t() + leaves[k + 1]
            if k + 2 < len(leaves):
                x = torch.tanh(x)
        squared = ((x - targets.double()) ** 2).sum()
        n, outputs = targets.shape
        error = {"mean": squared / (n * outputs), "sum": squared, "batch": squared / n,
                 "half": squared / (2 * n * outputs)}[loss]
        gradients = torch.autograd.grad(error, leaves)
        if clear == "before":
            buffers = [torch.zeros_like(b) for b in buffers]
        buffers = [b + g for b, g in zip(buffers, gradients)]
        params = [p - sign * rate * b if i in moving else p for i, (p, b) in enumerate(zip(params, buffers))]
        if clear == "after":
            buffers = [torch.zeros_like(b) for b in buffers]
    return tuple(params)


def _mistake(sentence, **change):
    return Mistake(sentence, wrong=lambda *args: _loop(*args, **change))


def _unchanged(case, got):
    return matches(got, tuple(case.args[0]))


def _steps_off_by_one(case, got):
    params, grads, inputs, targets, lr, steps = copy_args(case.args)
    return any(matches(got, _loop(params, grads, inputs, targets, lr, s)) for s in (steps - 1, steps + 1) if s > 0)


# ---- cases: random parameters, leftover gradients, random inputs and targets ----

def _case(n, sizes, lr, steps, seed):
    params, grads = [], []
    for k, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        params += [randn(fan_out, fan_in, seed=seed + 10 * k, scale=fan_in ** -0.5),
                   randn(fan_out, seed=seed + 10 * k + 1, scale=0.5)]
        # what an earlier backward left in the buffers: zeroGradParameters must clear it
        grads += [randn(fan_out, fan_in, seed=seed + 10 * k + 2), randn(fan_out, seed=seed + 10 * k + 3)]
    inputs, targets = randn(n, sizes[0], seed=seed + 100), randn(n, sizes[-1], seed=seed + 101)
    args = (tuple(params), tuple(grads), inputs, targets, lr, steps)
    names = tuple(f"{kind} {k + 1}" for k in range(len(sizes) - 1) for kind in ("weight", "bias"))
    label = f"N={n}, sizes {' -> '.join(map(str, sizes))}, lr {lr:g}, {steps} step{'s' * (steps > 1)}"
    return Case(label, args, _loop(*args), names)


def _checks(hidden):
    return [
        Check("two steps", [_case(5, (3, 7, 2), 0.1, 2, 201)]
              + ([_case(6, (4, 5, 3), 0.2, 2, 202)] if hidden else [])),
        Check("several steps", [_case(7, (5, 9, 3), 0.05, 5, 211)]
              + ([_case(4, (3, 4, 6), 0.1, 3, 212)] if hidden else [])),
        Check("three Linear layers", [_case(3, (2, 5, 4, 3), 0.1, 3, 221)]
              + ([_case(9, (6, 3, 5, 2), 0.07, 4, 222)] if hidden else [])),
        Check("a batch of 1", [_case(1, (7, 3, 5), 0.3, 2, 231)]
              + ([_case(1, (1, 3, 1), 0.5, 3, 232)] if hidden else [])),
    ]


TRAIN_STEPS = Exercise(
    "train_steps", "Torch7's training loop: zeroGradParameters, forward, the MSE gradient, backward, updateParameters",
    "fn(model, inputs, targets, lr, steps) -> None   (trains model, a Torch7-style Sequential, in place; "
    "loss: the mean of (output - targets)**2 over all N * K values)",
    _checks,
    call=_call,
    mistakes=[
        Mistake("The weights did not change: call model.updateParameters(lr) after model.backward in every step.",
                test=_unchanged),
        _mistake("zeroGradParameters is missing: backward *adds* to the gradient buffers, so each step used the "
                 "sum of every gradient so far (and of what an earlier backward left there). Call "
                 "model.zeroGradParameters() at the start of every step.", clear="never"),
        _mistake("The gradients are cleared after updateParameters, not before backward: the first step used "
                 "what an earlier backward left in the buffers. Call zeroGradParameters first in each step.",
                 clear="after"),
        _mistake("The step climbs the loss: updateParameters(lr) already subtracts lr * gradient, so pass lr "
                 "itself (not -lr) and a gradient of +2 (output - targets) / n.", sign=-1.0),
        Mistake("The learning rate was applied twice (lr**2 per step): a backward with scale = lr and then "
                "updateParameters(lr). scale weighs the gradient; with it left at 1, updateParameters(lr) "
                "makes the step.", test=lambda case, got: matches(got, _loop(*copy_args(case.args),
                                                                             rate=case.args[4] ** 2))),
        _mistake("Only the last Linear layer was updated: call updateParameters on the whole model (it updates "
                 "every module), after backward has run through all of them.", only_last=True),
        _mistake("The MSE gradient is not averaged: the loss is the mean of N * K squared errors, so "
                 "dE/doutput = 2 (output - targets) / (N * K), not 2 (output - targets).", loss="sum"),
        _mistake("The MSE gradient is divided by N only: the mean runs over all N * K values of the output, so "
                 "dE/doutput = 2 (output - targets) / (N * K).", loss="batch"),
        _mistake("The factor 2 of the MSE gradient is missing: d/dy (y - t)**2 = 2 (y - t), so "
                 "dE/doutput = 2 (output - targets) / (N * K).", loss="half"),
        Mistake("One step too many or too few: run exactly `steps` steps (for _ in range(steps)).",
                test=_steps_off_by_one),
    ],
)

EXERCISES = [TRAIN_STEPS]
