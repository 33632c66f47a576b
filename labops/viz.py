"""The course's figures, each drawn from real data and returned as a matplotlib Figure.

Every function takes data (a ``labops.simt`` trace, tensors, a benchmark
result), draws it, and returns a ``matplotlib.figure.Figure``. Nothing here
calls ``plt.show()`` or touches pyplot's global state: a notebook shows the
returned figure by making it the cell's last expression, a script saves it
with ``fig.savefig(...)``.

Adding a figure for a new layer (upsample, reorg, ...): write a function in
its own ``# ---- <layer> ----`` section below, build the axes with
``new_figure``, draw small arrays with ``draw_matrix`` (numbers in cells,
some cells outlined), give every axes a title and axis labels, return the
Figure, add its name to ``__all__``, and count its artists in
tests/test_viz.py.
"""

from __future__ import annotations

import json
import os

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from labops.reference.conv2d_mm import conv_out_size, im2col_loop

__all__ = [
    "bench_bars",
    "draw_matrix",
    "explore",
    "gelu_forms",
    "im2col_figure",
    "im2col_numpy",
    "load_bench",
    "new_figure",
    "thread_map",
    "upsample_gradient_flow",
    "upsample_mode_difference",
    "upsample_sampling_positions",
    "roofline",
]

# Colours for "which block", hatches for "which loop iteration".
_BLOCK_COLOURS = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
]
_HATCHES = ["", "//", "\\\\", "xx", "..", "oo", "++", "--", "||", "**"]
_HIGHLIGHT = "#d62728"


# ---- shared helpers ----

