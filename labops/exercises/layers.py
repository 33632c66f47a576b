"""Exercises on the layers' formulas: activations, Linear's accGradParameters,
pooling, softmax and cross-entropy, reorg and the resize coordinate transform.

Oracles are native PyTorch in float64 (autograd for gradients), a
finite-difference gradient, or darknet's own ``reorg_cpu`` ported to NumPy.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from labops.reference.reorg import darknet_reorg_cpu, reorg_forward_numpy
from labops.reference.upsample import source_coordinate
from labops.testing import numerical_gradient

from ._core import Case, Check, Exercise, Mistake, copy_args, generator, matches, randn

__all__ = ["EXERCISES"]


def _float64(got) -> torch.Tensor:
    """The learner's answer (a tensor, an array or nested lists) as a float64 tensor."""
    return torch.as_tensor(np.asarray(got, dtype=np.float64))


def _finite(case, got) -> bool:
    """True when the answer has inf/NaN where the oracle is finite."""
    got = _float64(got) if not isinstance(got, torch.Tensor) else got
    return bool(torch.isfinite(case.expected).all()) and not bool(torch.isfinite(got.double()).all())


def _sign_error(oracle):
    return Mistake("Sign error: your answer is the exact negative of the right one; "
                   "check the sign of each term.", wrong=lambda *a: -oracle(*a))


def _matches_any(*wrongs):
    """A Mistake's test: the answer equals one of ``wrongs``, each computed from the case's inputs."""
    return lambda case, got: any(matches(got, wrong(*copy_args(case.args))) for wrong in wrongs)


def _shapes(seed, shapes, make, hidden, extra_shapes=()):
    """One case per shape (more in hidden mode), each from its own seed."""
    return [make(shape, seed + k) for k, shape in enumerate(list(shapes) + (list(extra_shapes) if hidden else []))]


# ---- tanh, from the output ----

def _tanh_grad(y, g):
    return g * (1 - y * y)


def _tanh_case(shape, seed):
    y = torch.tanh(randn(*shape, seed=seed))
    g = randn(*shape, seed=seed + 100)
    return Case(f"random {tuple(shape)}", (y, g), _tanh_grad(y, g), ("grad_input",))


def _tanh_fd_case(seed):
    x = randn(3, 4, seed=seed)
    g = randn(3, 4, seed=seed + 1)
    expected = numerical_gradient(torch.tanh, x, g)  # central differences of the forward
    return Case("against central differences of tanh at x", (torch.tanh(x), g), expected, ("grad_input",))


def _fd_check(make_case, seed, hidden):
    """The finite-difference check of an activation: one point released, a second one hidden."""
    return Check("matches a finite-difference gradient", [make_case(seed)] + ([make_case(seed + 1)] if hidden else []))


def _tanh_checks(hidden):
    return [
        Check("2-D input", _shapes(1, [(3, 5)], _tanh_case, hidden, [(6, 2)])),
        Check("batch of 1 and a 4-D input", _shapes(11, [(1, 7), (2, 3, 4, 5)], _tanh_case, hidden, [(1, 1, 1, 3)])),
        _fd_check(_tanh_fd_case, 21, hidden),
    ]


TANH_BACKWARD = Exercise(
    "tanh_backward", "Tanh's updateGradInput, from the output",
    "fn(output, grad_output) -> grad_input",
    _tanh_checks,
    mistakes=[
        _sign_error(_tanh_grad),
        Mistake("You applied tanh' of the *input* to the output: the argument is y = tanh(x) already, "
                "so dy/dx = 1 - y**2, not 1 - tanh(y)**2.", wrong=lambda y, g: g * (1 - torch.tanh(y) ** 2)),
        Mistake("grad_output is missing: updateGradInput returns grad_output * dy/dx (the chain rule).",
                wrong=lambda y, g: 1 - y * y),
        Mistake("1 - y is not tanh's derivative: it is 1 - y**2.", wrong=lambda y, g: g * (1 - y)),
    ],
)


# ---- GELU, sigmoid form ----

def _gelu_s(x):
    return x * torch.sigmoid(1.702 * x)


