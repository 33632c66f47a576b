"""The grid-stride loop drawn from a ``labops.simt`` trace: which thread handled which element."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch, Rectangle

from labops.viz._draw import _BLOCK_COLOURS, _HATCHES, _HIGHLIGHT, new_figure

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
