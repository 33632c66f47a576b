"""Bilinear upsampling in plain Python and NumPy.

Compare with csrc/upsample/upsample.h: ``source_taps`` here is ``source_taps``
there, and the loops compute what one CUDA thread or one CPU loop iteration
computes for one element.

Per dimension, output index ``x`` reads the source coordinate ``src``:

    half_pixel     src = (x + 0.5) * scale - 0.5, clamped at 0   (PyTorch align_corners=False)
    align_corners  src = x * (in - 1) / (out - 1)                (0 when out == 1)
    asymmetric     src = x * scale                               (TF1 / TFLite default)

with ``scale = in / out``, or ``1 / scale_factor`` when the caller gave a scale factor.
Then ``i0 = floor(src)``, ``i1 = min(i0 + 1, in - 1)``, ``lambda = src - i0`` and

    y[x] = (1 - lambda) * x_in[i0] + lambda * x_in[i1]

done along h and along w. The weights form a matrix ``A`` (out x in) per
dimension: ``y = A_h @ x @ A_w.T`` for each (n, c) plane, so the gradient is
``grad_x = A_h.T @ grad_y @ A_w``. Computed by scattering (each output pushes
into the four inputs it read) or by gathering (each input pulls from the
outputs that read it).
"""

import math

import numpy as np

__all__ = [
    "COORDINATE_MODES",
    "coordinate_table",
    "interpolation_matrix",
    "source_coordinate",
    "source_taps",
    "upsample_backward_gather_loop",
    "upsample_backward_numpy",
    "upsample_backward_scatter_loop",
    "upsample_forward_loop",
    "upsample_forward_numpy",
]

COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric")


def _scale(in_size, out_size, mode, scale_factor=None):
    if mode == "align_corners":
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale_factor is not None:
        return 1.0 / scale_factor  # F.interpolate's step when given scale_factor
    return in_size / out_size


def source_coordinate(x, in_size, out_size, mode, scale_factor=None):
    """The (fractional) input coordinate that output index x samples.

    Args:
        x: output index along one axis.
        in_size, out_size: the axis's input and output sizes.
        mode: "half_pixel", "align_corners" or "asymmetric".
        scale_factor: the caller's scale factor, when given instead of a size (the scale is then
            1 / scale_factor, as in F.interpolate).

    Returns:
        float, the source coordinate (clamped at 0 for half_pixel).

    Example:
        >>> [source_coordinate(1, 2, 4, m) for m in ("half_pixel", "align_corners", "asymmetric")]
        [0.25, 0.3333333333333333, 0.5]
    """
    scale = _scale(in_size, out_size, mode, scale_factor)
    if mode == "half_pixel":
        return max((x + 0.5) * scale - 0.5, 0.0)  # pixel centres at +0.5; clamp the first half pixel
    if mode in ("align_corners", "asymmetric"):
        return x * scale
    raise ValueError(f"mode must be one of {COORDINATE_MODES}, got {mode!r}")


def source_taps(x, in_size, out_size, mode, scale_factor=None):
    """(i0, i1, lambda): output x = (1 - lambda) * in[i0] + lambda * in[i1].

    Args:
        x, in_size, out_size, mode, scale_factor: as for source_coordinate.

    Returns:
        (i0, i1, lam): the two input indices (i1 clamped to in_size - 1) and the weight of i1.

    Example:
        >>> source_taps(3, 2, 4, "half_pixel")
        (1, 1, 0.25)
    """
    src = source_coordinate(x, in_size, out_size, mode, scale_factor)
    i0 = min(math.floor(src), in_size - 1)
    i1 = min(i0 + 1, in_size - 1)
    return i0, i1, src - i0