def _gelu_s_grad(x, g):
    s = torch.sigmoid(1.702 * x)
    return g * (s + 1.702 * x * s * (1 - s))


def _gelu_case(shape, seed):
    x = randn(*shape, seed=seed, scale=2.0)
    g = randn(*shape, seed=seed + 100)
    return Case(f"random {tuple(shape)}", (x, g), _gelu_s_grad(x, g), ("grad_input",))


def _gelu_fd_case(seed):
    x, g = randn(2, 5, seed=seed, scale=2.0), randn(2, 5, seed=seed + 1)
    return Case("against central differences of x * sigmoid(1.702 x)", (x, g),
                numerical_gradient(_gelu_s, x, g), ("grad_input",))


def _gelu_wide_case():
    x, g = torch.linspace(-8, 8, 17, dtype=torch.float64)[None], randn(1, 17, seed=33)
    return Case("x in [-8, 8]", (x, g), _gelu_s_grad(x, g), ("grad_input",))


def _gelu_checks(hidden):
    return [
        Check("random input", _shapes(31, [(4, 6)], _gelu_case, hidden, [(3, 3, 3)])),
        Check("batch of 1, large |x|", [_gelu_wide_case()]),
        _fd_check(_gelu_fd_case, 35, hidden),
    ]


GELU_SIGMOID_BACKWARD = Exercise(
    "gelu_sigmoid_backward", "The derivative of GELU's sigmoid form x * sigmoid(1.702 x)",
    "fn(x, grad_output) -> grad_input",
    _gelu_checks,
    mistakes=[
        _sign_error(_gelu_s_grad),
        Mistake("The chain rule's factor 1.702 is missing: d/dx sigmoid(1.702 x) = 1.702 s (1 - s).",
                wrong=lambda x, g: g * (torch.sigmoid(1.702 * x) + x * torch.sigmoid(1.702 * x)
                                        * (1 - torch.sigmoid(1.702 * x)))),
        Mistake("The product rule is half done: d(x s)/dx = s + x ds/dx, and one of the two terms is missing.",
                test=lambda case, got: any(
                    torch.allclose(_float64(got), w)
                    for w in (case.args[1] * torch.sigmoid(1.702 * case.args[0]),
                              case.args[1] * 1.702 * case.args[0] * torch.sigmoid(1.702 * case.args[0])
                              * (1 - torch.sigmoid(1.702 * case.args[0]))))),
        Mistake("grad_output is missing: return grad_output * d gelu / dx.",
                wrong=lambda x, g: _gelu_s_grad(x, torch.ones_like(g))),
    ],
)


# ---- Linear's accGradParameters ----

def _linear_acc(x, g, gw, gb, scale):
    return gw + scale * g.t() @ x, gb + scale * g.sum(0)


def _linear_case(label, n, fan_in, fan_out, scale, seed):
    x, g = randn(n, fan_in, seed=seed), randn(n, fan_out, seed=seed + 1)
    gw, gb = randn(fan_out, fan_in, seed=seed + 2), randn(fan_out, seed=seed + 3)  # gradients already there
    return Case(label, (x, g, gw, gb, scale), _linear_acc(x, g, gw, gb, scale), ("grad_weight", "grad_bias"))


def _linear_twice_case(seed):
    case = _linear_case("two calls", 3, 4, 2, 0.25, seed)
    x, g, gw, gb, scale = case.args
    w1, b1 = _linear_acc(x, g, gw, gb, scale)
    return Case("called twice (scale 0.25): both calls must add up", case.args,
                _linear_acc(x, g, w1, b1, scale), case.names)


def _linear_checks(hidden):
    return [
        Check("scale 1, gradients already non-zero", [_linear_case("N=4, in=3, out=5, scale 1", 4, 3, 5, 1.0, 41)]
              + ([_linear_case("N=7, in=2, out=6, scale 1", 7, 2, 6, 1.0, 42)] if hidden else [])),
        Check("scale != 1", [_linear_case("N=4, in=3, out=5, scale 0.5", 4, 3, 5, 0.5, 43)]
              + ([_linear_case("N=2, in=5, out=3, scale -2", 2, 5, 3, -2.0, 44)] if hidden else [])),
        Check("batch of 1, square weight", [_linear_case("N=1, in=4, out=4, scale 0.5", 1, 4, 4, 0.5, 45),
                                            _linear_case("N=4, in=4, out=4, scale 1", 4, 4, 4, 1.0, 46)]),
        Check("accumulates over calls", [_linear_twice_case(47)]),
    ]


