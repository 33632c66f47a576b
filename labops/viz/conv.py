"""im2col: an image's receptive fields unfolded into the columns matrix of a convolution."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from labops._checks import pair
from labops.reference.conv2d_mm import conv_out_size, im2col_loop
from labops.viz._draw import draw_matrix

def im2col_numpy(x, kernel_size, stride=1, padding=0, dilation=1):
    """The columns matrix of one image x (C, H, W): shape (C*kH*kW, outH*outW), as F.unfold lays it out.

    Row (c*kH + ki)*kW + kj, column oy*outW + ox holds
    x[c, oy*sH - pH + ki*dH, ox*sW - pW + kj*dW] (0 where that falls in the padding):
    ``reference.im2col_loop`` on a batch of one.
    """
    return im2col_loop(np.asarray(x)[None], kernel_size, stride, padding, dilation)[0]


def im2col_figure(x, kernel_size, stride=1, padding=0, dilation=1, highlight=(0, 0), columns=None):
    """The input's channels (padding greyed) beside its columns matrix, one receptive field outlined.

    ``highlight`` = (oy, ox): the output position whose receptive field is
    outlined in the input and whose column is outlined in the matrix.
    ``columns``: the matrix to draw (e.g. from a compiled im2col); computed
    with ``im2col_numpy`` when not given. Axes: one per channel, then one for
    the matrix.
    """
    x = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (
        pair(value, "viz.im2col_figure", arg, min=least)
        for value, arg, least in ((kernel_size, "kernel_size", 1), (stride, "stride", 1), (padding, "padding", 0),
                                (dilation, "dilation", 1))
    )
    c_in, h, w = x.shape
    if columns is None:
        columns = im2col_numpy(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw))
    columns = np.asarray(columns.detach().cpu() if hasattr(columns, "detach") else columns, dtype=np.float64)
    out_h, out_w = conv_out_size(h, kh, sh, ph, dh), conv_out_size(w, kw, sw, pw, dw)
    if columns.shape != (c_in * kh * kw, out_h * out_w):
        raise ValueError(f"viz.im2col_figure: columns must have shape {(c_in * kh * kw, out_h * out_w)}, "
                         f"got {columns.shape}")
    oy, ox = highlight
    if not (0 <= oy < out_h and 0 <= ox < out_w):
        raise ValueError(f"viz.im2col_figure: highlight must be inside the {out_h}x{out_w} output, got {highlight}")
    col = oy * out_w + ox
    padded = np.pad(x, ((0, 0), (ph, ph), (pw, pw)))
    in_pad = np.zeros(padded.shape[1:], dtype=bool)
    in_pad[:ph, :], in_pad[padded.shape[1] - ph:, :] = True, True
    in_pad[:, :pw], in_pad[:, padded.shape[2] - pw:] = True, True
    field = [(oy * sh + ki * dh, ox * sw + kj * dw) for ki in range(kh) for kj in range(kw)]
    width_ratios = [padded.shape[2]] * c_in + [max(out_h * out_w, 4)]
    fig = Figure(figsize=(min(16.0, 2.2 + 0.45 * sum(width_ratios)), 1.6 + 0.42 * max(c_in * kh * kw, padded.shape[1])),
                 layout="constrained")
    axes = fig.subplots(1, c_in + 1, gridspec_kw={"width_ratios": width_ratios})
    for c in range(c_in):
        draw_matrix(axes[c], padded[c], title=f"input channel {c}" + (" (padded)" if ph or pw else ""),
                    xlabel="x (padded)" if pw else "x", ylabel="y (padded)" if ph else "y", highlight=field,
                    dim=in_pad)
    draw_matrix(axes[-1], columns, title=f"columns: (C*kH*kW) x (outH*outW) = {columns.shape[0]} x {columns.shape[1]}",
                xlabel="output position oy*outW + ox", ylabel="(c*kH + ki)*kW + kj",
                highlight=[(r, col) for r in range(columns.shape[0])])
    fig.suptitle(f"im2col: kernel {kh}x{kw}, stride {sh},{sw}, padding {ph},{pw}, dilation {dh},{dw}; "
                 f"output ({oy}, {ox}) reads the outlined cells")
    return fig
