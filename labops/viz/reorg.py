"""reorg (YOLOv2's passthrough layer): where each output element is copied from, per channel order."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch

from labops.viz._draw import _BLOCK_COLOURS, new_figure

def reorg_channel_maps(shape=(1, 4, 4, 4), stride: int = 2, orders=("darknet", "dcr", "crd")):
    """Where every output element of ``labops.reorg`` comes from, one panel per order.

    The input is ``arange`` over ``shape`` (N must be 1), so each output value
    *is* the flat index of the input element it copies. One row per output
    channel, one column per output position (h * W/s + w); the colour is the
    source's input channel and the text its (row, column) in the input.
    One image per panel, one text per cell, one legend patch per input channel.
    """
    import torch
    from matplotlib.colors import ListedColormap

    from labops import ops

    n, c, h, w = shape
    if n != 1:
        raise ValueError(f"reorg_channel_maps: shape must have N = 1, got {tuple(shape)}")
    x = torch.arange(n * c * h * w, dtype=torch.float64).reshape(shape)
    s = stride
    rows, cols = c * s * s, (h // s) * (w // s)
    colours = [_BLOCK_COLOURS[k % len(_BLOCK_COLOURS)] for k in range(c)]
    fig, axes = new_figure(ncols=len(orders), width=1.2 + len(orders) * (1.2 + 0.75 * cols),
                           height=1.6 + 0.36 * rows)
    for ax, order in zip(axes, orders):
        src = ops.reorg(x, s, order)[0].reshape(rows, cols).numpy().astype(np.int64)
        src_c, rem = np.divmod(src, h * w)
        src_h, src_w = np.divmod(rem, w)
        ax.imshow(src_c, cmap=ListedColormap(colours), vmin=-0.5, vmax=c - 0.5, aspect="auto")
        for i in range(rows):
            for j in range(cols):
                ax.text(j, i, f"{src_h[i, j]},{src_w[i, j]}", ha="center", va="center", fontsize=7, color="white")
        ax.set_title(f"order = {order!r}")
        ax.set_xticks(range(cols))
        ax.set_yticks(range(rows))
        ax.set_xlabel("output position (h * W/s + w)")
        ax.set_ylabel("output channel")
    fig.legend(handles=[Patch(facecolor=colours[k], label=f"input channel {k}") for k in range(c)],
               loc="outside right upper", fontsize=8, frameon=False)
    fig.suptitle(f"reorg of a {n}x{c}x{h}x{w} input, stride {s}: source channel (colour) and (row, column) (text)")
    return fig