def _calls(case):
    """How many times a case calls the learner's function on the same tensors."""
    return 2 if case.label.startswith("called twice") else 1


class _LinearExercise(Exercise):
    def run(self, fn, case):
        x, g, gw, gb, scale = copy_args(case.args)
        for _ in range(_calls(case)):
            fn(x, g, gw, gb, scale)
        return gw, gb


def _linear_wrong(kind):
    """A Mistake's test: the answer is what ``kind``'s wrong update leaves after the case's calls."""
    def once(x, g, gw, gb, scale):
        w_step, b_step = scale * g.t() @ x, scale * g.sum(0)
        if kind == "overwrite":
            return w_step, b_step
        if kind == "no_scale":
            return gw + g.t() @ x, gb + g.sum(0)
        if kind == "transposed":
            return gw + scale * (x.t() @ g), gb + b_step
        if kind == "bias_axes":
            return gw + w_step, gb + scale * g.sum()
        if kind == "bias_mean":
            return gw + w_step, gb + scale * g.mean(0)
        if kind == "sign":
            return gw - w_step, gb - b_step
        raise AssertionError(kind)

    def test(case, got):
        x, g, gw, gb, scale = case.args
        for _ in range(_calls(case)):
            gw, gb = once(x, g, gw, gb, scale)
        return matches(got, (gw, gb))
    return test


def _unchanged(case, got):
    x, g, gw, gb, scale = case.args
    return torch.equal(got[0], gw) and torch.equal(got[1], gb)


def _accumulated_once(case, got):
    x, g, gw, gb, scale = case.args
    if _calls(case) == 1:
        return False
    once = _linear_acc(x, g, gw, gb, scale)
    step = (scale * g.t() @ x, scale * g.sum(0))
    return all(torch.allclose(a, b) for a, b in zip(got, once)) or all(
        torch.allclose(a, b) for a, b in zip(got, step))


LINEAR_ACC_GRAD_PARAMETERS = _LinearExercise(
    "linear_acc_grad_parameters", "Linear's accGradParameters: accumulate scale * dE/dW and scale * dE/db",
    "fn(input, grad_output, grad_weight, grad_bias, scale) -> None (updates grad_weight, grad_bias in place)",
    _linear_checks,
    mistakes=[
        Mistake("grad_weight and grad_bias were not changed: accumulate into the given tensors in place "
                "(grad_weight += ... or grad_weight.add_(...)); `grad_weight = ...` only rebinds a local name.",
                test=_unchanged),
        Mistake("Parameter gradient overwritten instead of accumulated: accGradParameters *adds* "
                "scale * dE/dW to what the tensors already hold (use +=, not =).",
                test=_accumulated_once),
        Mistake("Parameter gradient overwritten instead of accumulated: accGradParameters *adds* "
                "scale * dE/dW to what the tensors already hold (use +=, not =).", test=_linear_wrong("overwrite")),
        Mistake("`scale` ignored: accGradParameters adds scale * dE/dW, and scale is not always 1 "
                "(Torch7 passes the learning rate or 1/N through it).", test=_linear_wrong("no_scale")),
        Mistake("Transposed weight gradient: W has shape (out, in), so dE/dW = grad_output.T @ input, "
                "not input.T @ grad_output.", test=_linear_wrong("transposed")),
        Mistake("Bias gradient summed over the wrong axes: dE/db[j] sums grad_output[:, j] over the batch "
                "axis (dim 0) only.", test=_linear_wrong("bias_axes")),
        Mistake("Bias gradient averaged instead of summed: every sample adds its grad_output to dE/db.",
                test=_linear_wrong("bias_mean")),
        Mistake("Sign error: the gradients must be added (+= scale * ...), not subtracted; "
                "updateParameters is where the minus of gradient descent goes.", test=_linear_wrong("sign")),
    ],
)


