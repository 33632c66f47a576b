"""labops.exercises.check: a right answer scores full marks, each classic mistake is named.

Every planted mistake below is a solution with one bug a learner makes; the
test asserts that ``check`` fails it and that its feedback contains the
sentence naming that bug (and not merely "wrong").
"""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from labops.exercises import EXERCISES, check, cuda, describe

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# ---- right answers (vectorized: the notebooks' solutions are loops) ----

def tanh_backward(y, g):
    return g * (1 - y * y)


def gelu_sigmoid_backward(x, g):
    s = torch.sigmoid(1.702 * x)
    return g * (s + 1.702 * x * s * (1 - s))


def linear_acc_grad_parameters(x, g, gw, gb, scale):
    gw += scale * g.t() @ x
    gb += scale * g.sum(0)


def global_avg_pool_forward(x):
    return x.sum((-2, -1), keepdim=True) / (x.shape[-2] * x.shape[-1])


def global_avg_pool_backward(g, shape):
    return (g / (shape[-2] * shape[-1])).expand(tuple(shape)).clone()


def softmax_forward(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def softmax_backward(y, g):
    return y * (g - (g * y).sum(-1, keepdim=True))


def cross_entropy_backward(logits, target, reduction):
    grad = softmax_forward(logits) - F.one_hot(target, logits.shape[-1]).double()
    return grad / logits.shape[0] if reduction == "mean" else grad


def reorg_darknet(x, s):
    n, c, h, w = x.shape
    big = x.reshape(n, c // (s * s), h * s, w * s)  # darknet reads the memory with these dims
    y = big.reshape(n, c // (s * s), h, s, w, s).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * s * s, h // s, w // s)


def resize_source_coordinate(x, in_size, out_size, mode):
    if mode == "align_corners":
        return x * (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if mode == "asymmetric":
        return x * in_size / out_size
    return max((x + 0.5) * in_size / out_size - 0.5, 0.0)


def conv_output_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def im2col(x, k, s, p, d):
    return F.unfold(x, k, dilation=d, padding=p, stride=s)


def col2im(cols, size, k, s, p, d):
    return F.fold(cols, size, k, dilation=d, padding=p, stride=s)


def depthwise_backward_weight(x, g, wshape, s, p, d):
    w = torch.zeros(wshape, dtype=torch.float64, requires_grad=True)
    F.conv2d(x, w, None, s, p, d, groups=x.shape[1]).backward(g)
    return w.grad


grid_stride_loop = """
for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < y_numel;
     i += (long long)blockDim.x * gridDim.x)
  y[i] = alpha[0] * x[i];
"""


RIGHT = {name: fn for name, fn in globals().items() if name in EXERCISES}

PRELU_SOURCE = r"""
at::Tensor prelu_forward(const at::Tensor& x, const at::Tensor& weight) {
  at::Tensor xc = x.contiguous(), y = at::empty_like(xc);
  const int64_t C = x.size(1), inner = x.numel() / (x.size(0) * C);
  const double* px = xc.data_ptr<double>();
  const double* pw = weight.data_ptr<double>();
  double* py = y.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double a = pw[(i / inner) % C];
    py[i] = px[i] > 0 ? px[i] : a * px[i];
  }
  return y;
}

std::tuple<at::Tensor, at::Tensor> prelu_backward(const at::Tensor& grad_y, const at::Tensor& x,
                                                  const at::Tensor& weight) {
  at::Tensor xc = x.contiguous(), gc = grad_y.contiguous();
  at::Tensor grad_x = at::empty_like(xc), grad_weight = at::zeros_like(weight);
  const int64_t C = x.size(1), inner = x.numel() / (x.size(0) * C);
  const double* px = xc.data_ptr<double>();
  const double* pg = gc.data_ptr<double>();
  const double* pw = weight.data_ptr<double>();
  double* pgx = grad_x.data_ptr<double>();
  double* pgw = grad_weight.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / inner) % C;
    pgx[i] = px[i] > 0 ? pg[i] : pw[c] * pg[i];
    if (px[i] <= 0) pgw[c] += SIGN pg[i] * px[i];
  }
  return {grad_x, grad_weight};
}
"""


def test_every_exercise_has_a_right_answer_here():
    # The Triton exercises' right answers are triton_corpus.SOLUTIONS (tests/test_triton_exercises.py).
    from labops.exercises import triton_kernels

    triton_ids = {ex.id for ex in triton_kernels.EXERCISES}
    assert set(RIGHT) | {"prelu_op"} | set(cuda.SOLUTIONS) | triton_ids == set(EXERCISES)
    assert len(EXERCISES) >= 12


def test_the_exercises_import_and_describe_without_triton():
    # Triton is an extra: only running a triton_* kernel needs it (triton_kernels imports it then).
    import os
    import subprocess
    import sys

    code = ("import sys; sys.modules['triton'] = None; import labops.exercises as e; print(e.describe('triton_gelu'))\n"
            "try:\n    e.triton_submission(print, print)\nexcept ImportError as exc:\n    print(exc)")
    root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("triton_gelu: A Triton kernel") and "pip install triton" in done.stdout


def test_every_exercise_is_graded_once_for_what_its_checks_are_worth():
    # The course (notebooks/exercises/source/exNN_*) grades each exercise in one check cell. Its nbgrader
    # points must be the check's max_score: the score written under the cell is out of max_score, and
    # nbgrader's autograde fails on a score above the cell's points.
    nbformat = pytest.importorskip("nbformat")
    from labops.exercises.grading import check_call

    source = Path(__file__).resolve().parent.parent / "notebooks" / "exercises" / "source"
    graded = {}
    for path in sorted(source.glob("*/*.ipynb")):
        for cell in nbformat.read(path, 4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
                exercise = (check_call(cell.source) or (None,))[0]
                assert exercise not in graded, f"{exercise} is graded in {graded[exercise][0]} and {path.name}"
                graded[exercise] = (path.name, meta.get("points"))
    assert set(graded) == set(EXERCISES)
    for exercise, (notebook, points) in graded.items():
        max_score = sum(c.points for c in EXERCISES[exercise].make_checks(False))
        assert points == max_score, f"{notebook}: {exercise}'s cell is worth {points}, its checks {max_score}"


@pytest.mark.parametrize("name", sorted(RIGHT))
@pytest.mark.parametrize("hidden", [False, True])
def test_right_answer_gets_full_marks(name, hidden, capsys):
    result = check(name, RIGHT[name], hidden=hidden)
    out = capsys.readouterr().out
    assert result.passed, out
    assert result.score == result.max_score >= 3
    assert "all checks pass" in out and "FAIL" not in out


def test_not_written_yet_scores_zero_and_says_so(capsys):
    def todo(*args):
        raise NotImplementedError()

    result = check("softmax_backward", todo)
    assert (result.passed, result.score) == (False, 0.0)
    assert "is not written yet" in result.messages[1]


# (exercise, a solution with one classic mistake, words the feedback must contain)
PLANTED = [
    ("tanh_backward", lambda y, g: -g * (1 - y * y), "Sign error"),
    ("tanh_backward", lambda y, g: g * (1 - torch.tanh(y) ** 2), "tanh' of the *input*"),
    ("gelu_sigmoid_backward", lambda x, g: -gelu_sigmoid_backward(x, g), "Sign error"),
    ("gelu_sigmoid_backward",
     lambda x, g: g * (torch.sigmoid(1.702 * x) + x * torch.sigmoid(1.702 * x) * (1 - torch.sigmoid(1.702 * x))),
     "factor 1.702"),
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: (gw.copy_(s * g.t() @ x), gb.copy_(s * g.sum(0))),
     "overwritten instead of accumulated"),
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: (gw.add_(g.t() @ x), gb.add_(g.sum(0))),
     "`scale` ignored"),
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: (gw.add_(s * (x.t() @ g)), gb.add_(s * g.sum(0))),
     "Transposed weight gradient"),
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: (gw.add_(s * g.t() @ x), gb.add_(s * g.sum())),
     "Bias gradient summed over the wrong axes"),
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: (gw.sub_(s * g.t() @ x), gb.sub_(s * g.sum(0))),
     "Sign error"),
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: None, "were not changed"),
    ("global_avg_pool_forward", lambda x: x.sum((-2, -1), keepdim=True), "Summed instead of averaged"),
    ("global_avg_pool_forward", lambda x: x.mean((-2, -1)), "(N, C, 1, 1)"),
    ("global_avg_pool_backward", lambda g, shape: g.expand(tuple(shape)).clone(), "Forgot to divide by H*W"),
    ("softmax_forward", lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), "without subtracting the max"),
    ("softmax_backward", lambda y, g: y * (1 - y) * g, "Only the diagonal"),
    ("softmax_backward", lambda y, g: -softmax_backward(y, g), "Sign error"),
    ("cross_entropy_backward", lambda lg, t, r: (softmax_forward(lg) - F.one_hot(t, lg.shape[-1]).double())
     / lg.shape[0], "Divided by N for reduction='sum'"),
    ("cross_entropy_backward", lambda lg, t, r: softmax_forward(lg) - F.one_hot(t, lg.shape[-1]).double(),
     "Not divided by N for reduction='mean'"),
    ("cross_entropy_backward", lambda lg, t, r: (torch.exp(lg) / torch.exp(lg).sum(-1, keepdim=True)
                                                - F.one_hot(t, lg.shape[-1]).double())
     / (lg.shape[0] if r == "mean" else 1), "without subtracting the max"),
    ("reorg_darknet", lambda x, s: F.pixel_unshuffle(x, s), "wrong reorg order: you wrote 'crd'"),
    ("reorg_darknet", lambda x, s: x.reshape(x.shape[0], x.shape[1], x.shape[2] // s, s, x.shape[3] // s, s)
     .permute(0, 3, 5, 1, 2, 4).reshape(x.shape[0], -1, x.shape[2] // s, x.shape[3] // s),
     "you wrote space-to-depth ('dcr'"),
    ("resize_source_coordinate", lambda x, i, o, m: resize_source_coordinate(
        x, i, o, "half_pixel" if m == "asymmetric" else m), "wrong coordinate mode"),
    ("resize_source_coordinate", lambda x, i, o, m: x * (i - 1) / (o - 1) if m == "align_corners"
     else resize_source_coordinate(x, i, o, m), "divides by out - 1 = 0"),
    ("resize_source_coordinate", lambda x, i, o, m: (x + 0.5) * i / o - 0.5 if m == "half_pixel"
     else resize_source_coordinate(x, i, o, m), "must clamp at 0"),
    ("conv_output_size", lambda n, k, s, p, d: (n + 2 * p - d * (k - 1) - 1) // s, "Off-by-one output size"),
    ("conv_output_size", lambda n, k, s, p, d: (n + 2 * p - k) // s + 1, "Dilation ignored"),
    ("conv_output_size", lambda n, k, s, p, d: (n + 2 * p - d * (k - 1) - 1) / s + 1, "Returns a float"),
    ("im2col", lambda x, k, s, p, d: F.unfold(x, k, padding=p, stride=s)[..., :(
        F.unfold(x, k, dilation=d, padding=p, stride=s).shape[-1])] if d == (1, 1) else
     _im2col_undilated(x, k, s, p, d), "Dilation ignored"),
    ("im2col", lambda x, k, s, p, d: _unfold_flipped(x, k, s, p, d), "Flipped kernel"),
    ("im2col", lambda x, k, s, p, d: _unfold_with_size(x, k, s, p, d, extra=1), "Off-by-one output size"),
    ("col2im", lambda c, size, k, s, p, d: _fold_overwrite(c, size, k, s, p, d), "must *sum* overlapping"),
    ("depthwise_backward_weight", lambda x, g, ws, s, p, d: depthwise_backward_weight(x, g, ws, s, p, d)
     .flip(-2, -1), "Flipped weight"),
    ("depthwise_backward_weight", lambda x, g, ws, s, p, d: depthwise_backward_weight(
        x, g, ws, s, p, (1, 1)) if d == (1, 1) else _dw_undilated(x, g, ws, s, p, d), "Dilation ignored"),
    # more of each exercise's mistakes
    ("tanh_backward", lambda y, g: 1 - y * y, "grad_output is missing"),
    ("tanh_backward", lambda y, g: g * (1 - y), "1 - y is not tanh's derivative"),
    ("gelu_sigmoid_backward", lambda x, g: g * torch.sigmoid(1.702 * x), "product rule is half done"),
    ("gelu_sigmoid_backward", lambda x, g: gelu_sigmoid_backward(x, torch.ones_like(g)), "grad_output is missing"),
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: (gw.add_(s * g.t() @ x), gb.add_(s * g.mean(0))),
     "Bias gradient averaged instead of summed"),
    ("softmax_forward", lambda x: _softmax_over(x, 0), "Normalised over the wrong dimension"),
    ("softmax_forward", lambda x: torch.exp(x - x.amax(-1, keepdim=True)), "Missing the division"),
    ("softmax_backward", lambda y, g: y * (g + (g * y).sum(-1, keepdim=True)), "Sign error in one term"),
    ("softmax_backward", lambda y, g: -y * (g + (g * y).sum(-1, keepdim=True)), "Sign error in one term"),
    ("softmax_backward", lambda y, g: y * (g - (g * y).sum(0, keepdim=True)), "runs over the wrong dimension"),
    ("softmax_backward", lambda y, g: y * g, "The sum term is missing"),
    ("cross_entropy_backward", lambda lg, t, r: -cross_entropy_backward(lg, t, r), "Sign error"),
    ("cross_entropy_backward", lambda lg, t, r: softmax_forward(lg) / (lg.shape[0] if r == "mean" else 1),
     "The one-hot term is missing"),
    ("global_avg_pool_forward", lambda x: x.sum((-2, -1), keepdim=True) / x.shape[-1], "Divided by one side only"),
    ("global_avg_pool_forward", lambda x: x.mean((0, 1), keepdim=True), "Averaged over the wrong axes"),
    ("global_avg_pool_backward", lambda g, shape: (g / shape[-1]).expand(tuple(shape)).clone(),
     "Divided by one side only"),
    ("global_avg_pool_backward", lambda g, shape: (g * shape[-2] * shape[-1]).expand(tuple(shape)).clone(),
     "Multiplied by H*W instead of dividing"),
    ("resize_source_coordinate", lambda x, i, o, m: resize_source_coordinate(x, o, i, m), "The scale is inverted"),
    ("conv_output_size", lambda n, k, s, p, d: math.ceil((n + 2 * p - d * (k - 1) - 1) / s) + 1, "Rounded up"),
    ("conv_output_size", lambda n, k, s, p, d: (n + p - d * (k - 1) - 1) // s + 1, "Padding counted once"),
    ("im2col", lambda x, k, s, p, d: _unfold_channel_innermost(x, k, s, p, d), "Rows in the wrong order"),
    # ih = oh * stride + kh * dilation: the windows start at the top-left of the image, not of the padding
    ("im2col", lambda x, k, s, p, d: F.unfold(F.pad(x, (0, 2 * p[1], 0, 2 * p[0])), k, dilation=d, stride=s),
     "Padding ignored in the index"),
    ("col2im", lambda c, size, k, s, p, d: _fold_undilated(c, size, k, s, p, d), "Dilation ignored"),
    ("col2im", lambda c, size, k, s, p, d: F.fold(_rows_flipped(c, k), size, k, dilation=d, padding=p, stride=s),
     "Flipped kernel"),
    ("col2im", lambda c, size, k, s, p, d: F.fold(_rows_channel_innermost(c, k), size, k, dilation=d, padding=p,
                                                  stride=s), "Rows in the wrong order"),
    ("col2im", lambda c, size, k, s, p, d: F.fold(c, (size[0] + 2 * p[0], size[1] + 2 * p[1]), k, dilation=d,
                                                  stride=s)[..., :size[0], :size[1]], "Padding ignored in the index"),
    # output channel oc reads input channel oc % C
    ("depthwise_backward_weight", lambda x, g, ws, s, p, d: depthwise_backward_weight(
        x[:, [oc % x.shape[1] for oc in range(ws[0])]], g, ws, s, p, d), "maps output channel oc to input channel"),
    ("depthwise_backward_weight", lambda x, g, ws, s, p, d: depthwise_backward_weight(x[:1], g[:1], ws, s, p, d),
     "Not summed over the batch"),
    # a loop over n that assigns: the last image's gradient is left
    ("depthwise_backward_weight", lambda x, g, ws, s, p, d: depthwise_backward_weight(x[-1:], g[-1:], ws, s, p, d),
     "Not summed over the batch"),
]

# Named by a later check only: a transposed weight gradient of a non-square Linear raises a shape error
# before any answer can be compared (the "square weight" check is there to name it).
NAMED_LATER = {("linear_acc_grad_parameters", "Transposed weight gradient")}


def _softmax_over(x, dim):
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _im2col_undilated(x, k, s, p, d):
    # the right output size, but every tap read as if dilation were 1
    from labops.exercises.convolution import _im2col_variant

    return _im2col_variant(x, k, s, p, d, tap_dilation=(1, 1))


def _unfold_flipped(x, k, s, p, d):
    return _rows_flipped(F.unfold(x, k, dilation=d, padding=p, stride=s), k)


def _rows_flipped(cols, k):
    """Row (c, kh, kw) swapped with row (c, kH-1-kh, kW-1-kw)."""
    n, rows, L = cols.shape
    return cols.reshape(n, -1, k[0], k[1], L).flip(2, 3).reshape(n, rows, L)


def _unfold_channel_innermost(x, k, s, p, d):
    """Rows ordered (kh, kw, c): what a learner who puts the channel loop innermost writes."""
    cols = F.unfold(x, k, dilation=d, padding=p, stride=s)
    n, rows, L = cols.shape
    return cols.reshape(n, -1, k[0] * k[1], L).transpose(1, 2).reshape(n, rows, L)


def _rows_channel_innermost(cols, k):
    """col2im reading row (kh * kW + kw) * C + c as the entry of (c, kh, kw)."""
    n, rows, L = cols.shape
    return cols.reshape(n, k[0] * k[1], -1, L).transpose(1, 2).reshape(n, rows, L)


def _unfold_with_size(x, k, s, p, d, extra):
    cols = F.unfold(x, k, dilation=d, padding=p, stride=s)
    return torch.cat([cols, cols[..., :extra]], -1)


def _fold_undilated(cols, size, k, s, p, d):
    # the right number of windows, but every tap placed as if dilation were 1
    from labops.exercises.convolution import _col2im_variant

    return _col2im_variant(cols, size, k, s, p, d, tap_dilation=(1, 1))


def _fold_overwrite(cols, size, k, s, p, d):
    from labops.exercises.convolution import _col2im_variant

    return _col2im_variant(cols, size, k, s, p, d, accumulate=False)


def _dw_undilated(x, g, ws, s, p, d):
    from labops.exercises.convolution import _dw_variant

    return _dw_variant(x, g, ws, s, p, d, tap_dilation=(1, 1))


@pytest.mark.parametrize("name, wrong, words", PLANTED, ids=[f"{n}-{w[:24]}" for n, _, w in PLANTED])
def test_planted_mistake_is_named(name, wrong, words):
    result = check(name, wrong, show=False)
    feedback = "\n".join(result.messages)
    assert not result.passed and result.score < result.max_score
    assert words in feedback, feedback
    if (name, words) not in NAMED_LATER:  # the first check that fails names it, not only a later one
        first_failure = next(m for m in result.messages if m.startswith("FAIL"))
        assert words in first_failure, feedback


# Mistakes that fail several checks, each of which must name it.
NAMED_IN_EVERY_FAILING_CHECK = [
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: (gw.add_(g.t() @ x), gb.add_(g.sum(0))),
     "`scale` ignored"),
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: (gw.sub_(s * g.t() @ x), gb.sub_(s * g.sum(0))),
     "Sign error"),
    ("linear_acc_grad_parameters", lambda x, g, gw, gb, s: (gw.add_(s * g.t() @ x), gb.add_(s * g.mean(0))),
     "Bias gradient averaged instead of summed"),
    ("softmax_backward", lambda y, g: y * (g + (g * y).sum(-1, keepdim=True)), "Sign error in one term"),
    ("resize_source_coordinate", lambda x, i, o, m: resize_source_coordinate(x, o, i, m)
     if o > 1 else resize_source_coordinate(x, i, o, m), "The scale is inverted"),
    ("depthwise_backward_weight", lambda x, g, ws, s, p, d: depthwise_backward_weight(x[-1:], g[-1:], ws, s, p, d),
     "Not summed over the batch"),
]


@pytest.mark.parametrize("name, wrong, words", NAMED_IN_EVERY_FAILING_CHECK,
                         ids=[f"{n}-{w[:24]}" for n, _, w in NAMED_IN_EVERY_FAILING_CHECK])
def test_mistake_is_named_in_every_failing_check(name, wrong, words):
    # e.g. the Linear check that calls the function twice, and every coordinate mode
    result = check(name, wrong, show=False)
    failures = [m for m in result.messages if m.startswith("FAIL")]
    assert len(failures) >= 2 and all(words in m for m in failures), "\n".join(result.messages)


def test_half_right_gets_partial_credit_with_its_reason():
    # Accumulates the right gradients, but forgets `scale`: right only where scale is 1.
    def half_right(x, g, gw, gb, scale):
        gw += g.t() @ x
        gb += g.sum(0)

    result = check("linear_acc_grad_parameters", half_right, show=False)
    assert 0 < result.score < result.max_score
    assert any("`scale` ignored" in m for m in result.messages)


# ---- the grid-stride kernel: a CUDA C body, run and recorded by labops.rtc ----

_KERNEL_ONE_PER_THREAD = """
const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
if (i < y_numel) y[i] = alpha[0] * x[i];
"""
_KERNEL_BLOCK_STRIDE = grid_stride_loop.replace("(long long)blockDim.x * gridDim.x", "blockDim.x")  # no gridDim.x
_KERNEL_PAST_THE_END = """
for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i <= y_numel;
     i += (long long)blockDim.x * gridDim.x)
  y[i] = i < y_numel ? alpha[0] * x[i] : 0.0;
"""


@pytest.mark.parametrize("kernel, words", [
    (_KERNEL_ONE_PER_THREAD, "skips elements"),
    (_KERNEL_BLOCK_STRIDE, "repeats elements"),
    (_KERNEL_PAST_THE_END, "reads or writes past the end"),
])
def test_grid_stride_mistakes_are_named_and_drawn(kernel, words, capsys):
    result = check("grid_stride_loop", kernel)
    out = " ".join(capsys.readouterr().out.split())
    assert not result.passed and words in out, out
    if kernel is _KERNEL_PAST_THE_END:  # its first case raised: there is no map to draw, only the sentence
        assert result.figure is None and "wrote y[" in out
        return
    assert result.figure is not None
    title = result.figure.axes[0].get_title()
    assert "never written" in title


_KERNEL_CHUNKED = """
// every element once, but each thread takes a contiguous chunk: right values, not a grid-stride loop
const long long threads = (long long)blockDim.x * gridDim.x, t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
const long long chunk = (y_numel + threads - 1) / threads;
for (long long i = t * chunk; i < y_numel && i < (t + 1) * chunk; ++i) y[i] = alpha[0] * x[i];
"""


def test_grid_stride_order_is_checked_not_only_the_values():
    result = check("grid_stride_loop", _KERNEL_CHUNKED, show=False)
    text = " ".join(" ".join(result.messages).split())
    assert not result.passed and "not in grid-stride order" in text, text
    assert "thread that wrote the element" in text


def test_grid_stride_figure_marks_missed_and_repeated_elements():
    result = check("grid_stride_loop", _KERNEL_ONE_PER_THREAD, show=False)
    texts = [t.get_text() for t in result.figure.axes[0].texts]
    assert sum(t == "none" for t in texts) == 50 - 16  # 2 blocks x 8 threads cover 16 of 50
    result = check("grid_stride_loop", _KERNEL_BLOCK_STRIDE, show=False)
    texts = [t.get_text() for t in result.figure.axes[0].texts]
    assert any(t.endswith("x2") for t in texts)


def test_grid_stride_takes_a_body_and_says_so():
    with pytest.raises(TypeError, match="grid_stride_loop takes your kernel's body, a str of CUDA C"):
        check("grid_stride_loop", lambda ctx, x, y, n, alpha: None, show=False)
    result = check("grid_stride_loop", "y[0] = ;", show=False)
    assert result.score == 0 and "CompileError" in " ".join(result.messages)


# ---- the compiled op ----

@pytest.fixture(scope="module")
def prelu_right():
    return check("prelu_op", lambda: PRELU_SOURCE.replace("SIGN", "+"), show=False)


def test_compiled_op_right_answer_passes_the_jacobian_and_compile_checks(prelu_right):
    assert prelu_right.passed, prelu_right.messages
    assert any("PASS autograd: the Jacobian" in m for m in prelu_right.messages)
    assert any("PASS torch.compile and no input changed" in m for m in prelu_right.messages)


def test_compiled_op_that_writes_its_input_is_caught():
    mutates = PRELU_SOURCE.replace("SIGN", "+").replace("  return y;", "  x.mul_(2);\n  return y;", 1)
    result = check("prelu_op", lambda: mutates, show=False)
    text = " ".join(" ".join(result.messages).split())
    assert not result.passed and "x after the calls" in text, text


def test_compiled_op_sign_error_is_named():
    result = check("prelu_op", lambda: PRELU_SOURCE.replace("SIGN", "-"), show=False)
    assert not result.passed
    assert any("Sign error in grad_weight" in m for m in result.messages), result.messages


def test_compiled_op_compile_error_cites_the_learners_line():
    source = PRELU_SOURCE.replace("SIGN", "+").replace("return y;", "return y")
    result = check("prelu_op", lambda: source, show=False)
    assert result.score == 0
    line = 1 + source.splitlines().index("  return y")
    text = "\n".join(result.messages)
    assert f"your_code.cpp:{line + 1}" in text or f"your_code.cpp:{line}" in text, text


def test_compiled_op_segfault_is_feedback_not_a_crash():
    crash = PRELU_SOURCE.replace("SIGN", "+").replace("py[i] = px[i] > 0", "py[i + (int64_t(1) << 40)] = px[i] > 0")
    result = check("prelu_op", lambda: crash, show=False)
    assert result.score == 0
    assert any("segmentation fault" in m for m in result.messages), result.messages


def test_nothing_reaches_stderr_inside_a_check(capfd):
    # nbgrader scores a graded cell 0 if it writes to stderr: warnings and C-level writes become notes.
    import os
    import sys
    import warnings

    def noisy(y, g):
        warnings.warn("deprecated thing", DeprecationWarning)
        print("python stderr", file=sys.stderr)
        os.write(2, b"fd 2 stderr\n")
        return tanh_backward(y, g)

    result = check("tanh_backward", noisy)
    out, err = capfd.readouterr()
    assert result.passed and err == ""
    assert "a warning was raised: DeprecationWarning: deprecated thing" in out
    assert "fd 2 stderr" in out and "python stderr" in out


def test_describe_and_bad_id():
    assert "fn(output, grad_output) -> grad_input" in describe("tanh_backward")
    with pytest.raises(ValueError, match="exercise_id must be one of"):
        check("tanh_backwards", tanh_backward)


# ---- Torch7's training loop (notebook 10): the learner trains a Torch7-style Sequential in place ----

def train_steps(model, inputs, targets, lr, steps):
    for _ in range(steps):
        model.zeroGradParameters()
        output = model.forward(inputs)
        model.backward(inputs, 2 * (output - targets) / output.numel())
        model.updateParameters(lr)


RIGHT["train_steps"] = train_steps


def _train_with(*, zero="before", loss_grad=lambda y, t: 2 * (y - t) / y.numel(), scale=None, rate=None,
                update="all", extra_steps=0):
    """train_steps with one planted change: when the gradients are cleared, the loss gradient, backward's
    scale, the rate given to updateParameters, whether it is called, how many steps run."""
    def fn(model, inputs, targets, lr, steps):
        for _ in range(steps + extra_steps):
            if zero == "before":
                model.zeroGradParameters()
            output = model.forward(inputs)
            model.backward(inputs, loss_grad(output, targets), *([] if scale is None else [scale(lr)]))
            if update != "none":
                model.updateParameters(lr if rate is None else rate(lr))
            if zero == "after":
                model.zeroGradParameters()
    return fn


TRAINING_MISTAKES = [
    (_train_with(zero="never"), "zeroGradParameters is missing"),
    (_train_with(zero="after"), "cleared after updateParameters"),
    (_train_with(rate=lambda lr: -lr), "The step climbs the loss"),
    (_train_with(loss_grad=lambda y, t: 2 * (t - y) / y.numel()), "The step climbs the loss"),
    (_train_with(scale=lambda lr: lr), "applied twice (lr**2 per step)"),
    (_train_with(update="none"), "The weights did not change"),
    (_train_with(loss_grad=lambda y, t: 2 * (y - t)), "The MSE gradient is not averaged"),
    (_train_with(loss_grad=lambda y, t: 2 * (y - t) / y.shape[0]), "divided by N only"),
    (_train_with(loss_grad=lambda y, t: (y - t) / y.numel()), "The factor 2 of the MSE gradient is missing"),
    (_train_with(extra_steps=1), "One step too many or too few"),
]


@pytest.mark.parametrize("hidden", [False, True])
def test_training_loop_right_answer_gets_full_marks(hidden, capsys):
    result = check("train_steps", train_steps, hidden=hidden)
    assert result.passed and result.score == result.max_score == 4, capsys.readouterr().out


@pytest.mark.parametrize("wrong, words", TRAINING_MISTAKES, ids=[w[:32] for _, w in TRAINING_MISTAKES])
def test_training_loop_mistake_is_named_in_the_first_failing_check(wrong, words):
    result = check("train_steps", wrong, show=False)
    feedback = "\n".join(result.messages)
    assert result.score == 0, feedback
    first_failure = next(m for m in result.messages if m.startswith("FAIL"))
    assert words in first_failure, feedback


def test_training_loop_only_last_layer_updated_is_named():
    def last_only(model, inputs, targets, lr, steps):
        for _ in range(steps):
            model.zeroGradParameters()
            output = model.forward(inputs)
            model.backward(inputs, 2 * (output - targets) / output.numel())
            model.modules[-1].updateParameters(lr)

    result = check("train_steps", last_only, show=False)
    assert result.score == 0 and "Only the last Linear layer was updated" in result.messages[1], result.messages


def test_training_loop_scale_as_the_rate_with_an_update_of_1_is_the_same_loop():
    # backward(..., scale=lr) then updateParameters(1) takes the step lr * gradient: not a mistake.
    result = check("train_steps", _train_with(scale=lambda lr: lr, rate=lambda lr: 1.0), hidden=True, show=False)
    assert result.passed, result.messages


def test_training_loop_a_wrong_answer_cannot_pass():
    from labops.exercises.training import TRAIN_STEPS

    def nudged(model, inputs, targets, lr, steps):  # right, then every weight moved by one part in 1e6
        train_steps(model, inputs, targets, lr, steps)
        for w in model.parameters()[0]:
            w.mul_(1 + 1e-6)

    def returns_other_weights(model, inputs, targets, lr, steps):  # the check reads the model, not this
        return tuple(w + 1 for w in model.parameters()[0])

    for wrong in (nudged, returns_other_weights, _train_with(zero="never", loss_grad=lambda y, t: 2 * (y - t))):
        result = check("train_steps", wrong, hidden=True, show=False)
        assert result.score == 0 and not result.passed, result.messages
    # the learner's model never holds an expected answer: only the case's inputs
    case = TRAIN_STEPS.make_checks(False)[0].cases[0]
    seen = []
    TRAIN_STEPS.run(lambda model, *rest: seen.append((model, rest)), case)
    model, rest = seen[0]
    held = [*model.parameters()[0], *model.parameters()[1], *rest[:2]]
    assert not any(torch.equal(h, e) for h in held if torch.is_tensor(h) for e in case.expected if h.shape == e.shape)


def test_training_loop_oracle_is_autograd_and_the_model_keeps_the_torch7_contract():
    from labops.exercises.training import TRAIN_STEPS, torch7_model

    case = TRAIN_STEPS.make_checks(True)[2].cases[0]
    params, grads, inputs, targets, lr, steps = case.args
    model = torch7_model([p.clone() for p in params], [g.clone() for g in grads])
    assert [type(m).__name__ for m in model.modules] == ["Linear", "Tanh", "Linear", "Tanh", "Linear"]
    assert all(bool(g.abs().min() > 0) for g in model.parameters()[1])  # leftover gradients, never zeros
    # accGradParameters adds scale * dE/dW, as labops.torch7's does: twice with 0.5 is once with 1
    model.zeroGradParameters()
    y = model.forward(inputs)
    g = 2 * (y - targets) / y.numel()
    model.backward(inputs, g, 0.5)
    model.accGradParameters(inputs, g, 0.5)
    leaves = [p.clone().requires_grad_(True) for p in params]
    x = inputs
    for k in range(0, len(leaves), 2):
        x = x @ leaves[k].t() + leaves[k + 1]
        x = torch.tanh(x) if k + 2 < len(leaves) else x
    expected = torch.autograd.grad(((x - targets) ** 2).mean(), leaves)
    for got, want in zip(model.parameters()[1], expected):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


# ---- the inputs of a test, given to GELU ops with planted bugs (notebook 09's exercise) ----

def _inputs_missing(name):
    """Inputs that expose every planted bug but ``name``'s."""
    g = torch.Generator().manual_seed(5)
    ordinary = 3 * torch.randn(3, 5, generator=g, dtype=torch.float64)
    large = torch.tensor([[40.0, -40.0, 40.0]], dtype=torch.float64)
    return {
        "right only at 0": [torch.zeros(3, 5, dtype=torch.float64)],  # exposes only the flattened result
        "tanh approximation": [large],  # the tanh form is exact at 0 and far out; nothing else is right there
        "odd tail forgotten": [ordinary[:2, :4].contiguous(), large[:, :2].contiguous()],  # even sizes only
        "overflow past |x| = 20": [ordinary],  # nothing large
        "result flattened": [ordinary.reshape(-1), large.reshape(-1)],  # 1-D only
    }[name]


def gelu_test_inputs():
    g = torch.Generator().manual_seed(0)
    return [3 * torch.randn(3, 5, generator=g, dtype=torch.float64),
            torch.tensor([-40.0, 0.5, 40.0], dtype=torch.float64)]


RIGHT["gelu_test_inputs"] = gelu_test_inputs


def test_test_inputs_reference_catches_every_planted_bug():
    from labops.exercises.planted_bugs import PLANTED

    result = check("gelu_test_inputs", gelu_test_inputs, show=False)
    assert result.passed and result.score == len(PLANTED) == 5


@pytest.mark.parametrize("name", ["right only at 0", "tanh approximation", "odd tail forgotten",
                                  "overflow past |x| = 20", "result flattened"])
def test_test_inputs_that_miss_one_bug_lose_that_check_and_are_told_why(name):
    from labops.exercises.planted_bugs import PLANTED

    inputs = _inputs_missing(name)
    result = check("gelu_test_inputs", lambda: inputs, show=False)
    failed = [m for m in result.messages if m.startswith("FAIL")]
    description, sentence = PLANTED[name][1], PLANTED[name][2]
    assert len(failed) == (4 if name == "right only at 0" else 1), result.messages
    assert any(description in m and sentence in m for m in failed), result.messages


def test_test_inputs_the_planted_ops_are_wrong_and_the_oracle_is_gelu():
    from labops.exercises.planted_bugs import PLANTED, exact_gelu

    # odd-sized, 2-D, ordinary values where the tanh form differs, large ones, a last element far from 0
    x = torch.tensor([[-3.0, 1.5, 25.0], [2.0, -1.0, 0.7], [0.3, -30.0, 1.2]], dtype=torch.float64)
    torch.testing.assert_close(exact_gelu(x), torch.nn.functional.gelu(x), rtol=1e-13, atol=1e-13)
    for planted, _, _ in PLANTED.values():
        got = planted(x.clone())
        assert got.shape != x.shape or not torch.allclose(got, exact_gelu(x), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bad", [
    lambda: [torch.randn(2, dtype=torch.float64)] * 9,  # more than 8 tensors
    lambda: [torch.randn(400, 300, dtype=torch.float64)],  # more than 100,000 elements
    lambda: [torch.tensor([1.0, float("inf")])],  # not finite
    lambda: "x = 3",  # not tensors
])
def test_test_inputs_that_break_the_rules_score_nothing_and_say_which(bad):
    result = check("gelu_test_inputs", bad, show=False)
    assert result.score == 0 and "Your inputs cannot be used" in " ".join(result.messages)


def test_test_inputs_the_learners_code_never_touches_a_planted_op():
    # run() (what the sandboxed child executes) only calls the learner's function; the planted ops run in
    # judge(), in the process that makes the verdict.
    ex = EXERCISES["gelu_test_inputs"]
    case = ex.make_checks(True)[0].cases[0]
    seen = []
    assert ex.run(lambda *args: seen.append(args) or [torch.ones(3)], case)[0].shape == (3,)
    assert seen == [()] and case.args == () and ex.judge is not None
