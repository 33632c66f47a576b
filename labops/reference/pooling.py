"""Global average pooling in plain Python and NumPy.

Compare with csrc/pooling/pooling.h: the loop versions do what one CPU loop step
(or one GPU thread group) does for one plane.
"""

import numpy as np

__all__ = [
    "global_avg_pool2d_backward_loop",
    "global_avg_pool2d_backward_numpy",
    "global_avg_pool2d_forward_loop",
    "global_avg_pool2d_forward_numpy",
]


def global_avg_pool2d_forward_loop(x):
    """y[..., 0, 0] = (1 / (H*W)) * sum over h, w of x[..., h, w], for (C,H,W) or (N,C,H,W).

    Args:
        x: (C, H, W) or (N, C, H, W).

    Returns:
        float64 array (C, 1, 1) or (N, C, 1, 1).

    Example:
        >>> global_avg_pool2d_forward_loop(np.arange(8.0).reshape(2, 2, 2))[:, 0, 0]
        array([1.5, 5.5])
    """
    x = np.asarray(x, dtype=np.float64)
    H, W = x.shape[-2:]
    planes = x.reshape(-1, H, W)  # every (n, c) is one plane
    y = np.empty(planes.shape[0])
    for p in range(planes.shape[0]):
        total = 0.0
        for h in range(H):
            for w in range(W):
                total += planes[p, h, w]
        y[p] = total / (H * W)
    return y.reshape(*x.shape[:-2], 1, 1)


def global_avg_pool2d_backward_loop(grad_output, input_shape):
    """grad_input[..., h, w] = grad_output[..., 0, 0] / (H*W): each input was 1/(H*W) of the mean.

    Args:
        grad_output: (C, 1, 1) or (N, C, 1, 1).
        input_shape: the forward input's shape, (C, H, W) or (N, C, H, W).

    Returns:
        grad_input, float64, of input_shape.

    Example:
        >>> global_avg_pool2d_backward_loop(np.array([[[4.0]]]), (1, 2, 2))[0]
        array([[1., 1.],
               [1., 1.]])
    """
    g = np.asarray(grad_output, dtype=np.float64)
    H, W = input_shape[-2:]
    planes = g.reshape(-1)
    grad_input = np.empty((planes.shape[0], H, W))
    for p in range(planes.shape[0]):
        for h in range(H):
            for w in range(W):
                grad_input[p, h, w] = planes[p] / (H * W)
    return grad_input.reshape(input_shape)


def global_avg_pool2d_forward_numpy(x):
    """The mean over the last two dims, keepdims: (..., H, W) -> (..., 1, 1).

    Args:
        x: (C, H, W) or (N, C, H, W).

    Returns:
        (C, 1, 1) or (N, C, 1, 1).

    Example:
        >>> global_avg_pool2d_forward_numpy(np.ones((1, 3, 4, 4))).shape
        (1, 3, 1, 1)
    """

    return np.asarray(x, dtype=np.float64).mean(axis=(-2, -1), keepdims=True)


def global_avg_pool2d_backward_numpy(grad_output, input_shape):
    """grad_output / (H*W) broadcast over every input position.

    Args:
        grad_output: (C, 1, 1) or (N, C, 1, 1).
        input_shape: the forward input's shape.

    Returns:
        grad_input of input_shape.

    Example:
        >>> global_avg_pool2d_backward_numpy(np.array([[[[8.0]]]]), (1, 1, 2, 4))[0, 0]
        array([[1., 1., 1., 1.],
               [1., 1., 1., 1.]])
    """

    H, W = input_shape[-2:]
    return np.broadcast_to(np.asarray(grad_output, dtype=np.float64) / (H * W), input_shape).copy()