def new_figure(ncols: int = 1, nrows: int = 1, width: float = 6.4, height: float = 4.0, **subplot_kw):
    """A Figure of ``nrows x ncols`` axes (not registered with pyplot); returns (fig, flat list of axes)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, subplot_kw=subplot_kw or None)
    return fig, list(axes.ravel())


def draw_matrix(ax, values, *, title: str, xlabel: str, ylabel: str, highlight=(), fmt: str = "{:g}",
                cmap: str = "Blues", annotate: bool | None = None, dim=None):
    """Draw a small 2-D array as a grid of coloured cells, optionally with its numbers.

    highlight: (row, col) cells to outline in red (one Rectangle patch each).
    dim: optional boolean mask of cells to grey out (e.g. zero padding).
    Returns the highlight patches.
    """
    values = np.asarray(values, dtype=np.float64)
    rows, cols = values.shape
    ax.imshow(values, cmap=cmap, aspect="equal", interpolation="nearest")
    if dim is not None:
        grey = np.where(np.asarray(dim), 0.6, np.nan)
        ax.imshow(grey, cmap="Greys", vmin=0, vmax=1, alpha=0.5, aspect="equal", interpolation="nearest")
    if annotate is None:
        annotate = rows * cols <= 400
    if annotate:
        mid = np.nanmean(values) if values.size else 0.0
        for r in range(rows):
            for c in range(cols):
                ax.text(c, r, fmt.format(values[r, c]), ha="center", va="center", fontsize=7,
                        color="white" if values[r, c] > mid + 0.5 * np.nanstd(values) else "black")
    patches = []
    for r, c in highlight:
        patch = Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor=_HIGHLIGHT, linewidth=2.0)
        ax.add_patch(patch)
        patches.append(patch)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return patches


def explore(draw, **controls):
    """Show ``draw(**values)`` in a notebook; with ipywidgets, controls below it redraw it in place.

    Each control is ``name=(low, high, initial)`` (an integer slider) or ``name=(options, initial)``
    (a menu). The figure is an ordinary PNG output, so nbval and static pages (the docs) show the
    figure for the initial values; without ipywidgets there are no controls. Returns the widgets
    by name (empty without ipywidgets).
    """
    from IPython.display import display

    values = {name: spec[-1] for name, spec in controls.items()}
    handle = display(_png(draw(**values)), display_id=True)
    try:
        import ipywidgets
    except ImportError:
        print("(pip install ipywidgets for controls that redraw this figure)")
        return {}
    made = {}
    for name, spec in controls.items():
        if isinstance(spec[0], (list, tuple)):
            made[name] = ipywidgets.Dropdown(options=list(spec[0]), value=spec[1], description=name)
        else:
            made[name] = ipywidgets.IntSlider(min=spec[0], max=spec[1], value=spec[2], description=name,
                                              continuous_update=False)

    def redraw(_change=None):
        handle.update(_png(draw(**{name: w.value for name, w in made.items()})))

    for widget in made.values():
        widget.observe(redraw, names="value")
    display(ipywidgets.HBox(list(made.values())))
    return made


def _png(figure):
    import io

    from IPython.display import Image

    buf = io.BytesIO()
    figure.savefig(buf, format="png", dpi=90)
    return Image(data=buf.getvalue(), format="png")


# ---- the grid-stride loop (labops.simt traces) ----

def thread_map(trace, n: int | None = None, row_length: int | None = None, title: str | None = None,
               annotate: bool | None = None):
    """Which thread handled which element: one cell per element, laid out in rows.

    Colour = block, hatch = loop iteration, text = "b<block> t<thread>".
    Rows are ``row_length`` elements long (default: the launch's thread
    count, so each row is one trip of the grid-stride loop). An element no
    thread touched is white with a red edge; one touched twice has a red edge
    and is labelled "x2" in red (colour and hatch then show the last toucher). One Rectangle patch per element.
    """
    data = trace.arrays(n if n is not None else 1 + max((a.element for a in trace.accesses), default=-1))
    n = len(data["block"])
    row_length = row_length or min(max(n, 1), trace.threads)
    rows = max(1, -(-n // row_length))
    if annotate is None:
        annotate = n <= 128
    fig, (ax,) = new_figure(width=min(14.0, 3.5 + 0.62 * row_length), height=1.5 + 0.55 * rows)
    for e in range(n):
        r, c = divmod(e, row_length)
        block, thread, it, count = (int(data[k][e]) for k in ("block", "thread", "iteration", "count"))
        if count == 0:
            face, hatch, edge = "white", "", _HIGHLIGHT
        else:
            face, hatch = _BLOCK_COLOURS[block % len(_BLOCK_COLOURS)], _HATCHES[it % len(_HATCHES)]
            edge = _HIGHLIGHT if count > 1 else "black"
        ax.add_patch(Rectangle((c, r), 1, 1, facecolor=face, hatch=hatch, edgecolor=edge,
                               linewidth=0.8 if edge == "black" else 2.0))
        if annotate:
            label = "none" if count == 0 else f"b{block}\nt{thread}" + (f"\nx{count}" if count > 1 else "")
            ax.text(c + 0.5, r + 0.5, label, ha="center", va="center", fontsize=7,
                    color=_HIGHLIGHT if count != 1 else "black",
                    bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none", alpha=0.8))
    ax.set_xlim(0, row_length)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal")
    step = max(1, row_length // 16)
    ax.set_xticks(np.arange(0, row_length, step) + 0.5, [str(c) for c in range(0, row_length, step)])
    ax.set_yticks(np.arange(rows) + 0.5, [str(r * row_length) for r in range(rows)])
    ax.set_xlabel(f"element index mod {row_length}")
    ax.set_ylabel("first element of the row")
    grid, block = trace.grid, trace.block
    ax.set_title(title or f"grid-stride loop: n = {n}, {grid.size} block(s) x {block.size} threads")
    blocks_seen = sorted({int(b) for b in data["block"] if b >= 0})
    its_seen = sorted({int(i) for i in data["iteration"] if i >= 0})
    handles = [Patch(facecolor=_BLOCK_COLOURS[b % len(_BLOCK_COLOURS)], edgecolor="black", label=f"block {b}")
               for b in blocks_seen[:10]]
    handles += [Patch(facecolor="white", edgecolor="black", hatch=_HATCHES[i % len(_HATCHES)],
                      label=f"iteration {i}") for i in its_seen[:10]]
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


# ---- GELU ----

def gelu_forms(x=None):
    """GELU's three forms (left), their derivatives (middle), and each approximation's error (right).

    Solid lines: the compiled op ``labops.gelu`` and its compiled backward
    (through autograd). Dots: ``labops.reference``'s NumPy formulas at every
    20th point, which should sit on the lines.
    """
    import torch

    from labops import ops, reference

    if x is None:
        x = torch.linspace(-4, 4, 401, dtype=torch.float64)
    forms = ops.GELU_APPROXIMATIONS
    ys, dys = {}, {}
    for form in forms:
        xg = x.detach().clone().requires_grad_()
        y = ops.gelu(xg, form)
        (dy,) = torch.autograd.grad(y, xg, torch.ones_like(y))
        ys[form], dys[form] = y.detach().numpy(), dy.numpy()
    xs = x.detach().numpy()
    every = slice(None, None, 20)
    fig, (ax_f, ax_d, ax_e) = new_figure(ncols=3, width=14.0, height=4.0)
    colours = dict(zip(forms, ["#4e79a7", "#f28e2b", "#59a14f"]))
    for form in forms:
        ax_f.plot(xs, ys[form], color=colours[form], label=f"labops.gelu('{form}')")
        ax_f.plot(xs[every], reference.gelu_forward_numpy(xs[every], form), "o", ms=3, color=colours[form])
        ax_d.plot(xs, dys[form], color=colours[form], label=f"backward ('{form}')")
        ax_d.plot(xs[every], reference.gelu_backward_numpy(np.ones_like(xs[every]), xs[every], form), "o", ms=3,
                  color=colours[form])
    for form in forms[1:]:
        ax_e.plot(xs, ys[form] - ys["none"], color=colours[form], label=f"'{form}' - 'none'")
    ax_e.axhline(0.0, color="grey", linewidth=0.8)
    ax_f.set(title="GELU(x): three forms", xlabel="x", ylabel="GELU(x)")
    ax_d.set(title="d GELU / dx (the compiled backward)", xlabel="x", ylabel="dGELU/dx")
    ax_e.set(title="error of each approximation", xlabel="x", ylabel="approximation - exact")
    for ax in (ax_f, ax_d, ax_e):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


# ---- benchmarks (labops.bench result JSON) ----

def load_bench(source) -> dict:
    """A benchmark result: a dict already, or the path of the JSON that ``labops bench --json`` wrote."""
    if isinstance(source, dict):
        return source
    with open(os.fspath(source)) as f:
        return json.load(f)


def bench_bars(source, title: str | None = None, dtype: str | None = None, timing: str = "eager"):
    """labops and native PyTorch as % of the copy bandwidth, one pair of bars per benchmark row.

    ``source``: a result dict or JSON path with keys device, torch, copy_GBps,
    optional date, and rows of {op, shape, dtype, native_name, labops_pct_copy,
    native_pct_copy, speedup} (plus labops_graph_pct_copy, native_graph_pct_copy,
    graph_speedup from a GPU run). ``dtype`` keeps only that dtype's rows.
    ``timing``: "eager" (calls from Python, host overhead included) or "graph"
    (replayed from a CUDA graph: GPU time only; a row that could not be
    captured gets empty bars and says so).
    Exactly two bar patches per row; the text right of each pair is labops'
    speedup over native.
    """
    if timing not in ("eager", "graph"):
        raise ValueError(f"bench_bars: timing must be 'eager' or 'graph', got {timing!r}")
    key = "_graph" if timing == "graph" else ""
    result = load_bench(source)
    rows = [r for r in result["rows"] if dtype is None or r["dtype"] == dtype]
    labops_pct = [r.get(f"labops{key}_pct_copy") or 0.0 for r in rows]
    native_pct = [r.get(f"native{key}_pct_copy") or 0.0 for r in rows]
    # One native name for every row goes into the legend; several go into the row labels.
    natives = sorted({r["native_name"] for r in rows})
    one_native = len(natives) == 1
    labels = [f"{r['op']}  {r['dtype']} {r['shape']}" + ("" if one_native else f"  vs {r['native_name']}")
              for r in rows]
    fig, (ax,) = new_figure(width=10.0, height=1.4 + 0.42 * max(1, len(rows)))
    y = np.arange(len(rows))
    h = 0.38
    ax.barh(y - h / 2, labops_pct, height=h, color="#4e79a7", label="labops")
    ax.barh(y + h / 2, native_pct, height=h, color="#bab0ac",
            label=f"native PyTorch: {natives[0]}" if one_native and natives else "native PyTorch")
    # Keep the copy-bandwidth line in view unless every bar is far below it (a CPU run).
    top = max([0.0] + labops_pct + native_pct)
    right = max(top, 100.0) if top > 25.0 else max(top, 1e-9)
    for yi, r in zip(y, rows):
        speedup = r.get("graph_speedup" if timing == "graph" else "speedup")
        text = f"{speedup:.2f}x" if speedup else "no graph:\nsynchronizes"
        ax.text(right * 1.03, yi, text, va="center", fontsize=7)
    ax.axvline(100.0, color=_HIGHLIGHT, linestyle="--", linewidth=1.0, label="copy bandwidth")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, right * 1.25)
    ax.set_xlabel("% of copy bandwidth (bytes the op must move / time, over a device copy's)")
    ax.set_ylabel("benchmark")
    when = f", {result['date']}" if result.get("date") else ""
    copy = f" (copy {result['copy_GBps']:.0f} GB/s)" if result.get("copy_GBps") else ""
    timed = "GPU time from a CUDA graph" if timing == "graph" else "calls from Python (eager)"
    # On the figure, not the axes: long row labels leave the axes narrow.
    fig.suptitle(title or f"{result['device']}{copy}, torch {result['torch']}{when}\n{timed}", fontsize=10)
    # Above the plot: the speedup texts on the right may be long.
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return fig


def roofline(source, dtype: str = "float32", impls=("labops",), title: str | None = None):
    """Every benchmark case on a roofline: achieved FLOP/s against FLOPs per byte, log-log.

    ``source``: a dict or the JSON that ``labops bench --roofline --json`` wrote (device,
    torch, date, copy_GBps, peak_TFLOPs per math mode, and points of {impl, op, shape,
    dtype, flops, nbytes, ms}). ``dtype`` keeps that dtype's points; ``impls`` which
    implementations to draw ("labops" and/or native names such as "F.conv2d (cuDNN)").
    The roofs: FLOP/s = copy bandwidth x intensity (slanted) up to each matmul peak
    (flat). Ops with no arithmetic (reorg, im2col) cannot sit on a log axis: they are
    named under the plot.
    """
    result = load_bench(source)
    points = [p for p in result["points"] if p["dtype"] == dtype and p["impl"] in impls]
    drawn = [p for p in points if p["flops"] > 0]
    no_math = sorted({p["op"].split(" ")[0].split("(")[0] for p in points if p["flops"] == 0})
    fig, (ax,) = new_figure(width=8.0, height=5.2)
    bandwidth = result["copy_GBps"] * 1e9
    peaks = {k: v * 1e12 for k, v in result["peak_TFLOPs"].items()}
    intensity = np.array([p["flops"] / p["nbytes"] for p in drawn])
    x = np.logspace(np.log10(min([0.05, *intensity]) / 2), np.log10(max([1e3, *intensity]) * 2), 200)
    for (mode, peak), style in zip(sorted(peaks.items(), key=lambda kv: kv[1]), ("-", "--", ":")):
        ax.plot(x, np.minimum(bandwidth * x, peak), "k", linestyle=style, linewidth=1.2,
                label=f"roof: copy {result['copy_GBps']:.0f} GB/s, then {mode} matmul {peak / 1e12:.0f} TFLOP/s")
    layers = sorted({p["op"].split(" ")[0].split("(")[0] for p in drawn})
    markers = {"fwd": "o", "bwd": "v", "fwd+bwd": "s"}
    for i, layer in enumerate(layers):
        mine = [p for p in drawn if p["op"].split(" ")[0].split("(")[0] == layer]
        for p in mine:
            kind = next((k for k in ("fwd+bwd", "bwd", "fwd") if k in p["op"]), "fwd")
            ax.plot(p["flops"] / p["nbytes"], p["flops"] / (p["ms"] * 1e-3), markers[kind],
                    color=_BLOCK_COLOURS[i % len(_BLOCK_COLOURS)],
                    markerfacecolor="none" if p["impl"] != "labops" else None, markersize=6)
        ax.plot([], [], "o", color=_BLOCK_COLOURS[i % len(_BLOCK_COLOURS)], label=layer)
    for kind, marker in markers.items():
        ax.plot([], [], marker, color="grey", label=kind)
    if any(p["impl"] != "labops" for p in drawn):
        ax.plot([], [], "o", color="grey", markerfacecolor="none", label="hollow: native")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(which="both", alpha=0.2)
    ax.legend(fontsize=7, loc="upper left", ncol=2, frameon=False)
    when = f", {result['date']}" if result.get("date") else ""
    fig.suptitle(title or f"{result['device']}, torch {result['torch']}{when}: {dtype}, "
                 + ", ".join(impls), fontsize=10)
    if no_math:
        ax.set_title("not drawn (no arithmetic: judge them by % of copy): " + ", ".join(no_math), fontsize=8)
    return fig


# ---- im2col ----

def _pair(v):
    return (int(v), int(v)) if np.isscalar(v) else (int(v[0]), int(v[1]))


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
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(_pair, (kernel_size, stride, padding, dilation))
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


# ---- upsample ----

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

    (h, w), (oh, ow) = _pair(in_hw), _pair(out_hw)
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
    outs = [torch.ops.labops.upsample_bilinear2d(img[None, None], list(_pair(out_hw)), m, scale_h,
                                                 scale_w)[0, 0].numpy() for m in modes]
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


# ---- reorg ----

__all__ += ["reorg_channel_maps"]


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
