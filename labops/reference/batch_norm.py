"""Batch normalization in plain Python and NumPy: forward, and the three backward formulas derived.

x is (N, C, ...): channel c's values are x[:, c, ...], M = N * (product of the dims after C) of them.
Compare with csrc/batch_norm/batch_norm.h: the loops here do, one value at a time, what its
bodies do (``normalize``, ``add_to_grad_sums``, ``grad_input``), and in the same order of steps.

Forward (one channel; w, b its weight and bias)::

    mean   = (1/M) sum_i x_i
    var    = (1/M) sum_i (x_i - mean)^2           biased: what normalizes
    invstd = 1 / sqrt(var + eps)
    xhat_i = (x_i - mean) * invstd
    y_i    = w * xhat_i + b

Training uses the batch's mean and var, and moves the running statistics towards them:
``running_mean = (1 - momentum) running_mean + momentum mean``, ``running_var`` the same with the
unbiased ``var * M / (M - 1)``. Evaluation uses ``running_mean`` and ``running_var`` instead.

Backward, with g_i = dE/dy_i:

accGradParameters. y_i depends on w and b through ``w * xhat_i + b`` only::

    dE/dw = sum_i g_i xhat_i           dE/db = sum_i g_i

updateGradInput in evaluation: mean and invstd are constants, so dy_i/dx_i = w invstd::

    dE/dx_i = w invstd g_i

updateGradInput in training: every x_j moves mean and var, so every y_i depends on every x_j.
Write gx_i = dE/dxhat_i = w g_i. The chain rule through xhat_i = (x_i - mean) invstd::

    dE/dvar  = sum_i gx_i (x_i - mean) * (-1/2) (var + eps)^(-3/2)
             = -(1/2) invstd^2 sum_i gx_i xhat_i
    dE/dmean = sum_i gx_i (-invstd) + dE/dvar * (-2/M) sum_i (x_i - mean)
             = -invstd sum_i gx_i                      (the second sum is 0)
    dE/dx_i  = gx_i invstd + dE/dvar * 2 (x_i - mean) / M + dE/dmean / M
             = w invstd (g_i - (1/M) sum_j g_j - xhat_i (1/M) sum_j g_j xhat_j)
             = w invstd (g_i - (dE/db) / M - xhat_i (dE/dw) / M)

So the input gradient is g with the part that a shift (dE/db) and a scale (dE/dw) of the normalized
values explain taken out: normalizing makes y blind to shifting or scaling x, and the gradient says so
(it sums to 0 over the channel, and so does its product with xhat). The two sums are the parameter
gradients: the compiled backward computes them once for both.
"""

import numpy as np

__all__ = [
    "batch_norm_acc_grad_parameters_loop",
    "batch_norm_backward_input_loop",
    "batch_norm_backward_numpy",
    "batch_norm_forward_loop",
    "batch_norm_forward_numpy",
]


def _channels_first(a):
    """(N, C, ...) -> (C, M): channel c's M values on row c, in the order the compiled loops read them."""
    a = np.asarray(a, dtype=np.float64)
    return np.moveaxis(a, 1, 0).reshape(a.shape[1], -1)


def _from_channels_first(rows, shape):
    """The inverse of _channels_first: (C, M) -> (N, C, ...)."""
    return np.moveaxis(rows.reshape(shape[1], shape[0], *shape[2:]), 0, 1)


def batch_norm_forward_loop(x, weight=None, bias=None, running_mean=None, running_var=None, training=False,
                            momentum=0.1, eps=1e-5):
    """updateOutput, one channel and one value at a time.

    Args:
        x: (N, C, ...).
        weight, bias: (C,) or None (1 and 0).
        running_mean, running_var: (C,) or None; needed in evaluation.
        training: the batch's statistics (True) or the running ones.

    Returns:
        (y, save_mean, save_invstd, new_running_mean, new_running_var): float64 arrays; the new running
        statistics are the ones given, moved towards the batch's in training (None if none were given).

    Example:
        >>> y, mean, invstd, _, _ = batch_norm_forward_loop(np.array([[1.0], [3.0]]), training=True, eps=0.0)
        >>> y[:, 0], mean, invstd
        (array([-1.,  1.]), array([2.]), array([1.]))
    """
    rows = _channels_first(x)
    channels, m = rows.shape
    y = np.empty_like(rows)
    save_mean, save_invstd = np.empty(channels), np.empty(channels)
    new_mean = None if running_mean is None else np.array(running_mean, dtype=np.float64)
    new_var = None if running_var is None else np.array(running_var, dtype=np.float64)
    for c in range(channels):
        if training:
            total = 0.0
            for i in range(m):
                total += rows[c, i]
            mean = total / m
            squares = 0.0
            for i in range(m):
                squares += (rows[c, i] - mean) ** 2
            var = squares / m  # biased: what normalizes
            if new_mean is not None:
                new_mean[c] = (1 - momentum) * new_mean[c] + momentum * mean
                new_var[c] = (1 - momentum) * new_var[c] + momentum * var * m / (m - 1)  # unbiased
        else:
            mean, var = float(running_mean[c]), float(running_var[c])
        invstd = 1.0 / np.sqrt(var + eps)
        w = 1.0 if weight is None else float(weight[c])
        b = 0.0 if bias is None else float(bias[c])
        for i in range(m):
            y[c, i] = (rows[c, i] - mean) * invstd * w + b
        save_mean[c], save_invstd[c] = mean, invstd
    return _from_channels_first(y, np.shape(x)), save_mean, save_invstd, new_mean, new_var


