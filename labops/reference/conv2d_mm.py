"""im2col, col2im and THNN's SpatialConvolutionMM, as plain loops.

This is how Torch7's SpatialConvolutionMM computes a convolution: unfold
every receptive field of the image into one column of a matrix (im2col), so
the convolution becomes one matrix product per image:

    columns[n]  : (C*kH*kW) x L     L = out_h * out_w window positions
    weight      : O x (C*kH*kW)     (O, C, kH, kW) viewed as a matrix
    output[n]   = weight @ columns[n] + bias       (O x L, i.e. (O, out_h, out_w))

and the three functions of the layer are
    updateOutput        output[n]       = W @ columns[n] + b
    updateGradInput     grad_columns[n] = W^T @ grad_output[n];  grad_input[n] = col2im(grad_columns[n])
    accGradParameters   grad_weight    += scale * grad_output[n] @ columns[n]^T
                        grad_bias      += scale * sum over (oh, ow) of grad_output[n]

Compare with csrc/conv2d_mm/conv2d_mm.h: `im2col_loop` does, one element at a time,
what a CUDA thread does in `im2col_source`; `col2im_loop` is the scatter
form, the compiled op's `col2im_gather` the same sums collected per pixel.
Arrays are NumPy float64; shapes as in F.unfold / F.fold / F.conv2d.
"""

import numpy as np

from labops._checks import conv_output_size, pair

__all__ = [
    "col2im_loop",
    "conv2d_mm_acc_grad_parameters_loop",
    "conv2d_mm_backward_input_loop",
    "conv2d_mm_forward_loop",
    "conv_out_size",
    "im2col_loop",
    "window_pixels",
]


def _pairs(*values):
    """(h, w) pairs from ints or pairs: every size argument of the loops below takes either."""
    return [pair(v, "reference.conv2d_mm", "size") for v in values]


# The output-size rule of every convolution (``labops._checks.conv_output_size``, the same formula the
# C++ ops use): (size + 2 pad - dilation (kernel - 1) - 1) // stride + 1 window positions along one axis.
conv_out_size = conv_output_size


def window_pixels(channels, in_hw, kernel, stride, padding, dilation):
    """Every (c, row, col, ih, iw) where column entry (row, col) of im2col is input pixel (c, ih, iw).

    Row ``(c*kH + kh)*kW + kw`` is tap (kh, kw) of channel c; column ``oh*out_w + ow`` is window
    (oh, ow); the tap reads ``ih = oh*stride_h - pad_h + kh*dilation_h`` (and the same for w).
    Entries whose pixel lies in the zero padding are not listed. im2col copies along these pairs
    and col2im adds along them: the two are adjoint because they share this one list.

    Example:
        >>> list(window_pixels(1, (2, 2), (2, 2), (1, 1), (0, 0), (1, 1)))
        [(0, 0, 0, 0, 0), (0, 1, 0, 0, 1), (0, 2, 0, 1, 0), (0, 3, 0, 1, 1)]
    """
    (h_, w_), (kh_, kw_), (sh, sw), (ph, pw), (dh, dw) = in_hw, kernel, stride, padding, dilation
    out_h, out_w = conv_out_size(h_, kh_, sh, ph, dh), conv_out_size(w_, kw_, sw, pw, dw)
    for c in range(channels):
        for kh in range(kh_):
            for kw in range(kw_):
                row = (c * kh_ + kh) * kw_ + kw
                for oh in range(out_h):
                    for ow in range(out_w):
                        ih = oh * sh - ph + kh * dh
                        iw = ow * sw - pw + kw * dw
                        if 0 <= ih < h_ and 0 <= iw < w_:
                            yield c, row, oh * out_w + ow, ih, iw


