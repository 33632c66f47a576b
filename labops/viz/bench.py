"""Benchmark results (the JSON ``labops bench --json`` writes): bars against copy bandwidth, a roofline."""

from __future__ import annotations

import json
import os

import numpy as np

from labops.viz._draw import _BLOCK_COLOURS, _HIGHLIGHT, new_figure

def load_bench(source) -> dict:
    """A benchmark result: a dict already, or the path of the JSON that ``labops bench --json`` wrote."""
    if isinstance(source, dict):
        return source
    with open(os.fspath(source)) as f:
        return json.load(f)


# Peers' bars (torch.compile, cuDNN channels_last, cuDNN without TF32, ...), in name order.
_PEER_COLOURS = ["#f28e2b", "#59a14f", "#e15759", "#76b7b2"]


def bench_bars(source, title: str | None = None, dtype: str | None = None, timing: str = "eager"):
    """labops and native PyTorch as % of the copy bandwidth, one pair of bars per benchmark row.

    ``source``: a result dict or JSON path with keys device, torch, copy_GBps,
    optional date, and rows of {op, shape, dtype, native_name, labops_pct_copy,
    native_pct_copy, speedup} (plus labops_graph_pct_copy, native_graph_pct_copy,
    graph_speedup from a GPU run). ``dtype`` keeps only that dtype's rows.
    ``timing``: "eager" (calls from Python, host overhead included) or "graph"
    (replayed from a CUDA graph: GPU time only; a row that could not be
    captured gets empty bars and says so).
    A labops and a native bar per row, then one bar per peer the row was timed
    against (its ``peers``: torch.compile, cuDNN channels_last, ...; a peer that
    failed to run has no bar). The text right of each row is labops' speedup over
    native, then over each peer.
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
    # A row whose timings were noise (its ``noise`` reasons, in tables written since they are kept) says so.
    labels = [f"{r['op']}  {r['dtype']} {r['shape']}" + ("" if one_native else f"  vs {r['native_name']}")
              + ("  (! noise)" if r.get("noise") else "") for r in rows]
    peer_names = sorted({name for r in rows for name, p in r.get("peers", {}).items() if "error" not in p})
    series = 2 + len(peer_names)
    fig, (ax,) = new_figure(width=10.0, height=1.4 + 0.21 * max(2, series) * max(1, len(rows)))
    y = np.arange(len(rows))
    h = 0.76 / series
    offset = lambda k: (k - (series - 1) / 2) * h  # noqa: E731  (bar k of a row, centred on the row)
    ax.barh(y + offset(0), labops_pct, height=h, color="#4e79a7", label="labops")
    ax.barh(y + offset(1), native_pct, height=h, color="#bab0ac",
            label=f"native PyTorch: {natives[0]}" if one_native and natives else "native PyTorch")
    peer_pct = []
    for k, name in enumerate(peer_names):
        timed = [(yi, r["peers"][name].get(f"{key[1:]}_pct_copy" if key else "pct_copy"))
                 for yi, r in zip(y, rows) if "error" not in r.get("peers", {}).get(name, {"error": None})]
        timed = [(yi, pct or 0.0) for yi, pct in timed]
        peer_pct += [pct for _, pct in timed]
        ax.barh([yi + offset(2 + k) for yi, _ in timed], [pct for _, pct in timed], height=h,
                color=_PEER_COLOURS[k % len(_PEER_COLOURS)], label=name)
    # Keep the copy-bandwidth line in view unless every bar is far below it (a CPU run).
    top = max([0.0] + labops_pct + native_pct + peer_pct)
    right = max(top, 100.0) if top > 25.0 else max(top, 1e-9)
    speedup_key = "graph_speedup" if timing == "graph" else "speedup"
    for yi, r in zip(y, rows):
        speedup = r.get(speedup_key)
        text = f"{speedup:.2f}x" if speedup else "no graph:\nsynchronizes"
        for name in peer_names:
            peer = r.get("peers", {}).get(name, {})
            if peer.get(speedup_key):
                text += f"\nvs {name} {peer[speedup_key]:.2f}x"
        ax.text(right * 1.03, yi, text, va="center", fontsize=7)
    ax.axvline(100.0, color=_HIGHLIGHT, linestyle="--", linewidth=1.0, label="copy bandwidth")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, right * (1.5 if peer_names else 1.25))  # room for the speedup texts
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


def bandwidth_by_size(source, title: str | None = None):
    """GB/s against the number of elements, one line per implementation, the copy of the same size dashed.

    ``source``: a dict or the JSON path that ``tools/gpu_course_claims.py`` writes (``docs/elementwise_sizes_gpu.json``):
    device, date, dtype, and rows of {n, bytes, <name>: {graph_GBps, ...}} with one ``copy`` entry per row. As
    Triton's tutorials draw it: where a line sits below the dashed one, that kernel leaves bandwidth unused at
    that size. One Line2D per implementation, markers at the measured sizes.
    """
    result = load_bench(source)
    rows = result["rows"]
    names = [k for k, v in rows[0].items() if isinstance(v, dict)]
    n = np.array([r["n"] for r in rows], dtype=np.float64)
    fig, (ax,) = new_figure(width=7.0, height=4.2)
    colours = iter(_BLOCK_COLOURS)
    for name in names:
        gbps = [r[name]["graph_GBps"] for r in rows]
        if name == "copy":
            ax.plot(n, gbps, "--", color="black", linewidth=1.2, label="copy of the same size")
        else:
            ax.plot(n, gbps, "o-", color=next(colours), markersize=3.5, linewidth=1.4, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"elements ({result.get('dtype', 'float32')}); bytes moved = 2 x 4 x elements", fontsize=9)
    ax.set_ylabel("GB/s (read + write)", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(True, linewidth=0.4, alpha=0.5)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=8, loc="upper left", frameon=False)
    ax.set_title(title or f"GB/s against size, GPU time from a CUDA graph: {result['device']}, {result['date']}",
                 fontsize=10)
    return fig