def batch_norm_backward_input_loop(grad_output, x, weight, save_mean, save_invstd, training):
    """updateGradInput: dE/dx from g = dE/dy and the saved statistics (see the module's derivation).

    Args:
        grad_output, x: (N, C, ...).
        weight: (C,) or None.
        save_mean, save_invstd: (C,), what the forward saved.
        training: whether the forward used the batch's statistics.

    Returns:
        grad_input, float64, x's shape.

    Example:
        >>> x, g = np.array([[1.0], [3.0]]), np.array([[1.0], [1.0]])
        >>> batch_norm_backward_input_loop(g, x, None, [2.0], [1.0], training=True)[:, 0]  # a shift: no gradient
        array([0., 0.])
    """
    g_rows, x_rows = _channels_first(grad_output), _channels_first(x)
    channels, m = x_rows.shape
    grad_input = np.empty_like(x_rows)
    for c in range(channels):
        mean, invstd = float(save_mean[c]), float(save_invstd[c])
        scale = (1.0 if weight is None else float(weight[c])) * invstd
        sum_g = sum_g_xhat = 0.0
        if training:  # the parameter gradients' sums (dE/db, dE/dw with w = 1)
            for i in range(m):
                sum_g += g_rows[c, i]
                sum_g_xhat += g_rows[c, i] * (x_rows[c, i] - mean) * invstd
        for i in range(m):
            xhat = (x_rows[c, i] - mean) * invstd
            grad_input[c, i] = scale * (g_rows[c, i] - sum_g / m - xhat * sum_g_xhat / m)
    return _from_channels_first(grad_input, np.shape(x))


def batch_norm_acc_grad_parameters_loop(grad_output, x, save_mean, save_invstd, grad_weight, grad_bias=None,
                                        scale=1.0):
    """accGradParameters: grad_weight += scale * sum g xhat, grad_bias += scale * sum g, in place.

    Args:
        grad_output, x: (N, C, ...).
        save_mean, save_invstd: (C,).
        grad_weight, grad_bias: (C,) float64 arrays, added to (grad_bias may be None).
        scale: the weight of this batch's gradient.

    Example:
        >>> gw, gb = np.zeros(1), np.ones(1)
        >>> batch_norm_acc_grad_parameters_loop([[2.0], [1.0]], [[1.0], [3.0]], [2.0], [1.0], gw, gb, scale=0.5)
        >>> gw, gb
        (array([-0.5]), array([2.5]))
    """
    g_rows, x_rows = _channels_first(grad_output), _channels_first(x)
    for c in range(x_rows.shape[0]):
        mean, invstd = float(save_mean[c]), float(save_invstd[c])
        sum_g = sum_g_xhat = 0.0
        for i in range(x_rows.shape[1]):
            sum_g += g_rows[c, i]
            sum_g_xhat += g_rows[c, i] * (x_rows[c, i] - mean) * invstd
        grad_weight[c] += scale * sum_g_xhat
        if grad_bias is not None:
            grad_bias[c] += scale * sum_g


def batch_norm_forward_numpy(x, weight=None, bias=None, mean=None, var=None, eps=1e-5):
    """y with whole-array NumPy; the batch's statistics when mean and var are None.

    Args:
        x: (N, C, ...).
        weight, bias: (C,) or None.
        mean, var: (C,) statistics to normalize with (the running ones, in evaluation), or None.

    Returns:
        (y, mean, invstd).

    Example:
        >>> y, mean, invstd = batch_norm_forward_numpy(np.array([[1.0], [3.0]]), eps=0.0)
        >>> y[:, 0], mean, invstd
        (array([-1.,  1.]), array([2.]), array([1.]))
    """
    x = np.asarray(x, dtype=np.float64)
    axes = (0, *range(2, x.ndim))
    if mean is None:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    invstd = 1.0 / np.sqrt(np.asarray(var, dtype=np.float64) + eps)
    per_channel = (1, -1) + (1,) * (x.ndim - 2)  # broadcast (C,) over (N, C, ...)
    xhat = (x - np.reshape(mean, per_channel)) * invstd.reshape(per_channel)
    w = 1.0 if weight is None else np.reshape(weight, per_channel)
    b = 0.0 if bias is None else np.reshape(bias, per_channel)
    return xhat * w + b, np.asarray(mean, dtype=np.float64), invstd


def batch_norm_backward_numpy(grad_output, x, weight, save_mean, save_invstd, training):
    """(grad_input, grad_weight, grad_bias) with whole-array NumPy, the three formulas at once.

    Example:
        >>> gi, gw, gb = batch_norm_backward_numpy([[2.0], [1.0]], [[1.0], [3.0]], None, [2.0], [1.0], True)
        >>> gi[:, 0], gw, gb
        (array([0., 0.]), array([-1.]), array([3.]))
    """
    g, x = np.asarray(grad_output, dtype=np.float64), np.asarray(x, dtype=np.float64)
    axes = (0, *range(2, x.ndim))
    m = x.size // x.shape[1]
    per_channel = (1, -1) + (1,) * (x.ndim - 2)
    invstd = np.reshape(save_invstd, per_channel)
    xhat = (x - np.reshape(save_mean, per_channel)) * invstd
    grad_weight, grad_bias = (g * xhat).sum(axis=axes), g.sum(axis=axes)
    scale = invstd * (1.0 if weight is None else np.reshape(weight, per_channel))
    if training:
        grad_input = scale * (g - grad_bias.reshape(per_channel) / m - xhat * grad_weight.reshape(per_channel) / m)
    else:
        grad_input = scale * g
    return grad_input, grad_weight, grad_bias
