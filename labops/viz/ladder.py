"""A layer's ladder in one figure: every rung of its forward, and native PyTorch, as % of the copy bandwidth
(or, for a compute-bound layer, of the matmul peak)."""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from labops.viz._draw import _BLOCK_COLOURS, _HIGHLIGHT, new_figure
from labops.viz.bench import load_bench

_NATIVE_COLOUR = "#bab0ac"  # bench_bars' native grey


def ladder_bars(source, timing: str | None = None, title: str | None = None):
    """One group of bars per benchmark case: each rung of the layer's forward (rung 1, the textbook, on top),
    then native PyTorch, as % of the copy bandwidth measured in the same run.

    ``source``: the result of ``labops.bench.ladder_run`` or the JSON ``labops bench --ladder LAYER --json``
    wrote (layer, device, torch, date, copy_GBps, rungs, and rows of {op, shape, dtype, native_name,
    native_pct_copy, default_rung, rungs: [{rung, name, pct_copy, speedup, graph_*} or {rung, name,
    error}]}). ``timing``: "eager" or "graph" (CUDA-graph replay, GPU time only); by default graph when the
    run has graph figures (a GPU run), else eager. The rung a layer runs by default for a case has a black
    edge; a rung that cannot take a case is written "n/a" where its bar would be. The text after each bar
    is that rung's speedup over native (above 1: faster than native).
    """
    result = load_bench(source)
    rows = result["rows"]
    if timing is None:
        timing = "graph" if any(r.get("native_graph_pct_copy") is not None for r in rows) else "eager"
    if timing not in ("eager", "graph"):
        raise ValueError(f"ladder_bars: timing must be 'eager' or 'graph', got {timing!r}")
    key = "graph_" if timing == "graph" else ""
    names = result["rungs"]
    series = len(names) + 1  # the rungs, then native
    fig, (ax,) = new_figure(width=10.0, height=1.3 + 0.2 * series * max(1, len(rows)))
    h = 0.8 / series
    y = np.arange(len(rows))
    offset = lambda k: (k - (series - 1) / 2) * h  # noqa: E731  (bar k of a row, centred on the row)
    top, handles = 0.0, []
    for k, name in enumerate(names):
        colour = _BLOCK_COLOURS[k % len(_BLOCK_COLOURS)]
        for yi, r in zip(y, rows):
            e = next(e for e in r["rungs"] if e["name"] == name)
            if "error" in e:
                ax.text(0.0, yi + offset(k), " n/a", va="center", fontsize=6, color="dimgrey")
                continue
            pct = e.get(f"{key}pct_copy") or 0.0
            top = max(top, pct)
            default = e["rung"] == r["default_rung"]
            ax.barh(yi + offset(k), pct, height=h, color=colour, edgecolor="black" if default else colour,
                    linewidth=1.2 if default else 0.0)
            speedup = e.get(f"{key}speedup")
            if speedup:
                ax.text(pct, yi + offset(k), f" {speedup:.2f}x", va="center", fontsize=6)
        handles.append(Patch(color=colour, label=f"rung {k + 1}: {name}"))
    native = [r.get(f"native_{key}pct_copy") or 0.0 for r in rows]
    top = max([top, *native])
    ax.barh(y + offset(series - 1), native, height=h, color=_NATIVE_COLOUR)
    flops = result.get("roof") == "flops"  # a compute-bound layer: % of its dtype's matmul peak
    ax.axvline(100.0, color=_HIGHLIGHT, linestyle="--", linewidth=1.0)
    handles += [Patch(color=_NATIVE_COLOUR, label="native PyTorch"),
                Patch(facecolor="white", edgecolor="black", linewidth=1.2, label="black edge: the default rung"),
                Line2D([], [], color=_HIGHLIGHT, linestyle="--", linewidth=1.0,
                       label="matmul peak" if flops else "copy bandwidth")]
    natives = sorted({r["native_name"] for r in rows})
    ops = {r["op"] for r in rows}
    # Several ops (reorg's three orders, batch_norm's training and evaluation): each label names its op; one op
    # against several natives: its native.
    labels = [f"{r['shape']} {r['dtype']}" + (f"\n{r['op']}" if len(ops) > 1 else "" if len(natives) == 1
                                              else f"\nvs {r['native_name']}") for r in rows]
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(top, 100.0 if top > 25.0 else top) * 1.2 or 1.0)
    ax.set_xlabel("% of the matmul peak of the case's dtype (the op's FLOP/s over a large matmul's)" if flops
                  else "% of copy bandwidth (bytes the op must move / time, over a device copy's)")
    ax.set_ylabel(rows[0]["op"] if len(ops) == 1 else "case")
    timed = "GPU time from a CUDA graph" if timing == "graph" else "calls from Python (eager)"
    native_text = f"; native: {natives[0]}" if len(natives) == 1 else ""
    used = {{"bfloat16": "float16"}.get(r["dtype"], r["dtype"]) for r in rows}  # the peaks the bars are read against
    roof = (", ".join(f"{mode} peak {t:.0f} TFLOP/s" for mode, t in result["peak_TFLOPs"].items() if mode in used)
            if flops else f"copy {result['copy_GBps']:.0f} GB/s")
    fig.suptitle(title or f"The {result['layer']} ladder: {result['device']} ({roof}), "
                 f"torch {result['torch']}, {result.get('date', 'date not recorded')}\n{timed}{native_text}",
                 fontsize=10)
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, fontsize=7, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return fig