def coordinate_table(in_size, out_size, scale_factor=None):
    """For each mode, the source coordinate of every output index: {mode: [src, ...]}.

    Side by side, this is the train-in-PyTorch / deploy-in-TFLite mismatch: for
    a x2 upsample, half_pixel reads -0.25, 0.25, 0.75, ... (clamped at 0) while
    asymmetric reads 0, 0.5, 1, ...: the same layer, shifted by a quarter pixel.

    Example:
        >>> coordinate_table(2, 4)["asymmetric"]
        [0.0, 0.5, 1.0, 1.5]
    """
    return {mode: [source_coordinate(x, in_size, out_size, mode, scale_factor) for x in range(out_size)]
            for mode in COORDINATE_MODES}


def interpolation_matrix(in_size, out_size, mode, scale_factor=None):
    """A (out x in) with y = A @ x along one dimension.

    Args:
        in_size, out_size, mode, scale_factor: one axis, as for ``source_coordinate``.

    Returns:
        (out_size, in_size) float64 matrix A with y = A @ x along that axis.

    Example:
        >>> interpolation_matrix(2, 4, "align_corners").round(3)
        array([[1.   , 0.   ],
               [0.667, 0.333],
               [0.333, 0.667],
               [0.   , 1.   ]])
    """
    a = np.zeros((out_size, in_size))
    for x in range(out_size):
        i0, i1, lam = source_taps(x, in_size, out_size, mode, scale_factor)
        a[x, i0] += 1.0 - lam
        a[x, i1] += lam  # i1 == i0 at the last pixel: both weights land there
    return a


def _sizes(shape, out_hw):
    n, c, h, w = shape
    return n, c, h, w, out_hw[0], out_hw[1]


def upsample_forward_loop(x, out_hw, mode="half_pixel", scale_factors=(None, None)):
    """y[n, c, oy, ox] from the four neighbours of its source point.

    Args:
        x: (N, C, H, W).
        out_hw: (out_h, out_w).
        mode: "half_pixel", "align_corners" or "asymmetric".
        scale_factors: (scale_h, scale_w) the caller gave, or None each.

    Returns:
        float64 (N, C, out_h, out_w).

    Example:
        >>> upsample_forward_loop(np.array([[[[0.0, 1.0]]]]), (1, 4))[0, 0]
        array([[0.  , 0.25, 0.75, 1.  ]])
    """
    x = np.asarray(x, dtype=np.float64)
    n, c, h, w, oh, ow = _sizes(x.shape, out_hw)
    y = np.empty((n, c, oh, ow))
    for oy in range(oh):
        h0, h1, lh = source_taps(oy, h, oh, mode, scale_factors[0])
        for ox in range(ow):
            w0, w1, lw = source_taps(ox, w, ow, mode, scale_factors[1])
            top = (1 - lw) * x[:, :, h0, w0] + lw * x[:, :, h0, w1]
            bottom = (1 - lw) * x[:, :, h1, w0] + lw * x[:, :, h1, w1]
            y[:, :, oy, ox] = (1 - lh) * top + lh * bottom
    return y


def upsample_backward_scatter_loop(grad_y, in_hw, mode="half_pixel", scale_factors=(None, None)):
    """Form (a): every output pushes its gradient into the four inputs it read.

    On a GPU, one thread per output: two threads may add to the same input at
    once, hence atomicAdd, and a float sum whose order changes from run to run.

    Args:
        grad_y: (N, C, out_h, out_w).
        in_hw: (H, W) of the forward input.
        mode, scale_factors: as in the forward.

    Returns:
        grad_x, float64, (N, C, H, W).

    Example:
        >>> upsample_backward_scatter_loop(np.ones((1, 1, 1, 4)), (1, 2))[0, 0]
        array([[2., 2.]])
    """
    g = np.asarray(grad_y, dtype=np.float64)
    n, c, oh, ow = g.shape
    h, w = in_hw
    grad_x = np.zeros((n, c, h, w))
    for oy in range(oh):
        h0, h1, lh = source_taps(oy, h, oh, mode, scale_factors[0])
        for ox in range(ow):
            w0, w1, lw = source_taps(ox, w, ow, mode, scale_factors[1])
            grad_x[:, :, h0, w0] += (1 - lh) * (1 - lw) * g[:, :, oy, ox]
            grad_x[:, :, h0, w1] += (1 - lh) * lw * g[:, :, oy, ox]
            grad_x[:, :, h1, w0] += lh * (1 - lw) * g[:, :, oy, ox]
            grad_x[:, :, h1, w1] += lh * lw * g[:, :, oy, ox]
    return grad_x


