"""Bilinear upsampling: where outputs sample the source, scatter beside gather, mode differences."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Rectangle

from labops._checks import pair
from labops.viz._draw import _HIGHLIGHT, draw_matrix, new_figure

_MODE_COLOURS = {"half_pixel": "#4e79a7", "align_corners": "#59a14f", "asymmetric": "#e15759"}


def upsample_sampling_positions(resizes=((4, 8), (8, 3)), modes=None, scale_factor=None):
    """Where each output pixel samples the source, per coordinate mode, over the source pixel grid.

    One axes per ``(in_size, out_size)`` resize (one dimension). The grey and
    white cells are the source pixels, pixel i covering [i - 0.5, i + 0.5]
    with its centre at i. Each coordinate mode gets a row of markers at the
    source coordinate ``labops.reference.source_coordinate`` gives each output
    index (labelled with that index). For half_pixel, a hollow marker shows
    where the formula points before the clamp at 0. One marker line per mode
    (plus one per clamped half_pixel row), one Rectangle per source pixel.
    """
    from labops import reference

    modes = tuple(modes or reference.COORDINATE_MODES)
    fig, axes = new_figure(nrows=len(resizes), width=10.0, height=0.6 + (0.75 + 0.45 * len(modes)) * len(resizes))
    for ax, (n_in, n_out) in zip(axes, resizes):
        for i in range(n_in):
            ax.add_patch(Rectangle((i - 0.5, -0.5), 1.0, len(modes), facecolor="#e6e6e6" if i % 2 == 0 else "white",
                                   edgecolor="#999999", linewidth=0.8, zorder=0))
        ax.vlines(np.arange(n_in), -0.5, len(modes) - 0.5, colors="#bbbbbb", linestyles=":", linewidth=0.8)
        for row, mode in enumerate(modes):
            src = np.array([reference.source_coordinate(x, n_in, n_out, mode, scale_factor) for x in range(n_out)])
            y = np.full(n_out, row, dtype=np.float64)
            ax.plot(src, y, "o", ms=6, color=_MODE_COLOURS.get(mode, "black"), label=mode, zorder=3)
            for x, s in enumerate(src):
                ax.text(s, row + 0.22, str(x), ha="center", va="bottom", fontsize=7,
                        color=_MODE_COLOURS.get(mode, "black"))
            if mode == "half_pixel":
                step = 1.0 / scale_factor if scale_factor else n_in / n_out
                raw = (np.arange(n_out) + 0.5) * step - 0.5
                clamped = raw < 0
                if clamped.any():
                    ax.plot(raw[clamped], y[clamped], "o", ms=6, mfc="none", color=_MODE_COLOURS[mode], zorder=3,
                            label="half_pixel before the clamp at 0")
        ax.set_yticks(np.arange(len(modes)), list(modes))
        ax.set_ylim(-0.6, len(modes) - 0.1)
        ax.set_xlim(-0.75, n_in - 0.25)
        ax.set_xticks(np.arange(n_in))
        ax.set_xlabel("source coordinate (tick i: the centre of source pixel i; grey/white: the pixels)")
        ax.set_ylabel("coordinate mode")
        ax.set_title(f"{n_in} -> {n_out} pixels: where each output index samples the source")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def _one_hot(shape, index):
    import torch

    t = torch.zeros(shape, dtype=torch.float64)
    t[(0, 0, *index)] = 1.0
    return t


def upsample_gradient_flow(in_hw=(4, 4), out_hw=(8, 8), mode="half_pixel", output_pixel=(3, 4),
                           input_pixel=None, scale_factors=(None, None)):
    """Scatter beside gather: the two ways to write the backward of bilinear upsampling.

    Left (scatter): the input grid; the cells hold the weights with which
    output ``output_pixel`` reads its four neighbours, which are also where
    its gradient lands (the compiled backward of a one-hot gradient); the
    cross marks the source point it samples. Right (gather): the output grid;
    the cells hold the weights with which each output reads ``input_pixel``
    (the compiled forward of a one-hot input), i.e. the window of outputs
    whose gradients that input pixel sums. ``input_pixel`` defaults to the
    output pixel's top-left neighbour. Outlined cells (Rectangle patches) are
    the nonzero weights: 4 (or fewer at an edge) on the left, the window on
    the right.
    """
    import torch

    from labops import ops, reference  # noqa: F401  (ops loads the compiled library)

    (h, w) = pair(in_hw, "viz.upsample_gradient_flow", "in_hw", min=1)
    (oh, ow) = pair(out_hw, "viz.upsample_gradient_flow", "out_hw", min=1)
    oy, ox = output_pixel
    if not (0 <= oy < oh and 0 <= ox < ow):
        raise ValueError(f"viz.upsample_gradient_flow: output_pixel must be inside the {oh}x{ow} output, "
                         f"got {output_pixel}")
    sh, sw = scale_factors
    th = reference.source_taps(oy, h, oh, mode, sh)
    tw = reference.source_taps(ox, w, ow, mode, sw)
    if input_pixel is None:
        input_pixel = (th[0], tw[0])
    ih, iw = input_pixel
    if not (0 <= ih < h and 0 <= iw < w):
        raise ValueError(f"viz.upsample_gradient_flow: input_pixel must be inside the {h}x{w} input, "
                         f"got {input_pixel}")
    scale_h = None if sh is None else float(sh)
    scale_w = None if sw is None else float(sw)
    # Scatter: the backward of a one-hot gradient at the output pixel.
    scatter = torch.ops.labops.upsample_bilinear2d_backward(_one_hot((1, 1, oh, ow), (oy, ox)), [1, 1, h, w], mode,
                                                            scale_h, scale_w, False)[0, 0].numpy()
    # Gather: the forward of a one-hot input; entry (y, x) = weight with which output (y, x) reads the input pixel.
    gather = torch.ops.labops.upsample_bilinear2d(_one_hot((1, 1, h, w), (ih, iw)), [oh, ow], mode, scale_h,
                                                  scale_w)[0, 0].numpy()
    fig, (ax_s, ax_g) = new_figure(ncols=2, width=min(15.0, 4.0 + 0.6 * (w + ow)),
                                   height=2.4 + 0.5 * max(h, oh))
    window = [tuple(int(v) for v in rc) for rc in np.argwhere(gather != 0)]
    panels = [
        (ax_s, scatter, "Oranges", "input", f"scatter: output ({oy}, {ox}) pushes its gradient into\n"
                                            f"the input pixels it read (x: its source point)"),
        (ax_g, gather, "Blues", "output", f"gather: input ({ih}, {iw}) pulls from the {len(window)} outputs\n"
                                          f"that read it (x: output ({oy}, {ox}))"),
    ]
    for ax, values, cmap, what, title in panels:
        rows, cols = values.shape
        nonzero = [tuple(int(v) for v in rc) for rc in np.argwhere(values != 0)]
        draw_matrix(ax, values, cmap=cmap, annotate=False, highlight=nonzero, title=title,
                    xlabel=f"{what} x", ylabel=f"{what} y")
        for r, c in nonzero:  # the weights; zeros left blank
            ax.text(c, r, f"{values[r, c]:.4g}", ha="center", va="center", fontsize=7,
                    bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none", alpha=0.8))
        ax.set_xticks(np.arange(cols))
        ax.set_yticks(np.arange(rows))
    src_h = reference.source_coordinate(oy, h, oh, mode, sh)
    src_w = reference.source_coordinate(ox, w, ow, mode, sw)
    ax_s.plot([src_w], [src_h], "x", color=_HIGHLIGHT, ms=10, mew=2, zorder=10)
    ax_g.plot([ox], [oy], "x", color=_HIGHLIGHT, ms=10, mew=2, zorder=10)
    for ax, (rows, cols) in ((ax_s, (h, w)), (ax_g, (oh, ow))):  # keep the crosses from moving the limits
        ax.set_xlim(-0.5, cols - 0.5)
        ax.set_ylim(rows - 0.5, -0.5)
    fig.suptitle(f"bilinear {h}x{w} -> {oh}x{ow}, {mode}: grad_in = A_h^T G A_w, computed two ways")
    return fig


def upsample_mode_difference(x, out_hw, modes=("half_pixel", "asymmetric"), scale_factors=(None, None)):
    """The same image resized under two coordinate modes, and their difference.

    ``x``: one (H, W) image (array or tensor). Three axes: the first mode's
    output, the second's (both computed with the compiled
    ``labops.upsample_bilinear2d``), and first minus second as a heatmap with
    a colour bar centred on 0. The title of the last axes carries the largest
    and mean absolute difference.
    """
    import torch

    from labops import ops  # noqa: F401  (loads the compiled library)

    img = torch.as_tensor(np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64))
    if img.dim() != 2:
        raise ValueError(f"viz.upsample_mode_difference: x must be one (H, W) image, got shape {tuple(img.shape)}")
    if len(modes) != 2:
        raise ValueError(f"viz.upsample_mode_difference: modes must name two coordinate modes, got {modes!r}")
    scale_h = None if scale_factors[0] is None else float(scale_factors[0])
    scale_w = None if scale_factors[1] is None else float(scale_factors[1])
    out_size = pair(out_hw, "viz.upsample_mode_difference", "out_hw", min=1)
    outs = [torch.ops.labops.upsample_bilinear2d(img[None, None], out_size, m, scale_h, scale_w)[0, 0].numpy()
            for m in modes]
    diff = outs[0] - outs[1]
    fig, axes = new_figure(ncols=3, width=14.0, height=4.4)
    lo, hi = min(o.min() for o in outs), max(o.max() for o in outs)
    for ax, mode, out in zip(axes, modes, outs):
        im = ax.imshow(out, cmap="viridis", vmin=lo, vmax=hi, interpolation="nearest")
        ax.set(title=f"{mode}: {out.shape[0]}x{out.shape[1]}", xlabel="output x", ylabel="output y")
    fig.colorbar(im, ax=axes[:2], shrink=0.8, label="value")
    bound = max(float(np.abs(diff).max()), 1e-12)
    im = axes[2].imshow(diff, cmap="RdBu_r", vmin=-bound, vmax=bound, interpolation="nearest")
    fig.colorbar(im, ax=axes[2], shrink=0.8, label=f"{modes[0]} - {modes[1]}")
    axes[2].set(title=f"difference: max |d| {np.abs(diff).max():.3f}, mean |d| {np.abs(diff).mean():.3f}",
                xlabel="output x", ylabel="output y")
    return fig