# ---- softmax, forward and backward ----

def _softmax_case(label, x):
    return Case(label, (x,), torch.softmax(x, -1), ("output",))


def _softmax_checks(hidden):
    return [
        Check("rows of a 2-D input", [_softmax_case("random (4, 7)", randn(4, 7, seed=51))]
              + ([_softmax_case("random (9, 3)", randn(9, 3, seed=52))] if hidden else [])),
        Check("batch of 1 and a 3-D input", [_softmax_case("random (1, 5)", randn(1, 5, seed=53)),
                                             _softmax_case("random (2, 3, 6)", randn(2, 3, 6, seed=54))]),
        Check("large logits (about 1000)", [_softmax_case("logits 1000 + 50 * randn (3, 6)",
                                                          1000 + randn(3, 6, seed=55, scale=50.0))]
              + ([_softmax_case("logits -1000 + randn", -1000 + randn(2, 4, seed=56))] if hidden else [])),
    ]


_NO_MAX = ("Softmax without subtracting the max: exp(x) overflows for large logits (exp(710) is inf in "
           "float64) and inf/inf is NaN. Subtract each row's max first; the result does not change.")

SOFTMAX_FORWARD = Exercise(
    "softmax_forward", "A numerically stable softmax over the last dimension",
    "fn(x) -> output",
    _softmax_checks,
    mistakes=[
        Mistake(_NO_MAX, test=_finite),
        Mistake("Normalised over the wrong dimension: each row (the last dim) must sum to 1.",
                wrong=lambda x: torch.softmax(x, 0)),
        Mistake("Missing the division: softmax is exp(x - max) / sum(exp(x - max)).",
                wrong=lambda x: torch.exp(x - x.amax(-1, keepdim=True))),
    ],
)


def _softmax_grad(y, g):
    return y * (g - (g * y).sum(-1, keepdim=True))


def _softmax_back_case(label, shape, seed):
    y = torch.softmax(randn(*shape, seed=seed, scale=2.0), -1)
    g = randn(*shape, seed=seed + 1)
    return Case(label, (y, g), _softmax_grad(y, g), ("grad_input",))


def _softmax_fd_case(seed):
    x, g = randn(3, 4, seed=seed), randn(3, 4, seed=seed + 1)
    return Case("against central differences of softmax", (torch.softmax(x, -1), g),
                numerical_gradient(lambda t: torch.softmax(t, -1), x, g), ("grad_input",))


def _softmax_back_checks(hidden):
    return [
        Check("rows of a 2-D input", [_softmax_back_case("random (4, 6)", (4, 6), 61)]
              + ([_softmax_back_case("random (7, 2)", (7, 2), 62)] if hidden else [])),
        Check("batch of 1 and a 3-D input", [_softmax_back_case("random (1, 5)", (1, 5), 63),
                                             _softmax_back_case("random (2, 3, 4)", (2, 3, 4), 64)]),
        Check("matches a finite-difference gradient", [_softmax_fd_case(65)]),
    ]


SOFTMAX_BACKWARD = Exercise(
    "softmax_backward", "Softmax's updateGradInput, from the output",
    "fn(output, grad_output) -> grad_input",
    _softmax_back_checks,
    mistakes=[
        _sign_error(_softmax_grad),
        Mistake("Sign error in one term: grad_input = y * (g - sum(g * y)); dy_i/dx_j = -y_i y_j for i != j.",
                test=_matches_any(lambda y, g: y * (g + (g * y).sum(-1, keepdim=True)),
                                  lambda y, g: -y * (g + (g * y).sum(-1, keepdim=True)))),
        Mistake("Only the diagonal of the Jacobian: dy_i/dx_j = y_i (delta_ij - y_j), so every output "
                "feeds every input; grad_input = y * (g - sum(g * y)).", wrong=lambda y, g: y * (1 - y) * g),
        Mistake("The sum sum_j g_j y_j runs over the wrong dimension: it is over the softmax dim (the last).",
                wrong=lambda y, g: y * (g - (g * y).sum(0, keepdim=True))),
        Mistake("The sum term is missing: grad_input = y * (g - sum(g * y)), not y * g.",
                wrong=lambda y, g: y * g),
    ],
)