def im2col_loop(x, kernel_size, stride=1, padding=0, dilation=1):
    """x (N, C, H, W) -> columns (N, C*kH*kW, L); row (c, kh, kw), column (oh, ow).

    ::

        columns[n, (c*kH + kh)*kW + kw, oh*out_w + ow] = x[n, c, ih, iw] with
            ih = oh*stride_h - pad_h + kh*dilation_h,  iw = ow*stride_w - pad_w + kw*dilation_w

    and 0 where (ih, iw) is in the zero padding.

    Args:
        x: (N, C, H, W).
        kernel_size, stride, padding, dilation: an int or an (h, w) pair.

    Returns:
        columns, float64, (N, C*kH*kW, out_h*out_w).

    Example:
        >>> im2col_loop(np.arange(9.0).reshape(1, 1, 3, 3), 2)[0]
        array([[0., 1., 3., 4.],
               [1., 2., 4., 5.],
               [3., 4., 6., 7.],
               [4., 5., 7., 8.]])
    """
    x = np.asarray(x, dtype=np.float64)
    (kh_, kw_), (sh, sw), (ph, pw), (dh, dw) = _pairs(kernel_size, stride, padding, dilation)
    n_, c_, h_, w_ = x.shape
    out_h, out_w = conv_out_size(h_, kh_, sh, ph, dh), conv_out_size(w_, kw_, sw, pw, dw)
    cols = np.zeros((n_, c_ * kh_ * kw_, out_h * out_w))
    for c, row, col, ih, iw in window_pixels(c_, (h_, w_), (kh_, kw_), (sh, sw), (ph, pw), (dh, dw)):
        cols[:, row, col] = x[:, c, ih, iw]  # a copy: each column entry is one input pixel
    return cols


def col2im_loop(cols, output_size, kernel_size, stride=1, padding=0, dilation=1):
    """columns (N, C*kH*kW, L) -> image (N, C, H, W): the adjoint of im2col.

    Every column entry is ADDED to the pixel it was copied from, so a pixel
    that k windows see receives k contributions. col2im(im2col(x)) is x times
    the number of windows covering each pixel, not x.

    Args:
        cols: (N, C*kH*kW, L).
        output_size: (H, W) of the image.
        kernel_size, stride, padding, dilation: an int or an (h, w) pair, as for im2col.

    Returns:
        image, float64, (N, C, H, W).

    Example: each pixel comes back times the number of 2x2 windows that cover it.

        >>> cols = im2col_loop(np.ones((1, 1, 3, 3)), 2)
        >>> col2im_loop(cols, (3, 3), 2)[0, 0]
        array([[1., 2., 1.],
               [2., 4., 2.],
               [1., 2., 1.]])
    """
    cols = np.asarray(cols, dtype=np.float64)
    (h_, w_), (kh_, kw_), (sh, sw), (ph, pw), (dh, dw) = _pairs(
        output_size, kernel_size, stride, padding, dilation)
    n_, rows, _ = cols.shape
    c_ = rows // (kh_ * kw_)
    image = np.zeros((n_, c_, h_, w_))
    for c, row, col, ih, iw in window_pixels(c_, (h_, w_), (kh_, kw_), (sh, sw), (ph, pw), (dh, dw)):
        image[:, c, ih, iw] += cols[:, row, col]  # a sum: a pixel in k windows gets k entries
    return image


