"""Tanh and GELU in plain Python and NumPy.

Compare with csrc/activation/activation.h: the loop versions compute exactly what
one CUDA thread or one CPU loop iteration computes for one element.
"""

import math

import numpy as np

__all__ = [
    "gelu_backward_loop",
    "gelu_backward_numpy",
    "gelu_forward_loop",
    "gelu_forward_numpy",
    "tanh_backward_loop",
    "tanh_backward_numpy",
    "tanh_forward_loop",
    "tanh_forward_numpy",
]

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715
SIGMOID_SLOPE = 1.702


# ---- Tanh (THNN: Tanh_updateOutput, Tanh_updateGradInput) ----

def tanh_forward_loop(x):
    """y[i] = tanh(x[i]).

    Args:
        x: array of any shape.

    Returns:
        float64 array of x's shape.

    Example:
        >>> tanh_forward_loop([0.0, 1.0]).round(4)
        array([0.    , 0.7616])
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.empty_like(x)
    for i in range(x.size):
        y.flat[i] = math.tanh(x.flat[i])
    return y


def tanh_backward_loop(grad_output, output):
    """grad_input[i] = grad_output[i] * (1 - y[i]^2), from the saved *output* y.

    Args:
        grad_output: dE/dy, any shape.
        output: the saved forward output y = tanh(x), same shape.

    Returns:
        grad_input (dE/dx), float64, same shape.

    Example:
        >>> y = tanh_forward_loop([0.0, 1.0])
        >>> tanh_backward_loop([1.0, 1.0], y).round(4)
        array([1.   , 0.42])
    """
    g = np.asarray(grad_output, dtype=np.float64)
    y = np.asarray(output, dtype=np.float64)
    grad_input = np.empty_like(y)
    for i in range(y.size):
        grad_input.flat[i] = g.flat[i] * (1.0 - y.flat[i] * y.flat[i])
    return grad_input


def tanh_forward_numpy(x):
    """tanh(x), vectorized: the same numbers as ``tanh_forward_loop``.

    Args:
        x: NumPy array of any shape.

    Returns:
        array of x's shape.

    Example:
        >>> tanh_forward_numpy(np.array([0.0, 1.0])).round(4)
        array([0.    , 0.7616])
    """

    return np.tanh(x)


def tanh_backward_numpy(grad_output, output):
    """grad_output * (1 - output**2), vectorized; ``output`` is the saved y = tanh(x).

    Args:
        grad_output: NumPy array, dE/dy.
        output: NumPy array of the same shape, the forward's output.

    Returns:
        grad_input, same shape.

    Example:
        >>> tanh_backward_numpy(np.array([2.0]), np.array([0.5]))
        array([1.5])
    """

    return grad_output * (1.0 - output * output)


# ---- GELU: x * Phi(x) and its two approximations ----

def _gelu_one(x, approximate):
    if approximate == "none":
        return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))
    if approximate == "tanh":
        u = SQRT_2_OVER_PI * (x + TANH_CUBIC * x**3)
        return 0.5 * x * (1.0 + math.tanh(u))
    if approximate == "sigmoid":
        return x / (1.0 + math.exp(-SIGMOID_SLOPE * x))
    raise ValueError(f"approximate must be 'none', 'tanh' or 'sigmoid', got {approximate!r}")


def _gelu_grad_one(x, approximate):
    """d gelu / dx at one point."""
    if approximate == "none":
        cdf = 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
        pdf = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return cdf + x * pdf
    if approximate == "tanh":
        t = math.tanh(SQRT_2_OVER_PI * (x + TANH_CUBIC * x**3))
        du_dx = SQRT_2_OVER_PI * (1.0 + 3.0 * TANH_CUBIC * x * x)  # the 3*0.044715*x^2 term
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx
    if approximate == "sigmoid":
        s = 1.0 / (1.0 + math.exp(-SIGMOID_SLOPE * x))
        return s + SIGMOID_SLOPE * x * s * (1.0 - s)
    raise ValueError(f"approximate must be 'none', 'tanh' or 'sigmoid', got {approximate!r}")


def gelu_forward_loop(x, approximate="none"):
    """GELU one element at a time, in float64.

    Args:
        x: array of any shape.
        approximate: ``"none"`` (x * Phi(x)), ``"tanh"`` or ``"sigmoid"`` (x * sigmoid(1.702 x)).

    Returns:
        float64 array of x's shape.

    Example:
        >>> gelu_forward_loop([-1.0, 0.0, 1.0]).round(4)
        array([-0.1587,  0.    ,  0.8413])
    """

    x = np.asarray(x, dtype=np.float64)
    y = np.empty_like(x)
    for i in range(x.size):
        y.flat[i] = _gelu_one(x.flat[i], approximate)
    return y


def gelu_backward_loop(grad_output, x, approximate="none"):
    """grad_output times d gelu / dx, one element at a time, from the saved *input* x.

    Args:
        grad_output: dE/dy, same shape as x.
        x: the forward's input.
        approximate: ``"none"``, ``"tanh"`` or ``"sigmoid"``, as in the forward.

    Returns:
        grad_input, float64, x's shape.

    Example:
        >>> gelu_backward_loop([1.0], [0.0])  # d gelu / dx = Phi(0) = 0.5 at 0, in every form
        array([0.5])
    """

    g = np.asarray(grad_output, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    grad_input = np.empty_like(x)
    for i in range(x.size):
        grad_input.flat[i] = g.flat[i] * _gelu_grad_one(x.flat[i], approximate)
    return grad_input


def _erf(x):
    # NumPy has no erf; math.erf elementwise keeps this file free of SciPy.
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def gelu_forward_numpy(x, approximate="none"):
    """GELU vectorized with NumPy: the same numbers as ``gelu_forward_loop``.

    Args:
        x: array of any shape.
        approximate: ``"none"``, ``"tanh"`` or ``"sigmoid"``.

    Returns:
        float64 array of x's shape.

    Example:
        >>> gelu_forward_numpy(np.array([1.0]), "tanh").round(4)
        array([0.8412])
    """

    x = np.asarray(x, dtype=np.float64)
    if approximate == "none":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + TANH_CUBIC * x**3)))
    if approximate == "sigmoid":
        return x / (1.0 + np.exp(-SIGMOID_SLOPE * x))
    raise ValueError(f"approximate must be 'none', 'tanh' or 'sigmoid', got {approximate!r}")


def gelu_backward_numpy(grad_output, x, approximate="none"):
    """grad_output times d gelu / dx, vectorized, from the saved input x.

    Args:
        grad_output: array of x's shape.
        x: the forward's input.
        approximate: ``"none"``, ``"tanh"`` or ``"sigmoid"``.

    Returns:
        grad_input, x's shape.

    Example:
        >>> gelu_backward_numpy(np.array([1.0]), np.array([0.0]), "sigmoid")
        array([0.5])
    """

    x = np.asarray(x, dtype=np.float64)
    if approximate == "none":
        cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return grad_output * (cdf + x * pdf)
    if approximate == "tanh":
        t = np.tanh(SQRT_2_OVER_PI * (x + TANH_CUBIC * x**3))
        du_dx = SQRT_2_OVER_PI * (1.0 + 3.0 * TANH_CUBIC * x * x)
        return grad_output * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)
    if approximate == "sigmoid":
        s = 1.0 / (1.0 + np.exp(-SIGMOID_SLOPE * x))
        return grad_output * (s + SIGMOID_SLOPE * x * s * (1.0 - s))
    raise ValueError(f"approximate must be 'none', 'tanh' or 'sigmoid', got {approximate!r}")