# ---- softmax + cross-entropy gradient ----

def _ce_grad(logits, target, reduction):
    x = logits.clone().requires_grad_(True)
    F.cross_entropy(x, target, reduction=reduction).backward()
    return x.grad


def _ce_case(label, n, c, reduction, seed, offset=0.0, scale=2.0):
    logits = offset + randn(n, c, seed=seed, scale=scale)
    target = torch.randint(0, c, (n,), generator=generator(seed + 1))
    return Case(label, (logits, target, reduction), _ce_grad(logits, target, reduction), ("grad_logits",))


def _ce_checks(hidden):
    return [
        Check("reduction 'mean'", [_ce_case("N=5, C=4, mean", 5, 4, "mean", 71)]
              + ([_ce_case("N=9, C=3, mean", 9, 3, "mean", 72)] if hidden else [])),
        Check("reduction 'sum'", [_ce_case("N=5, C=4, sum", 5, 4, "sum", 73)]),
        Check("batch of 1", [_ce_case("N=1, C=6, mean", 1, 6, "mean", 74)]),
        Check("large logits", [_ce_case("N=4, C=5, logits about 1000", 4, 5, "mean", 75, offset=1000, scale=80)]),
    ]


def _ce_wrong(kind):
    def wrong(logits, target, reduction):
        p = torch.softmax(logits, -1)
        onehot = F.one_hot(target, logits.shape[-1]).to(p.dtype)
        n = logits.shape[0]
        if kind == "sum_divided":
            return (p - onehot) / n
        if kind == "mean_not_divided":
            return p - onehot
        if kind == "sign":
            return -_ce_grad(logits, target, reduction)
        if kind == "no_onehot":
            return p / (n if reduction == "mean" else 1)
        raise AssertionError(kind)
    return wrong


CROSS_ENTROPY_BACKWARD = Exercise(
    "cross_entropy_backward", "The gradient of softmax + cross-entropy with respect to the logits",
    "fn(logits, target, reduction) -> grad_logits   (reduction: 'mean' or 'sum'; upstream gradient 1)",
    _ce_checks,
    mistakes=[
        Mistake(_NO_MAX, test=_finite),
        Mistake("Divided by N for reduction='sum': only 'mean' averages over the batch.",
                test=lambda case, got: case.args[2] == "sum" and torch.allclose(
                    _float64(got), _ce_wrong("sum_divided")(*case.args))),
        Mistake("Not divided by N for reduction='mean': the loss is the batch mean, so each row's "
                "gradient (softmax - onehot) is divided by N.",
                test=lambda case, got: case.args[2] == "mean" and case.args[0].shape[0] > 1 and torch.allclose(
                    _float64(got), _ce_wrong("mean_not_divided")(*case.args))),
        _sign_error(_ce_grad),
        Mistake("The one-hot term is missing: the gradient is softmax(x) - onehot(target).",
                wrong=_ce_wrong("no_onehot")),
    ],
)


# ---- global average pooling ----

def _pool_case(shape, seed):
    x = randn(*shape, seed=seed)
    return Case(f"input {tuple(shape)}", (x,), x.mean((-2, -1), keepdim=True), ("output",))


def _pooling_checks(make_case, seed):
    """The checks of both pooling exercises: the same input shapes, cases from ``make_case``, seeds from ``seed``."""

    def checks(hidden):
        return [
            Check("random (N, C, H, W)", _shapes(seed, [(2, 3, 4, 5)], make_case, hidden, [(3, 2, 6, 6)])),
            Check("odd sizes, batch of 1", _shapes(seed + 2, [(1, 5, 7, 3)], make_case, hidden, [(1, 1, 9, 2)])),
            Check("1x1 planes", [make_case((2, 3, 1, 1), seed + 4)]),
        ]

    return checks


