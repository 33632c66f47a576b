"""Depthwise 2-D convolution in plain Python loops over NumPy arrays.

Compare with csrc/depthwise/depthwise.h: ``depthwise_forward_loop`` computes each
output the way one CUDA thread does (``forward_at``), and
``depthwise_backward_input_loop`` is the same gather as ``backward_input_at``.

Shapes: x (N, C_in, H, W); weight (C_out, 1, kH, kW) with C_out = m * C_in
(m is the channel multiplier: output channel oc reads input channel oc // m);
bias (C_out,); out and grad_out (N, C_out, outH, outW).
stride, padding, dilation are (h, w) pairs.
"""

import numpy as np

from .conv2d_mm import _pairs, conv_out_size

__all__ = [
    "depthwise_backward_bias_loop",
    "depthwise_backward_input_loop",
    "depthwise_backward_weight_loop",
    "depthwise_forward_loop",
    "depthwise_output_size",
]


# How many positions a dilated window of k taps has in the padded input: the
# rule of every convolution, written once in conv2d_mm.py.
depthwise_output_size = conv_out_size


def depthwise_forward_loop(x, weight, bias=None, stride=1, padding=0, dilation=1):
    """out[n, oc, oh, ow] = bias[oc] + sum_{kh,kw} w[oc, 0, kh, kw] * x[n, oc // m, ih, iw]
    with ih = oh*sH - pH + kh*dH and iw = ow*sW - pW + kw*dW (zero outside the input).

    Args:
        x: (N, C_in, H, W).
        weight: (C_in*m, 1, kH, kW), m the channel multiplier.
        bias: (C_in*m,) or None.
        stride, padding, dilation: an int or an (h, w) pair.

    Returns:
        float64 (N, C_in*m, out_h, out_w).

    Example:
        >>> out = depthwise_forward_loop(np.ones((1, 2, 3, 3)), np.ones((4, 1, 3, 3)), padding=1)
        >>> out.shape, float(out[0, 3, 1, 1]), float(out[0, 3, 0, 0])  # a corner sees 4 taps
        ((1, 4, 3, 3), 9.0, 4.0)
    """
    x, weight = np.asarray(x, np.float64), np.asarray(weight, np.float64)
    (sh, sw), (ph, pw), (dh, dw) = _pairs(stride, padding, dilation)
    n_, c_in, h, w = x.shape
    c_out, _, kh_, kw_ = weight.shape
    m = c_out // c_in
    out_h = depthwise_output_size(h, kh_, sh, ph, dh)
    out_w = depthwise_output_size(w, kw_, sw, pw, dw)
    out = np.zeros((n_, c_out, out_h, out_w))
    for n in range(n_):
        for oc in range(c_out):
            for oh in range(out_h):
                for ow in range(out_w):
                    acc = 0.0 if bias is None else float(bias[oc])
                    for kh in range(kh_):
                        for kw in range(kw_):
                            ih, iw = oh * sh - ph + kh * dh, ow * sw - pw + kw * dw
                            if 0 <= ih < h and 0 <= iw < w:  # outside: zero padding
                                acc += weight[oc, 0, kh, kw] * x[n, oc // m, ih, iw]
                    out[n, oc, oh, ow] = acc
    return out


def depthwise_backward_input_loop(grad_out, weight, input_shape, stride=1, padding=0, dilation=1):
    """updateGradInput as a gather: each input pixel (ih, iw) of channel c sums
    w[oc, kh, kw] * grad_out[n, oc, oh, ow] over its m output channels oc and the taps
    whose window covers it. Tap kh reaches (ih) from output row oh = (ih + pH - kh*dH) / sH,
    and only when that division is exact (with stride > 1 most taps miss).

    Args:
        grad_out: (N, C_in*m, out_h, out_w).
        weight: (C_in*m, 1, kH, kW).
        input_shape: (N, C_in, H, W) of the forward input.
        stride, padding, dilation: as in the forward.

    Returns:
        grad_input, float64, input_shape.

    Example:
        >>> g = depthwise_backward_input_loop(np.ones((1, 1, 2, 2)), np.ones((1, 1, 2, 2)), (1, 1, 3, 3))
        >>> g[0, 0]
        array([[1., 2., 1.],
               [2., 4., 2.],
               [1., 2., 1.]])
    """
    grad_out, weight = np.asarray(grad_out, np.float64), np.asarray(weight, np.float64)
    (sh, sw), (ph, pw), (dh, dw) = _pairs(stride, padding, dilation)
    n_, c_in, h, w = input_shape
    c_out, _, kh_, kw_ = weight.shape
    m = c_out // c_in
    out_h, out_w = grad_out.shape[2:]
    grad_in = np.zeros((n_, c_in, h, w))
    for n in range(n_):
        for c in range(c_in):
            for ih in range(h):
                for iw in range(w):
                    acc = 0.0
                    for oc in range(c * m, c * m + m):
                        for kh in range(kh_):
                            th = ih + ph - kh * dh
                            if th < 0 or th % sh != 0 or th // sh >= out_h:
                                continue
                            for kw in range(kw_):
                                tw = iw + pw - kw * dw
                                if tw < 0 or tw % sw != 0 or tw // sw >= out_w:
                                    continue
                                acc += weight[oc, 0, kh, kw] * grad_out[n, oc, th // sh, tw // sw]
                    grad_in[n, c, ih, iw] = acc
    return grad_in


def depthwise_backward_weight_loop(grad_out, x, weight_shape, stride=1, padding=0, dilation=1):
    """accGradParameters for the weight: grad_w[oc, 0, kh, kw] is the sum over every
    output position (n, oh, ow) of grad_out[n, oc, oh, ow] times the input that tap read.

    Args:
        grad_out: (N, C_in*m, out_h, out_w).
        x: the forward input, (N, C_in, H, W).
        weight_shape: (C_in*m, 1, kH, kW).
        stride, padding, dilation: as in the forward.

    Returns:
        grad_weight, float64, weight_shape.

    Example:
        >>> gw = depthwise_backward_weight_loop(np.ones((2, 1, 2, 2)), np.ones((2, 1, 3, 3)), (1, 1, 2, 2))
        >>> gw[0, 0]  # each tap summed over N * out_h * out_w = 8 positions
        array([[8., 8.],
               [8., 8.]])
    """
    grad_out, x = np.asarray(grad_out, np.float64), np.asarray(x, np.float64)
    (sh, sw), (ph, pw), (dh, dw) = _pairs(stride, padding, dilation)
    n_, c_in, h, w = x.shape
    c_out, _, kh_, kw_ = weight_shape
    m = c_out // c_in
    out_h, out_w = grad_out.shape[2:]
    grad_w = np.zeros(tuple(weight_shape))
    for oc in range(c_out):
        for kh in range(kh_):
            for kw in range(kw_):
                acc = 0.0
                for n in range(n_):
                    for oh in range(out_h):
                        for ow in range(out_w):
                            ih, iw = oh * sh - ph + kh * dh, ow * sw - pw + kw * dw
                            if 0 <= ih < h and 0 <= iw < w:
                                acc += grad_out[n, oc, oh, ow] * x[n, oc // m, ih, iw]
                grad_w[oc, 0, kh, kw] = acc
    return grad_w


def depthwise_backward_bias_loop(grad_out):
    """accGradParameters for the bias: grad_b[oc] = sum over (n, oh, ow) of grad_out.

    Args:
        grad_out: (N, C_out, out_h, out_w).

    Returns:
        grad_bias, float64, (C_out,).

    Example:
        >>> depthwise_backward_bias_loop(np.ones((2, 3, 4, 4)))
        array([32., 32., 32.])
    """
    grad_out = np.asarray(grad_out, np.float64)
    n_, c_out, out_h, out_w = grad_out.shape
    grad_b = np.zeros(c_out)
    for oc in range(c_out):
        for n in range(n_):
            for oh in range(out_h):
                for ow in range(out_w):
                    grad_b[oc] += grad_out[n, oc, oh, ow]
    return grad_b
