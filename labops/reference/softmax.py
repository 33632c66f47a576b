"""Softmax and cross-entropy in plain Python loops over NumPy arrays.

Compare with csrc/softmax/softmax.h: each loop body is what one row step of the
CPU or CUDA kernel computes. Rows run along the last axis of a 2-D array;
``softmax_loop(x, dim)`` moves any other axis there first.
"""

import math

import numpy as np

__all__ = [
    "cross_entropy_backward_loop",
    "cross_entropy_forward_loop",
    "naive_softmax_loop",
    "softmax_backward_loop",
    "softmax_loop",
]


def naive_softmax_loop(x):
    """softmax straight from the definition, y_j = exp(x_j) / sum_k exp(x_k). Do not use.

    It is right on paper and wrong in floating point. exp overflows to inf for
    x > 709 in float64 (x > 88.7 in float32), and then the row is inf / inf = NaN:

    >>> naive_softmax_loop(np.array([[1000.0, 0.0]]))  # doctest: +SKIP
    array([[nan,  0.]])   # RuntimeWarning: overflow encountered in exp

    (very negative rows underflow instead: all exps 0, then 0 / 0 = NaN).
    ``softmax_loop`` subtracts the row max first and gives [[1., 0.]].
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.empty_like(x)
    for i in range(x.shape[0]):
        total = 0.0
        for j in range(x.shape[1]):
            total += np.exp(x[i, j])  # np.exp: overflows to inf (with a warning) instead of raising
        for j in range(x.shape[1]):
            y[i, j] = np.exp(x[i, j]) / total
    return y


def _rows(fn, dim, *arrays):
    """Apply a row function along `dim` by moving that axis last and flattening the rest."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    if arrays[0].ndim == 0:  # a scalar is a row of one element
        return fn(*[a.reshape(1, 1) for a in arrays]).reshape(())
    moved = [np.moveaxis(a, dim, -1) for a in arrays]
    shape = moved[0].shape
    out = fn(*[m.reshape(-1, shape[-1]) for m in moved]).reshape(shape)
    return np.moveaxis(out, -1, dim)


def _softmax_rows(x):
    y = np.empty_like(x)
    for i in range(x.shape[0]):
        # 1. the row max: every exponent below is <= 0, so exp cannot overflow,
        #    and the largest term is exp(0) = 1, so the sum is >= 1.
        m = -math.inf
        for j in range(x.shape[1]):
            m = max(m, x[i, j])
        # 2. the sum of the shifted exps
        total = 0.0
        for j in range(x.shape[1]):
            total += math.exp(x[i, j] - m)
        # 3. normalize: exp(x - m) / sum exp(x - m) = exp(x) / sum exp(x)
        for j in range(x.shape[1]):
            y[i, j] = math.exp(x[i, j] - m) / total
    return y


def softmax_loop(x, dim=-1):
    """Stable softmax along `dim`: y = exp(x - max) / sum(exp(x - max)).

    Args:
        x: array of any rank.
        dim: the axis that is normalized (negative counts from the end).

    Returns:
        float64 array of x's shape; each slice along dim sums to 1.

    Example:
        >>> softmax_loop(np.array([[1000.0, 0.0], [0.0, 0.0]]))
        array([[1. , 0. ],
               [0.5, 0.5]])
    """
    return _rows(_softmax_rows, dim, x)


def _softmax_backward_rows(g, y):
    dx = np.empty_like(y)
    for i in range(y.shape[0]):
        # dy_k/dx_j = y_k (delta_kj - y_j), so
        # dx_j = sum_k g_k y_k (delta_kj - y_j) = y_j (g_j - sum_k g_k y_k)
        dot = 0.0
        for k in range(y.shape[1]):
            dot += g[i, k] * y[i, k]
        for j in range(y.shape[1]):
            dx[i, j] = y[i, j] * (g[i, j] - dot)
    return dx


def softmax_backward_loop(grad_output, output, dim=-1):
    """Gradient w.r.t. the input, from the saved *output* y: y * (g - sum(g * y)).

    Args:
        grad_output: dE/dy, y's shape.
        output: the saved forward output y.
        dim: the softmax's axis.

    Returns:
        grad_input, float64, y's shape.

    Example:
        >>> softmax_backward_loop(np.array([[1.0, 1.0]]), np.array([[0.5, 0.5]]))  # a constant g has no effect
        array([[0., 0.]])
    """
    return _rows(_softmax_backward_rows, dim, grad_output, output)


def _check_targets(logits, target):
    for i, t in enumerate(target):
        if not 0 <= t < logits.shape[1]:
            raise ValueError(f"target[{i}] = {t} is not a class index in [0, {logits.shape[1]})")


def cross_entropy_forward_loop(logits, target, reduction="mean"):
    """loss_i = -log softmax(x_i)[t_i] = log(sum_j exp(x_ij)) - x_i,t_i, then reduced over i.

    Args:
        logits: (N, C).
        target: (N,) integer class indices in [0, C).
        reduction: ``"mean"`` (scalar), ``"sum"`` (scalar) or ``"none"`` ((N,)).

    Returns:
        float64 scalar or (N,) array.

    Example:
        >>> round(float(cross_entropy_forward_loop(np.zeros((2, 4)), np.array([0, 3]))), 4)  # log 4
        1.3863
    """
    x = np.asarray(logits, dtype=np.float64)
    target = [int(t) for t in np.asarray(target).reshape(-1)]
    _check_targets(x, target)
    losses = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        m = max(x[i])  # log sum exp(x) = m + log sum exp(x - m): stable for the same reason
        total = sum(math.exp(v - m) for v in x[i])
        losses[i] = m + math.log(total) - x[i, target[i]]
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    if reduction == "mean":
        return losses.sum() / x.shape[0]
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def cross_entropy_backward_loop(grad_loss, logits, target, reduction="mean"):
    """d loss / d x_ij = (softmax(x_i)_j - [j == t_i]) * g_i.

    g_i is the incoming gradient: one number per row for reduction='none', else
    the same scalar for every row, divided by N for 'mean' (not for 'sum').

    Args:
        grad_loss: the loss's gradient: a scalar, or (N,) for reduction='none'.
        logits: (N, C); target: (N,) class indices.
        reduction: as in the forward.

    Returns:
        grad_logits, float64, (N, C).

    Example:
        >>> cross_entropy_backward_loop(1.0, np.zeros((1, 4)), np.array([0]))
        array([[-0.75,  0.25,  0.25,  0.25]])
    """
    x = np.asarray(logits, dtype=np.float64)
    target = [int(t) for t in np.asarray(target).reshape(-1)]
    _check_targets(x, target)
    n = x.shape[0]
    g = np.asarray(grad_loss, dtype=np.float64)
    p = _softmax_rows(x)
    grad = np.empty_like(x)
    for i in range(n):
        g_i = g.reshape(-1)[i] if reduction == "none" else float(g) / (n if reduction == "mean" else 1)
        for j in range(x.shape[1]):
            onehot = 1.0 if j == target[i] else 0.0
            grad[i, j] = (p[i, j] - onehot) * g_i
    return grad