GLOBAL_AVG_POOL_FORWARD = Exercise(
    "global_avg_pool_forward", "Global average pooling's updateOutput as loops",
    "fn(x) -> output   (x: (N, C, H, W); output: (N, C, 1, 1))",
    _pooling_checks(_pool_case, seed=81),
    mistakes=[
        Mistake("Summed instead of averaged: divide each plane's sum by H*W.",
                wrong=lambda x: x.sum((-2, -1), keepdim=True)),
        Mistake("Divided by one side only: the mean of an H x W plane divides by H*W.",
                test=lambda case, got: any(matches(got, case.args[0].sum((-2, -1), keepdim=True) / d)
                                           for d in case.args[0].shape[-2:])),
        Mistake("The output keeps the spatial dims as size 1: (N, C, 1, 1), not (N, C).",
                test=lambda case, got: tuple(np.shape(got)) == tuple(case.args[0].shape[:2])),
        Mistake("Averaged over the wrong axes: average over H and W (the last two), for each n and c.",
                test=lambda case, got: np.shape(got) != tuple(case.expected.shape)),
    ],
)


def _pool_back_case(shape, seed):
    n, c, h, w = shape
    g = randn(n, c, 1, 1, seed=seed)
    return Case(f"input {tuple(shape)}", (g, shape), (g / (h * w)).expand(shape).clone(), ("grad_input",))


GLOBAL_AVG_POOL_BACKWARD = Exercise(
    "global_avg_pool_backward", "Global average pooling's updateGradInput as loops",
    "fn(grad_output, input_shape) -> grad_input   (grad_output: (N, C, 1, 1))",
    _pooling_checks(_pool_back_case, seed=91),
    mistakes=[
        Mistake("Forgot to divide by H*W: each input was 1/(H*W) of the mean, so it gets grad_output / (H*W).",
                wrong=lambda g, shape: g.expand(tuple(shape)).clone()),
        Mistake("Divided by one side only: each input is 1/(H*W) of the mean.",
                test=lambda case, got: any(matches(got, case.args[0].expand(tuple(case.args[1])) / d)
                                           for d in case.args[1][-2:])),
        Mistake("Multiplied by H*W instead of dividing.",
                wrong=lambda g, shape: (g * shape[-1] * shape[-2]).expand(tuple(shape)).clone()),
    ],
)


# ---- reorg, darknet's order ----

