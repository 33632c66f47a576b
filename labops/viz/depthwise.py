"""Depthwise convolution: the backward as a scatter or a gather, and the input span of a tiled thread.

Every position is computed, not drawn by hand: which inputs an output's window reads comes from
``F.unfold`` of an image whose values are their own (padded) indices, the counts from the compiled
``depthwise_conv2d_backward_input`` with all-ones weights and gradient, and a tile's input span from
the helpers of ``csrc/depthwise/depthwise.h`` (``tile_span``), checked against the union of its outputs' windows.
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Rectangle

from labops._checks import pair
from labops.viz._draw import _HIGHLIGHT, draw_matrix, new_figure


def _windows(in_hw, k, stride, padding):
    """For each output (oy, ox): the padded-grid (row, col) of each tap (kh, kw), from F.unfold of indices.

    Returns an int array (out_h, out_w, k, k, 2); padded row r is input row r - padding.
    """
    import torch
    import torch.nn.functional as F

    h, w = in_hw
    hp, wp = h + 2 * padding, w + 2 * padding
    index = torch.arange(hp * wp, dtype=torch.float64).reshape(1, 1, hp, wp)
    cols = F.unfold(index, k, stride=stride)[0].long().numpy()  # (k*k, L): padded index per tap, per output
    out_h, out_w = (hp - k) // stride + 1, (wp - k) // stride + 1
    taps = cols.T.reshape(out_h, out_w, k, k)
    return np.stack([taps // wp, taps % wp], axis=-1)


def _grid_ticks(ax, rows, cols, row0=0, col0=0):
    ax.set_xticks(np.arange(cols), [str(c + col0) for c in range(cols)], fontsize=7)
    ax.set_yticks(np.arange(rows), [str(r + row0) for r in range(rows)], fontsize=7)


def depthwise_scatter_gather(in_hw=(9, 9), kernel=3, stride=2, padding=1, output_pixel=(1, 2), input_pixel=(3, 3)):
    """updateGradInput two ways, on one channel of a depthwise layer (dilation 1).

    Left (scatter, one thread per output): the input grid; each cell holds how many outputs' windows
    cover it, i.e. how many threads would add into it (the compiled backward-input with all-ones weights
    and gradient): wherever it is above 1, the adds need atomics. The inputs ``output_pixel`` adds into
    are outlined (red Rectangles, gid ``"scatter"``). Right (gather, one thread per input): the output
    grid; the outputs whose windows cover ``input_pixel`` are outlined (gid ``"gather"``) and carry the
    tap (kh, kw) through which each read it; the thread sums w[tap] * gradOutput over them and writes
    one element. Windows come from ``F.unfold`` of an index image.
    """
    import torch

    from labops import ops  # noqa: F401  (loads the compiled library)

    (h, w) = pair(in_hw, "viz.depthwise_scatter_gather", "in_hw", min=1)
    win = _windows((h, w), kernel, stride, padding)
    out_h, out_w = win.shape[:2]
    oy, ox = output_pixel
    iy, ix = input_pixel
    if not (0 <= oy < out_h and 0 <= ox < out_w) or not (0 <= iy < h and 0 <= ix < w):
        raise ValueError(f"viz.depthwise_scatter_gather: output_pixel must be inside the {out_h}x{out_w} output "
                         f"and input_pixel inside the {h}x{w} input, got {output_pixel} and {input_pixel}")
    ones_g = torch.ones(1, 1, out_h, out_w, dtype=torch.float64)
    ones_w = torch.ones(1, 1, kernel, kernel, dtype=torch.float64)
    counts = torch.ops.labops.depthwise_conv2d_backward_input(ones_g, ones_w, [1, 1, h, w], [stride, stride],
                                                              [padding, padding], [1, 1])[0, 0].numpy()
    scattered = [(int(r) - padding, int(c) - padding) for r, c in win[oy, ox].reshape(-1, 2)]
    scattered = [(r, c) for r, c in scattered if 0 <= r < h and 0 <= c < w]  # taps in the padding add nothing
    gathered = {}
    for y in range(out_h):
        for x in range(out_w):
            for kh in range(kernel):
                for kw in range(kernel):
                    if tuple(win[y, x, kh, kw] - padding) == (iy, ix):
                        gathered[(y, x)] = (kh, kw)
    fig, (ax_s, ax_g) = new_figure(ncols=2, width=10.0, height=5.0)
    draw_matrix(ax_s, counts, cmap="Oranges", fmt="{:.0f}", xlabel="input x", ylabel="input y",
                title=f"scatter: output ({oy}, {ox}) adds into {len(scattered)} inputs (outlined);\n"
                      f"numbers: outputs adding into each input (>1: atomics)")
    for r, c in scattered:
        ax_s.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor=_HIGHLIGHT, linewidth=2.0,
                                 gid="scatter"))
    _grid_ticks(ax_s, h, w)
    mask = np.zeros((out_h, out_w))
    for (y, x) in gathered:
        mask[y, x] = 1.0
    draw_matrix(ax_g, mask, cmap="Blues", annotate=False, xlabel="output x", ylabel="output y",
                title=f"gather: the thread of input ({iy}, {ix}) reads the {len(gathered)} outputs\n"
                      f"whose windows cover it (text: the tap (kh, kw))")
    for (y, x), (kh, kw) in gathered.items():
        ax_g.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor=_HIGHLIGHT, linewidth=2.0,
                                 gid="gather"))
        ax_g.text(x, y, f"({kh},{kw})", ha="center", va="center", fontsize=8, color="white")
    _grid_ticks(ax_g, out_h, out_w)
    fig.suptitle(f"depthwise {kernel}x{kernel}, stride {stride}, padding {padding}: {h}x{w} input, "
                 f"{out_h}x{out_w} output, one channel")
    return fig


def depthwise_tile(in_hw=(9, 12), kernel=3, stride=1, padding=1, tile=(4, 2), tile_index=(1, 1)):
    """The inputs one tiled CUDA thread of the depthwise forward loads, for its tile of outputs.

    Left: the output grid, the thread's ``tile`` = (V, U) outputs (tile ``tile_index`` = (row tile,
    column tile), as ``tile_first``) outlined (gid ``"tile"``). Right: the input grid with its zero
    padding (grey), the span the thread loads, ``tile_span(V, S, K) x tile_span(U, S, K)`` inputs from
    row ``oh0*S - p`` and column ``ow0*S - p`` on, outlined (gid ``"span"``); each cell holds how many of
    the tile's outputs read it (from ``F.unfold`` windows), so the numbers say how often one load is
    reused. The title compares the loads (the span's cells inside the input: the padding is zeros,
    never loaded) with ``V*U*K*K``, one load per tap and output. Raises
    ``AssertionError`` if the windows' union is not the span the helpers give.
    """
    (h, w) = pair(in_hw, "viz.depthwise_tile", "in_hw", min=1)
    v, u = tile
    win = _windows((h, w), kernel, stride, padding)
    out_h, out_w = win.shape[:2]
    oh0, ow0 = tile_index[0] * v, tile_index[1] * u  # tile_first
    if not (0 <= oh0 < out_h and 0 <= ow0 < out_w):
        raise ValueError(f"viz.depthwise_tile: tile {tile_index} starts outside the {out_h}x{out_w} output")
    span_h, span_w = (v - 1) * stride + kernel, (u - 1) * stride + kernel  # tile_span
    ih0, iw0 = oh0 * stride - padding, ow0 * stride - padding  # input_coord(o0, 0)
    hp, wp = h + 2 * padding, w + 2 * padding
    reads = np.zeros((hp, wp))
    outputs = [(y, x) for y in range(oh0, min(oh0 + v, out_h)) for x in range(ow0, min(ow0 + u, out_w))]
    for y, x in outputs:
        for r, c in win[y, x].reshape(-1, 2):
            reads[r, c] += 1
    rows, cols = np.nonzero(reads)
    if len(outputs) == v * u:
        assert (rows.min() - padding, cols.min() - padding) == (ih0, iw0)
        assert (rows.max() - rows.min() + 1, cols.max() - cols.min() + 1) == (span_h, span_w)
    fig, (ax_o, ax_i) = new_figure(ncols=2, width=10.0, height=5.0)
    tile_mask = np.zeros((out_h, out_w))
    for y, x in outputs:
        tile_mask[y, x] = 1.0
    draw_matrix(ax_o, tile_mask, cmap="Blues", annotate=False, xlabel="output x", ylabel="output y",
                title=f"one thread's tile: {v}x{u} outputs from ({oh0}, {ow0})\n(tile {tuple(tile_index)})")
    ax_o.add_patch(Rectangle((ow0 - 0.5, oh0 - 0.5), u, v, fill=False, edgecolor=_HIGHLIGHT, linewidth=2.0,
                             gid="tile", zorder=5))
    _grid_ticks(ax_o, out_h, out_w)
    pad_mask = np.ones((hp, wp), dtype=bool)
    pad_mask[padding:padding + h, padding:padding + w] = False
    loads = int(((reads > 0) & ~pad_mask).sum())  # the padding is zeros: never loaded
    draw_matrix(ax_i, reads, cmap="Oranges", fmt="{:.0f}", dim=pad_mask, xlabel="input x (grey: zero padding)",
                ylabel="input y",
                title=f"its span: tile_span({v}, {stride}, {kernel}) x tile_span({u}, {stride}, {kernel}) = "
                      f"{span_h}x{span_w} inputs,\neach loaded once: {loads} loads, not {v * u * kernel * kernel}\n"
                      f"(numbers: how many of its outputs read each)")
    for t in ax_i.texts:  # blank the zeros: only the span carries numbers
        if t.get_text() == "0":
            t.set_text("")
    ax_i.add_patch(Rectangle((iw0 + padding - 0.5, ih0 + padding - 0.5), span_w, span_h, fill=False,
                             edgecolor=_HIGHLIGHT, linewidth=2.0, gid="span", zorder=5))
    _grid_ticks(ax_i, hp, wp, row0=-padding, col0=-padding)
    for ax, (r, c) in ((ax_o, (out_h, out_w)), (ax_i, (hp, wp))):  # thin lines between the cells
        ax.title.set_fontsize(10)
        ax.set_xticks(np.arange(c + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(r + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", linewidth=0.8, zorder=1)
        ax.tick_params(which="minor", length=0)
    fig.suptitle(f"depthwise {kernel}x{kernel} forward, stride {stride}, padding {padding}, {h}x{w} input: "
                 f"what one tiled CUDA thread computes and loads")
    return fig
