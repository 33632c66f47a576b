"""The grid-stride loop drawn from a ``labops.simt`` trace (a launch recorded by ``labops.rtc``): which thread
handled which element."""

from __future__ import annotations

import re
import textwrap

import numpy as np
from matplotlib.patches import Patch, Rectangle

from labops.viz._draw import _BLOCK_COLOURS, _HATCHES, _HIGHLIGHT, new_figure

# The figure fits a page: nbgrader's feedback shows it at dpi 90, so 8 inches are 720 pixels.
MAX_WIDTH_IN = 8.0
_MAX_CELL_IN = 0.45  # a cell is never wider than this (a short row does not fill the page)
_MIN_ROW_IN = 0.18  # a row is never shorter than this: narrow cells still show their colours, and
# each row's tick label has room
_MIN_MAP_HEIGHT_IN = 0.9  # the y label's two lines fit beside a map of one or two rows
_LABEL_PT = 9.0  # the "b<block> t<thread>" labels (in 0.45-inch cells), smaller in narrower cells
_SMALLEST_LABEL_PT = 6.0  # smaller labels are unreadable once a page scales the figure to its width (a
# 32-column map's 5.4 pt were): such cells are labelled only when asked (annotate=True)
_TITLE_PT = 10.0
_LEFT_IN, _RIGHT_IN = 1.0, 0.25  # the y tick labels and label, and a margin
_LEGEND_ENTRY_IN = 1.25  # one legend entry ("iteration 9") at 8 pt, with its spacing


def thread_map(trace, n: int | None = None, row_length: int | None = None, title: str | None = None,
               annotate: bool | None = None, hatch: bool = True):
    """Which thread handled which element: one cell per element, laid out in rows.

    Colour = block, hatch = loop iteration (the thread's how-many-th access; ``hatch=False``: none), text =
    "b<block> t<thread>".
    Rows are ``row_length`` elements long (default: the launch's thread
    count, so each row is one trip of the grid-stride loop). An element no
    thread touched is white with a red edge; one touched twice has a red edge
    and is labelled "x2" in red (colour and hatch then show the last toucher). One Rectangle patch per element.
    The figure is at most ``MAX_WIDTH_IN`` inches wide: long rows get narrow cells, labelled when
    ``annotate`` (default: when n <= 128 and the labels fit), and the legend sits under the map.
    """
    data = trace.arrays(n if n is not None else 1 + max((a.element for a in trace.accesses), default=-1))
    n = len(data["block"])
    row_length = row_length or min(max(n, 1), trace.threads)
    rows = max(1, -(-n // row_length))
    cell_w = min(_MAX_CELL_IN, (MAX_WIDTH_IN - _LEFT_IN - _RIGHT_IN) / row_length)
    cell_h = max(cell_w, _MIN_ROW_IN, _MIN_MAP_HEIGHT_IN / rows)
    cell_pt = 72 * cell_w
    label_pt = min(_LABEL_PT, 0.36 * cell_pt)  # two lines of text and their padding fit in a cell
    if annotate is None:
        annotate = n <= 128 and label_pt >= _SMALLEST_LABEL_PT
    width = _LEFT_IN + row_length * cell_w + _RIGHT_IN

    grid, block = trace.grid, trace.block
    title = _wrap(title or f"grid-stride loop: n = {n}, {grid.size} block(s) x {block.size} threads", width)
    blocks_seen = sorted({int(b) for b in data["block"] if b >= 0})
    its_seen = sorted({int(i) for i in data["iteration"] if i >= 0}) if hatch else []
    handles = [Patch(facecolor=_BLOCK_COLOURS[b % len(_BLOCK_COLOURS)], edgecolor="black", label=f"block {b}")
               for b in blocks_seen[:10]]
    handles += [Patch(facecolor="white", edgecolor="black", hatch=_HATCHES[i % len(_HATCHES)],
                      label=f"iteration {i}") for i in its_seen[:10]]
    legend_cols = max(1, min(len(handles), int((width - 0.3) // _LEGEND_ENTRY_IN)))
    legend_rows = -(-len(handles) // legend_cols)
    height = (0.25 + 0.2 * (title.count("\n") + 1)  # title
              + rows * cell_h
              + 0.55  # x tick labels and x label
              + (0.15 + 0.2 * legend_rows if handles else 0.0))
    fig, (ax,) = new_figure(width=width, height=height)

    thin = min(0.8, 0.08 * cell_pt)  # edges that leave the colour visible in a narrow cell
    thick = min(2.0, 0.2 * cell_pt)
    for e in range(n):
        r, c = divmod(e, row_length)
        block, thread, it, count = (int(data[k][e]) for k in ("block", "thread", "iteration", "count"))
        if count == 0:
            face, pattern, edge = "white", "", _HIGHLIGHT
        else:
            face = _BLOCK_COLOURS[block % len(_BLOCK_COLOURS)]
            pattern = _HATCHES[it % len(_HATCHES)] if hatch else ""
            edge = _HIGHLIGHT if count > 1 else "black"
        ax.add_patch(Rectangle((c, r), 1, 1, facecolor=face, hatch=pattern, edgecolor=edge,
                               linewidth=thin if edge == "black" else thick))
        if annotate:
            label = "none" if count == 0 else f"b{block}\nt{thread}" + (f"\nx{count}" if count > 1 else "")
            ax.text(c + 0.5, r + 0.5, label, ha="center", va="center", fontsize=max(label_pt, 3.0),
                    color=_HIGHLIGHT if count != 1 else "black",
                    bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none", alpha=0.8))
    ax.set_xlim(0, row_length)
    ax.set_ylim(rows, 0)
    step = max(1, -(-row_length // 16))  # at most 16 tick labels a row
    ax.set_xticks(np.arange(0, row_length, step) + 0.5, [str(c) for c in range(0, row_length, step)])
    ax.set_yticks(np.arange(rows) + 0.5, [str(r * row_length) for r in range(rows)])  # rows are 13 pt apart at least
    ax.tick_params(labelsize=8)
    ax.set_xlabel(f"element index mod {row_length}", fontsize=9)
    ax.set_ylabel("first element\nof the row", fontsize=9)
    ax.set_title(title, fontsize=_TITLE_PT)
    if handles:
        # Under the map, clear of the x tick labels and x label (borderaxespad is in legend font sizes).
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), borderaxespad=4.2,
                  ncols=legend_cols, fontsize=8, frameon=False, columnspacing=1.2, handlelength=1.6)
    return fig


def _wrap(title: str, width_in: float) -> str:
    """``title`` in lines of about equal length that fit ``width_in`` inches, broken after ": ", ", " or
    "; " where it can be."""
    max_chars = max(20, int((width_in - 0.4) * 72 / (0.6 * _TITLE_PT)))
    if len(title) <= max_chars:
        return title
    target = len(title) / -(-len(title) // max_chars)
    lines: list[str] = []
    for part in re.split(r"(?<=[:,;]) ", title):
        if len(part) > max_chars:
            lines.extend(textwrap.wrap(part, max_chars))
        elif lines and len(lines[-1]) + 1 + len(part) <= max_chars and \
                abs(len(lines[-1]) + 1 + len(part) - target) < abs(len(lines[-1]) - target):
            lines[-1] += " " + part
        else:
            lines.append(part)
    return "\n".join(lines)