def conv2d_mm_forward_loop(x, weight, bias=None, stride=1, padding=0, dilation=1):
    """updateOutput: one GEMM per image on the unfolded columns.

    Args:
        x: (N, C, H, W).
        weight: (O, C, kH, kW).
        bias: (O,) or None.
        stride, padding, dilation: an int or an (h, w) pair.

    Returns:
        output, float64, (N, O, out_h, out_w).

    Example:
        >>> out = conv2d_mm_forward_loop(np.ones((1, 2, 4, 4)), np.ones((3, 2, 3, 3)), padding=1)
        >>> out.shape, float(out[0, 0, 1, 1])  # 2 channels x 3 x 3 taps of ones
        ((1, 3, 4, 4), 18.0)
    """
    x = np.asarray(x, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    o_, c_, kh_, kw_ = weight.shape
    n_, _, h_, w_ = x.shape
    (sh, sw), (ph, pw), (dh, dw) = _pairs(stride, padding, dilation)
    out_h, out_w = conv_out_size(h_, kh_, sh, ph, dh), conv_out_size(w_, kw_, sw, pw, dw)
    columns = im2col_loop(x, (kh_, kw_), stride, padding, dilation)  # (N, C*kH*kW, L)
    w2 = weight.reshape(o_, c_ * kh_ * kw_)                           # (O, C*kH*kW)
    output = np.zeros((n_, o_, out_h * out_w))
    for n in range(n_):
        output[n] = w2 @ columns[n]                                   # (O, L)
        if bias is not None:
            output[n] += np.asarray(bias, dtype=np.float64)[:, None]  # THNN: ones-vector GEMM
    return output.reshape(n_, o_, out_h, out_w)


def conv2d_mm_backward_input_loop(grad_output, weight, input_size, stride=1, padding=0, dilation=1):
    """updateGradInput: grad_columns = W^T @ grad_output[n], then col2im sums them into the image.

    Why col2im: output[n] = W @ columns[n] and columns[n] = im2col(x[n]) are
    both linear, so dE/dx[n] = im2col^T(W^T @ dE/doutput[n]), and the
    transpose (adjoint) of im2col is col2im.

    Args:
        grad_output: (N, O, out_h, out_w).
        weight: (O, C, kH, kW).
        input_size: (H, W) of the forward input.
        stride, padding, dilation: as in the forward.

    Returns:
        grad_input, float64, (N, C, H, W).

    Example:
        >>> g = conv2d_mm_backward_input_loop(np.ones((1, 1, 2, 2)), np.ones((1, 1, 2, 2)), (3, 3))
        >>> g[0, 0]
        array([[1., 2., 1.],
               [2., 4., 2.],
               [1., 2., 1.]])
    """
    g = np.asarray(grad_output, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    o_, c_, kh_, kw_ = weight.shape
    n_ = g.shape[0]
    w2 = weight.reshape(o_, c_ * kh_ * kw_)
    g3 = g.reshape(n_, o_, -1)
    grad_columns = np.stack([w2.T @ g3[n] for n in range(n_)])       # (N, C*kH*kW, L)
    return col2im_loop(grad_columns, input_size[-2:], (kh_, kw_), stride, padding, dilation)


def conv2d_mm_acc_grad_parameters_loop(grad_output, x, grad_weight, grad_bias=None, stride=1, padding=0,
                                       dilation=1, scale=1.0):
    """accGradParameters: ACCUMULATE scale * dE/dW (and dE/db) into the given arrays, in place.

    grad_weight += scale * sum_n grad_output[n] @ columns[n]^T
    grad_bias   += scale * sum_n sum_(oh, ow) grad_output[n]
    Calling it twice with scale 0.5 gives what one call with scale 1 gives.

    Args:
        grad_output: (N, O, out_h, out_w).
        x: the forward input, (N, C, H, W).
        grad_weight: (O, C, kH, kW) float64 array, updated in place.
        grad_bias: (O,) float64 array updated in place, or None.
        stride, padding, dilation: as in the forward.
        scale: the factor of this call's contribution.

    Returns:
        (grad_weight, grad_bias), the same arrays, updated in place.

    Example:
        >>> gw, gb = np.zeros((1, 1, 2, 2)), np.zeros(1)
        >>> for _ in range(2):  # twice with scale 0.5: the same as once with scale 1
        ...     _ = conv2d_mm_acc_grad_parameters_loop(np.ones((1, 1, 2, 2)), np.ones((1, 1, 3, 3)), gw, gb,
        ...                                            scale=0.5)
        >>> gb, gw[0, 0]
        (array([4.]), array([[4., 4.],
               [4., 4.]]))
    """
    g = np.asarray(grad_output, dtype=np.float64)
    o_, c_, kh_, kw_ = grad_weight.shape
    n_ = g.shape[0]
    columns = im2col_loop(x, (kh_, kw_), stride, padding, dilation)
    g3 = g.reshape(n_, o_, -1)
    gw2 = grad_weight.reshape(o_, c_ * kh_ * kw_)  # a view: writes land in grad_weight
    for n in range(n_):
        gw2 += scale * (g3[n] @ columns[n].T)
        if grad_bias is not None:
            grad_bias += scale * g3[n].sum(axis=1)
    return grad_weight, grad_bias