def _darknet(x, s):
    n, c, h, w = x.shape
    flat = darknet_reorg_cpu(x.numpy(), w, h, c, n, s, forward=0)
    return torch.from_numpy(np.asarray(flat).reshape(n, c * s * s, h // s, w // s))


def _reorg_case(shape, s, seed):
    x = randn(*shape, seed=seed)
    return Case(f"input {tuple(shape)}, stride {s}", (x, s), _darknet(x, s), ("output",))


def _reorg_checks(hidden):
    return [
        Check("stride 2", [_reorg_case((1, 4, 4, 4), 2, 101)] + ([_reorg_case((2, 8, 2, 6), 2, 102)] if hidden else [])),
        Check("batch of 2, non-square", [_reorg_case((2, 8, 6, 4), 2, 103)]),
        Check("stride 3", [_reorg_case((1, 9, 6, 3), 3, 105)]),
    ]


REORG_DARKNET = Exercise(
    "reorg_darknet", "YOLOv2's reorg in darknet's order (reorg_cpu with forward=0, called with the input's dims)",
    "fn(x, stride) -> output   (x: (N, C, H, W) with C divisible by stride**2; output: (N, C*s*s, H/s, W/s))",
    _reorg_checks,
    mistakes=[
        Mistake("The wrong reorg order: you wrote space-to-depth ('dcr', TensorFlow's space_to_depth). "
                "Darknet reads the memory as (N, C/s^2, H*s, W*s) and applies space-to-depth to that.",
                wrong=lambda x, s: torch.from_numpy(reorg_forward_numpy(x.numpy(), s, "dcr"))),
        Mistake("The wrong reorg order: you wrote 'crd' (PyTorch's pixel_unshuffle). Darknet reads the memory "
                "as (N, C/s^2, H*s, W*s) and applies space-to-depth to that.",
                wrong=lambda x, s: F.pixel_unshuffle(x, s)),
    ],
)


# ---- the coordinate transform of bilinear resizing ----

MODES = ("half_pixel", "align_corners", "asymmetric")


def _coordinates(in_size, out_size, mode):
    """The source coordinate of every output pixel in ``mode``, as a float64 tensor."""
    return torch.tensor([source_coordinate(x, in_size, out_size, mode) for x in range(out_size)],
                        dtype=torch.float64)


def _coord_case(in_size, out_size, mode):
    return Case(f"mode {mode!r}, in {in_size} -> out {out_size}", (in_size, out_size, mode),
                _coordinates(in_size, out_size, mode), ("src",))


def _coord_call(fn, args):
    in_size, out_size, mode = args
    return [float(fn(x, in_size, out_size, mode)) for x in range(out_size)]


def _coord_checks(hidden):
    sizes = [(4, 8), (8, 3)] + ([(5, 7), (6, 6)] if hidden else [])
    return [
        Check("half_pixel (PyTorch align_corners=False, TF2)", [_coord_case(i, o, "half_pixel") for i, o in sizes]),
        Check("align_corners (PyTorch and TF1 align_corners=True)", [_coord_case(i, o, "align_corners")
                                                                     for i, o in sizes]),
        Check("asymmetric (TF1 / TFLite default)", [_coord_case(i, o, "asymmetric") for i, o in sizes]),
        Check("one output pixel", [_coord_case(5, 1, m) for m in MODES]),
    ]


def _other_mode(case, got):
    in_size, out_size, mode = case.args
    got = torch.tensor(got, dtype=torch.float64)
    return any(torch.allclose(got, _coordinates(in_size, out_size, other)) for other in MODES if other != mode)


def _inverted_scale(case, got):
    """The right formula with in_size and out_size swapped, in the case's mode or as x * out/in."""
    in_size, out_size, mode = case.args
    got = torch.tensor(got, dtype=torch.float64)
    return any(torch.allclose(got, torch.tensor([f(x) for x in range(out_size)], dtype=torch.float64))
               for f in (lambda x: source_coordinate(x, out_size, in_size, mode),
                         lambda x: x * out_size / in_size))


def _unclamped(case, got):
    in_size, out_size, mode = case.args
    raw = torch.tensor([(x + 0.5) * in_size / out_size - 0.5 for x in range(out_size)], dtype=torch.float64)
    return mode == "half_pixel" and torch.allclose(torch.tensor(got, dtype=torch.float64), raw)


RESIZE_SOURCE_COORDINATE = Exercise(
    "resize_source_coordinate", "The source coordinate of an output pixel, in the three coordinate modes",
    "fn(x_out, in_size, out_size, mode) -> float   (mode: 'half_pixel', 'align_corners' or 'asymmetric')",
    _coord_checks,
    call=_coord_call,
    mistakes=[
        Mistake("The wrong coordinate mode or align_corners: your answer is another mode's formula. "
                "half_pixel: (x + 0.5) * in/out - 0.5, clamped at 0; align_corners: x * (in - 1)/(out - 1); "
                "asymmetric: x * in/out.", test=_other_mode),
        Mistake("half_pixel must clamp at 0: the first output pixels of an upsample map to a negative "
                "coordinate (-0.25 at x2), which PyTorch clamps to 0.", test=_unclamped),
        Mistake("align_corners with one output pixel divides by out - 1 = 0: return 0 in that case.",
                raises=ZeroDivisionError),
        Mistake("The scale is inverted: it is in_size / out_size (input pixels per output pixel).",
                test=_inverted_scale),
    ],
)


EXERCISES = [TANH_BACKWARD, GELU_SIGMOID_BACKWARD, LINEAR_ACC_GRAD_PARAMETERS, GLOBAL_AVG_POOL_FORWARD,
             GLOBAL_AVG_POOL_BACKWARD, SOFTMAX_FORWARD, SOFTMAX_BACKWARD, CROSS_ENTROPY_BACKWARD,
             REORG_DARKNET, RESIZE_SOURCE_COORDINATE]
