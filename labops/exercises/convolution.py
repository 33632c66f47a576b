"""Exercises on convolution: the output size, im2col, col2im, depthwise backward-weight.

Oracles: ``F.unfold``, ``F.fold`` and autograd through ``F.conv2d(groups=C)``,
all in float64. The classic wrong answers are produced by one loop with knobs
(``_windows``): each knob is one mistake a learner makes in the index formula.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._core import Case, Check, Exercise, Mistake, matches, randn

__all__ = ["EXERCISES"]


# ---- the output size ----

def _out_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _size_case(size, kernel, stride, padding, dilation):
    return Case(f"size {size}, kernel {kernel}, stride {stride}, padding {padding}, dilation {dilation}",
                (size, kernel, stride, padding, dilation), _out_size(size, kernel, stride, padding, dilation),
                ("output size",))


def _size_checks(hidden):
    c = _size_case
    return [
        Check("stride 1, no padding", [c(7, 3, 1, 0, 1), c(5, 5, 1, 0, 1)] + ([c(9, 2, 1, 0, 1)] if hidden else [])),
        Check("padding", [c(7, 3, 1, 1, 1), c(6, 5, 1, 2, 1)] + ([c(4, 3, 1, 3, 1)] if hidden else [])),
        Check("stride > 1 with a remainder", [c(7, 3, 2, 0, 1), c(8, 3, 3, 1, 1)] + ([c(224, 7, 2, 3, 1)] if hidden else [])),
        Check("dilation", [c(9, 3, 1, 0, 2), c(10, 3, 2, 2, 3)] + ([c(6, 2, 1, 1, 4)] if hidden else [])),
    ]


CONV_OUTPUT_SIZE = Exercise(
    "conv_output_size", "How many window positions fit along one axis",
    "fn(size, kernel, stride, padding, dilation) -> int",
    _size_checks,
    mistakes=[
        Mistake("Returns a float: use floor division (//) so the size is a whole number of windows.",
                test=lambda case, got: isinstance(got, float)),
        Mistake("Rounded up (ceil mode): a window that would run past the padded edge is dropped, so round down.",
                wrong=lambda s, k, st, p, d: -(-(s + 2 * p - d * (k - 1) - 1) // st) + 1),
        Mistake("Dilation ignored: a dilated kernel spans dilation * (kernel - 1) + 1 pixels.",
                wrong=lambda s, k, st, p, d: (s + 2 * p - k) // st + 1),
        Mistake("Padding counted once: it is added on both sides, 2 * padding.",
                wrong=lambda s, k, st, p, d: (s + p - d * (k - 1) - 1) // st + 1),
        Mistake("Off-by-one output size: the first window sits at position 0, so the count is "
                "(span - window) // stride + 1.",
                test=lambda case, got: isinstance(got, int) and abs(got - case.expected) == 1),
    ],
)


# ---- one window loop with a knob per mistake ----

def _windows(x_shape, kernel, stride, padding, dilation, visit, *, tap_dilation=None, index_padding=None,
             flip=False, row_order="c,kh,kw", out_hw=None):
    """Call visit(n, c, row, col, ih, iw) for every in-image tap of every window, as im2col orders them.

    The knobs: ``tap_dilation`` and ``index_padding`` replace dilation and padding in the index formula
    only (the output size keeps the real ones), ``flip`` reads the window backwards, ``row_order``
    puts the channel innermost.
    """
    n_, c_, h_, w_ = x_shape
    (kh_, kw_), (sh, sw), (dh, dw) = kernel, stride, dilation
    ph, pw = index_padding or padding
    th, tw = tap_dilation or (dh, dw)
    out_h, out_w = out_hw or (_out_size(h_, kh_, sh, padding[0], dh), _out_size(w_, kw_, sw, padding[1], dw))
    for n in range(n_):
        for c in range(c_):
            for kh in range(kh_):
                for kw in range(kw_):
                    row = (c * kh_ + kh) * kw_ + kw if row_order == "c,kh,kw" else (kh * kw_ + kw) * c_ + c
                    th_i, tw_i = (kh_ - 1 - kh, kw_ - 1 - kw) if flip else (kh, kw)
                    for oh in range(out_h):
                        for ow in range(out_w):
                            ih, iw = oh * sh - ph + th_i * th, ow * sw - pw + tw_i * tw
                            if 0 <= ih < h_ and 0 <= iw < w_:
                                visit(n, c, row, oh * out_w + ow, ih, iw)


def _im2col_variant(x, kernel, stride, padding, dilation, **knobs):
    n_, c_, h_, w_ = x.shape
    L = _out_size(h_, kernel[0], stride[0], padding[0], dilation[0]) * \
        _out_size(w_, kernel[1], stride[1], padding[1], dilation[1])
    cols = torch.zeros(n_, c_ * kernel[0] * kernel[1], L, dtype=torch.float64)

    def visit(n, c, row, col, ih, iw):
        cols[n, row, col] = x[n, c, ih, iw]

    _windows(x.shape, kernel, stride, padding, dilation, visit, **knobs)
    return cols


_CONV_SETTINGS = {
    "3x3, no padding": ((2, 2, 6, 5), (3, 3), (1, 1), (0, 0), (1, 1)),
    "3x3, padding 1": ((1, 3, 5, 5), (3, 3), (1, 1), (1, 1), (1, 1)),
    "stride 2, odd size": ((1, 2, 7, 9), (3, 3), (2, 2), (1, 1), (1, 1)),
    "dilation 2": ((1, 2, 7, 6), (3, 3), (1, 1), (1, 1), (2, 2)),
    "2x3 kernel, batch of 1": ((1, 2, 5, 6), (2, 3), (1, 2), (0, 1), (1, 1)),
    # only in hidden mode
    "3x3, stride 3, dilation 2": ((2, 1, 11, 10), (3, 3), (3, 3), (2, 2), (2, 2)),
}


def _im2col_case(label, seed):
    shape, k, s, p, d = _CONV_SETTINGS[label]
    x = randn(*shape, seed=seed)
    return Case(f"{label}: x {shape}", (x, k, s, p, d), F.unfold(x, k, dilation=d, padding=p, stride=s),
                ("columns",))


def _conv_checks(make, hidden):
    extra = [make("3x3, stride 3, dilation 2", 129)] if hidden else []
    return [
        Check("3x3 kernel", [make("3x3, no padding", 121)]),
        Check("padding", [make("3x3, padding 1", 123)]),
        Check("stride > 1", [make("stride 2, odd size", 125)] + extra),
        Check("dilation", [make("dilation 2", 127)] + extra),
        Check("non-square kernel, batch of 1", [make("2x3 kernel, batch of 1", 128)]),
    ]


def _size_mistake(case, got):
    """Off-by-one in the number of columns (the output size)."""
    try:
        L_got, L_want = int(got.shape[-1]), int(case.expected.shape[-1])
    except (AttributeError, IndexError, TypeError):
        return False
    return L_got != L_want and got.shape[:-1] == case.expected.shape[:-1]


IM2COL = Exercise(
    "im2col", "im2col: unfold every receptive field into a column",
    "fn(x, kernel_size, stride, padding, dilation) -> columns   "
    "(x: (N, C, H, W); pairs (h, w); columns: (N, C*kH*kW, outH*outW), row (c, kh, kw), column (oh, ow))",
    lambda hidden: _conv_checks(_im2col_case, hidden),
    mistakes=[
        Mistake("Off-by-one output size: the number of columns is outH * outW with "
                "out = (size + 2 padding - dilation (kernel - 1) - 1) // stride + 1.", test=_size_mistake),
        Mistake("Dilation ignored: tap kh reads row oh * stride - padding + kh * dilation.",
                wrong=lambda x, k, s, p, d: _im2col_variant(x, k, s, p, d, tap_dilation=(1, 1))),
        Mistake("Flipped kernel: row (c, kh, kw) reads tap (kh, kw) of the window, not (kH-1-kh, kW-1-kw); "
                "convolution layers in deep learning are correlations.",
                wrong=lambda x, k, s, p, d: _im2col_variant(x, k, s, p, d, flip=True)),
        Mistake("Rows in the wrong order: row = (c * kH + kh) * kW + kw, channel outermost, so the weight "
                "reshaped to (C_out, C*kH*kW) multiplies it.",
                wrong=lambda x, k, s, p, d: _im2col_variant(x, k, s, p, d, row_order="kh,kw,c")),
        Mistake("Padding ignored in the index: subtract padding (ih = oh * stride - padding + kh * dilation) "
                "and leave zeros where (ih, iw) falls outside the image.",
                wrong=lambda x, k, s, p, d: _im2col_variant(x, k, s, p, d, index_padding=(0, 0))),
    ],
)


def _col2im_case(label, seed):
    shape, k, s, p, d = _CONV_SETTINGS[label]
    L = F.unfold(torch.zeros(shape, dtype=torch.float64), k, dilation=d, padding=p, stride=s).shape[-1]
    cols = randn(shape[0], shape[1] * k[0] * k[1], L, seed=seed)
    image = F.fold(cols, shape[-2:], k, dilation=d, padding=p, stride=s)
    return Case(f"{label}: image {shape}", (cols, shape[-2:], k, s, p, d), image, ("image",))


def _col2im_variant(cols, size, k, s, p, d, accumulate=True, **knobs):
    n_, rows, _ = cols.shape
    shape = (n_, rows // (k[0] * k[1]), *size)
    image = torch.zeros(shape, dtype=torch.float64)

    def visit(n, c, row, col, ih, iw):
        image[n, c, ih, iw] = (image[n, c, ih, iw] if accumulate else 0) + cols[n, row, col]

    _windows(shape, k, s, p, d, visit, **knobs)
    return image


COL2IM = Exercise(
    "col2im", "col2im, the adjoint of im2col: add every column entry back to its pixel",
    "fn(columns, output_size, kernel_size, stride, padding, dilation) -> image   (output_size: (H, W))",
    lambda hidden: _conv_checks(_col2im_case, hidden),
    mistakes=[
        Mistake("col2im must *sum* overlapping windows: a pixel seen by k windows receives k contributions "
                "(you overwrote, so only the last window's value is left).",
                wrong=lambda c, size, k, s, p, d: _col2im_variant(c, size, k, s, p, d, accumulate=False)),
        Mistake("Dilation ignored: tap kh lands on row oh * stride - padding + kh * dilation.",
                wrong=lambda c, size, k, s, p, d: _col2im_variant(c, size, k, s, p, d, tap_dilation=(1, 1))),
        Mistake("Flipped kernel: row (c, kh, kw) goes back to tap (kh, kw) of its window.",
                wrong=lambda c, size, k, s, p, d: _col2im_variant(c, size, k, s, p, d, flip=True)),
        Mistake("Rows in the wrong order: row = (c * kH + kh) * kW + kw, channel outermost.",
                wrong=lambda c, size, k, s, p, d: _col2im_variant(c, size, k, s, p, d, row_order="kh,kw,c")),
        Mistake("Padding ignored in the index: tap kh lands on row oh * stride - padding + kh * dilation.",
                wrong=lambda c, size, k, s, p, d: _col2im_variant(c, size, k, s, p, d, index_padding=(0, 0))),
    ],
)


# ---- depthwise convolution, gradient of the weight ----

_DW_SETTINGS = {
    "3x3, padding 1": ((2, 3, 6, 5), 1, (3, 3), (1, 1), (1, 1), (1, 1)),
    "stride 2": ((1, 2, 7, 8), 1, (3, 3), (2, 2), (1, 1), (1, 1)),
    "dilation 2": ((1, 2, 7, 7), 1, (3, 3), (1, 1), (2, 2), (2, 2)),
    "channel multiplier 2": ((2, 3, 5, 5), 2, (3, 3), (1, 1), (1, 1), (1, 1)),
    "2x3 kernel, batch of 1": ((1, 4, 5, 6), 1, (2, 3), (1, 1), (0, 1), (1, 1)),
    "5x5, multiplier 3, stride 2": ((2, 2, 9, 8), 3, (5, 5), (2, 2), (2, 2), (1, 1)),  # hidden
}


def _dw_grad_weight(x, g, wshape, s, p, d):
    w = torch.zeros(wshape, dtype=torch.float64, requires_grad=True)
    F.conv2d(x, w, None, s, p, d, groups=x.shape[1]).backward(g)
    return w.grad


def _dw_case(label, seed):
    shape, m, k, s, p, d = _DW_SETTINGS[label]
    x = randn(*shape, seed=seed)
    wshape = (shape[1] * m, 1, *k)
    out = F.conv2d(x, torch.zeros(wshape, dtype=torch.float64), None, s, p, d, groups=shape[1])
    g = randn(*out.shape, seed=seed + 1)
    return Case(f"{label}: x {shape}", (x, g, wshape, s, p, d), _dw_grad_weight(x, g, wshape, s, p, d),
                ("grad_weight",))


def _dw_variant(x, g, wshape, s, p, d, *, tap_dilation=None, channel="oc // m", images=slice(None)):
    """grad_w[oc, 0, kh, kw] = sum over n, oh, ow of g[n, oc, oh, ow] * x[n, c_in(oc), ih, iw], with knobs.

    ``images`` is the slice of the batch the sum runs over (all of it when right).
    """
    C = x.shape[1]
    m = wshape[0] // C
    gw = torch.zeros(wshape, dtype=torch.float64)
    td = tap_dilation or d
    for oc in range(wshape[0]):
        c = oc // m if channel == "oc // m" else oc % C
        for kh in range(wshape[2]):
            for kw in range(wshape[3]):
                ih = torch.arange(g.shape[2])[:, None] * s[0] - p[0] + kh * td[0]
                iw = torch.arange(g.shape[3])[None, :] * s[1] - p[1] + kw * td[1]
                ok = (ih >= 0) & (ih < x.shape[2]) & (iw >= 0) & (iw < x.shape[3])
                patch = x[images, c, ih.clamp(0, x.shape[2] - 1), iw.clamp(0, x.shape[3] - 1)] * ok
                gw[oc, 0, kh, kw] = (g[images, oc] * patch).sum()
    return gw


def _one_image(case, got):
    """The gradient of the first image only, or of the last (a loop over n that assigns instead of adding)."""
    x, g, ws, s, p, d = case.args
    return x.shape[0] > 1 and any(matches(got, _dw_variant(x, g, ws, s, p, d, images=images))
                                  for images in (slice(0, 1), slice(-1, None)))


DEPTHWISE_BACKWARD_WEIGHT = Exercise(
    "depthwise_backward_weight", "Depthwise convolution's accGradParameters for the weight",
    "fn(x, grad_output, weight_shape, stride, padding, dilation) -> grad_weight   "
    "(x: (N, C, H, W); weight_shape: (C*m, 1, kH, kW); output channel oc reads input channel oc // m)",
    lambda hidden: [
        Check("3x3, padding 1", [_dw_case("3x3, padding 1", 131)]),
        Check("stride 2", [_dw_case("stride 2", 133)] + ([_dw_case("5x5, multiplier 3, stride 2", 139)]
                                                          if hidden else [])),
        Check("dilation 2", [_dw_case("dilation 2", 135)]),
        Check("channel multiplier 2", [_dw_case("channel multiplier 2", 137)]
              + ([_dw_case("5x5, multiplier 3, stride 2", 139)] if hidden else [])),
        Check("non-square kernel, batch of 1", [_dw_case("2x3 kernel, batch of 1", 138)]),
    ],
    mistakes=[
        Mistake("Flipped weight: grad_weight[oc, 0, kh, kw] pairs grad_output with the input at tap (kh, kw) "
                "itself; your answer is rotated by 180 degrees.",
                wrong=lambda x, g, ws, s, p, d: _dw_grad_weight(x, g, ws, s, p, d).flip(-2, -1)),
        Mistake("Dilation ignored: tap kh reads input row oh * stride - padding + kh * dilation.",
                wrong=lambda x, g, ws, s, p, d: _dw_variant(x, g, ws, s, p, d, tap_dilation=(1, 1))),
        Mistake("The channel multiplier maps output channel oc to input channel oc // m "
                "(the m filters of one input channel are neighbours), not oc % C.",
                wrong=lambda x, g, ws, s, p, d: _dw_variant(x, g, ws, s, p, d, channel="oc % C")),
        Mistake("Not summed over the batch: the weight is shared by every image, so its gradient sums over "
                "n as well as over the output pixels.",
                test=_one_image),
    ],
)


EXERCISES = [CONV_OUTPUT_SIZE, IM2COL, COL2IM, DEPTHWISE_BACKWARD_WEIGHT]