def _weight(taps, i):
    """How much an output with these taps reads input index i (one entry of A)."""
    i0, i1, lam = taps
    return (1 - lam if i0 == i else 0.0) + (lam if i1 == i else 0.0)


def upsample_backward_gather_loop(grad_y, in_hw, mode="half_pixel", scale_factors=(None, None)):
    """Form (b): every input pulls from the outputs that read it. Deterministic.

    Because src grows with the output index, the outputs reading input i are one
    contiguous range (those with i0 in {i - 1, i}); the compiled op finds its
    ends directly instead of testing every output as this loop does.

    Args:
        grad_y, in_hw, mode, scale_factors: as for ``upsample_backward_scatter_loop``.

    Returns:
        grad_x, float64, (N, C, H, W): the same numbers as the scatter form.

    Example:
        >>> upsample_backward_gather_loop(np.ones((1, 1, 1, 4)), (1, 2))[0, 0]
        array([[2., 2.]])
    """
    g = np.asarray(grad_y, dtype=np.float64)
    n, c, oh, ow = g.shape
    h, w = in_hw
    rows = [source_taps(oy, h, oh, mode, scale_factors[0]) for oy in range(oh)]
    cols = [source_taps(ox, w, ow, mode, scale_factors[1]) for ox in range(ow)]
    grad_x = np.zeros((n, c, h, w))
    for ih in range(h):
        readers_h = [oy for oy in range(oh) if _weight(rows[oy], ih) != 0]
        for iw in range(w):
            readers_w = [ox for ox in range(ow) if _weight(cols[ox], iw) != 0]
            for oy in readers_h:
                for ox in readers_w:
                    grad_x[:, :, ih, iw] += _weight(rows[oy], ih) * _weight(cols[ox], iw) * g[:, :, oy, ox]
    return grad_x


def upsample_forward_numpy(x, out_hw, mode="half_pixel", scale_factors=(None, None)):
    """y = A_h @ x @ A_w.T, plane by plane.

    Args:
        x: (N, C, H, W); out_hw, mode, scale_factors: as for ``upsample_forward_loop``.

    Returns:
        float64 (N, C, out_h, out_w).

    Example:
        >>> upsample_forward_numpy(np.ones((1, 2, 3, 3)), (6, 6)).shape
        (1, 2, 6, 6)
    """
    x = np.asarray(x, dtype=np.float64)
    a_h = interpolation_matrix(x.shape[2], out_hw[0], mode, scale_factors[0])
    a_w = interpolation_matrix(x.shape[3], out_hw[1], mode, scale_factors[1])
    return a_h @ x @ a_w.T


def upsample_backward_numpy(grad_y, in_hw, mode="half_pixel", scale_factors=(None, None)):
    """grad_x = A_h.T @ grad_y @ A_w.

    Args:
        grad_y: (N, C, out_h, out_w); in_hw, mode, scale_factors: as for the forward.

    Returns:
        grad_x, float64, (N, C, H, W).

    Example:
        >>> upsample_backward_numpy(np.ones((1, 1, 1, 4)), (1, 2))[0, 0]
        array([[2., 2.]])
    """
    g = np.asarray(grad_y, dtype=np.float64)
    a_h = interpolation_matrix(in_hw[0], g.shape[2], mode, scale_factors[0])
    a_w = interpolation_matrix(in_hw[1], g.shape[3], mode, scale_factors[1])
    return a_h.T @ g @ a_w
