"""Reorg (YOLOv2's passthrough layer) in plain Python and NumPy.

Three orders move the same s x s blocks of pixels into channels, in
different channel orders (x is NCHW, stride s, y has C*s*s channels):

    crd  (F.pixel_unshuffle):   y[n, c*s*s + dy*s + dx, h, w] = x[n, c, h*s+dy, w*s+dx]
    dcr  (tf.nn.space_to_depth): y[n, (dy*s+dx)*C + c, h, w] = x[n, c, h*s+dy, w*s+dx]
    darknet: what darknet's reorg_cpu computes in YOLOv2 (ported below, line
         for line). It is *not* space-to-depth of x: it equals dcr applied to
         x's memory read as (N, C/s^2, H*s, W*s). Pretrained YOLOv2 weights
         expect exactly this, so a "correct" space_to_depth breaks them.
"""

import numpy as np

__all__ = [
    "REORG_ORDERS",
    "darknet_reorg_cpu",
    "reorg_backward_numpy",
    "reorg_forward_loop",
    "reorg_forward_numpy",
]

REORG_ORDERS = ("darknet", "dcr", "crd")


def darknet_reorg_cpu(x, w, h, c, batch, stride, forward):
    """darknet's src/blas.c reorg_cpu, ported line for line; x is a flat array.

    YOLOv2's reorg layer calls it with the *input's* w, h, c and forward=0
    for its forward pass, and forward=1 for its backward pass.

    Args:
        x: flat array of batch*c*h*w elements.
        w, h, c, batch: the dimensions darknet passes (the reorg *input*'s, in YOLOv2).
        stride: the block size s.
        forward: darknet's flag (0 in YOLOv2's forward pass).

    Returns:
        flat float64 array of the same size.

    Example:
        >>> darknet_reorg_cpu(np.arange(8.0), w=2, h=1, c=4, batch=1, stride=2, forward=0)
        array([0., 2., 1., 3., 4., 6., 5., 7.])
    """
    x = np.asarray(x).reshape(-1)
    out = np.empty_like(x)
    out_c = c // (stride * stride)
    for b in range(batch):
        for k in range(c):
            for j in range(h):
                for i in range(w):
                    in_index = i + w * (j + h * (k + c * b))
                    c2 = k % out_c
                    offset = k // out_c
                    w2 = i * stride + offset % stride
                    h2 = j * stride + offset // stride
                    out_index = w2 + w * stride * (h2 + h * stride * (c2 + out_c * b))
                    if forward:
                        out[out_index] = x[in_index]
                    else:
                        out[in_index] = x[out_index]
    return out


def _check_order(order):
    if order not in REORG_ORDERS:
        raise ValueError(f"order must be one of {REORG_ORDERS}, got {order!r}")


def reorg_forward_loop(x, stride=2, order="darknet"):
    """One output element at a time: y[n, k, h, w] for every index, from the formulas above.

    Args:
        x: (N, C, H, W), H and W divisible by stride (C by stride**2 for darknet).
        stride: s.
        order: ``"darknet"``, ``"dcr"`` or ``"crd"``.

    Returns:
        (N, C*s*s, H/s, W/s).

    Example:
        >>> x = np.arange(4.0).reshape(1, 1, 2, 2)
        >>> reorg_forward_loop(x, 2, "crd").ravel()
        array([0., 1., 2., 3.])
    """
    _check_order(order)
    x = np.asarray(x)
    N, C, H, W = x.shape
    s = stride
    if order == "darknet":
        flat = darknet_reorg_cpu(x, W, H, C, N, s, forward=0)
        return flat.reshape(N, C * s * s, H // s, W // s)
    y = np.empty((N, C * s * s, H // s, W // s), dtype=x.dtype)
    for n in range(N):
        for c in range(C):
            for dy in range(s):
                for dx in range(s):
                    k = c * s * s + dy * s + dx if order == "crd" else (dy * s + dx) * C + c
                    for h in range(H // s):
                        for w in range(W // s):
                            y[n, k, h, w] = x[n, c, h * s + dy, w * s + dx]
    return y


def reorg_forward_numpy(x, stride=2, order="darknet"):
    """The same permutations as reshape + transpose (no loops).

    Args:
        x, stride, order: as for ``reorg_forward_loop``.

    Returns:
        (N, C*s*s, H/s, W/s).

    Example:
        >>> reorg_forward_numpy(np.zeros((2, 8, 4, 6)), 2, "darknet").shape
        (2, 32, 2, 3)
    """
    _check_order(order)
    x = np.asarray(x)
    N, C, H, W = x.shape
    s = stride
    if order == "darknet":  # dcr of the memory read as (N, C/s^2, H*s, W*s)
        y = reorg_forward_numpy(x.reshape(N, C // (s * s), H * s, W * s), s, "dcr")
        return y.reshape(N, C * s * s, H // s, W // s)
    x6 = x.reshape(N, C, H // s, s, W // s, s)  # [n, c, h, dy, w, dx]
    axes = (0, 1, 3, 5, 2, 4) if order == "crd" else (0, 3, 5, 1, 2, 4)  # crd: [n,c,dy,dx,h,w]; dcr: [n,dy,dx,c,h,w]
    return x6.transpose(axes).reshape(N, C * s * s, H // s, W // s)


def reorg_backward_numpy(grad_output, stride=2, order="darknet"):
    """The inverse permutation: grad_input[i] = grad_output[j] wherever forward did y[j] = x[i].

    Args:
        grad_output: (N, C*s*s, H/s, W/s).
        stride, order: as in the forward.

    Returns:
        grad_input, (N, C, H, W).

    Example:
        >>> x = np.random.default_rng(0).normal(size=(1, 4, 4, 4))
        >>> bool((reorg_backward_numpy(reorg_forward_numpy(x)) == x).all())
        True
    """
    _check_order(order)
    g = np.asarray(grad_output)
    N, Cs2, Ho, Wo = g.shape
    s = stride
    C, H, W = Cs2 // (s * s), Ho * s, Wo * s
    # Push the positions 0..n-1 through the forward: forward_index[j] = i means y[j] = x[i].
    forward_index = reorg_forward_numpy(np.arange(g.size).reshape(N, C, H, W), s, order).reshape(-1)
    grad_input = np.empty(g.size, dtype=g.dtype)
    grad_input[forward_index] = g.reshape(-1)
    return grad_input.reshape(N, C, H, W)
