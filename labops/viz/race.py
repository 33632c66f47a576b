"""A data race that ``labops.rtc`` caught, drawn from its ``DataRaceError``: who touched which element, and when.

The error says which array and element, which two threads (global indices: block * threads per block +
thread), what each did ("read", "wrote") and in which order this CPU run did it. Nothing ordered the two
accesses (no ``__syncthreads()`` between them, or different blocks), so a GPU may run them in either order:
the figure draws both.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from labops.viz._draw import _BLOCK_COLOURS, _HIGHLIGHT

# What the first and the second thread did, by the error's ``kind`` (labops/rtc.py, DataRaceError).
_ROLES = {"read before the write": ("wrote", "read"), "write after read": ("read", "wrote"),
          "two writes": ("wrote", "wrote")}
_MAX_CELLS = 32  # a longer array is drawn as the 32 elements around the raced one
_READ, _WRITE = _BLOCK_COLOURS[0], _BLOCK_COLOURS[1]  # blue: a read, orange: a write


def race_figure(error, threads_per_block: int, size: int | None = None, title: str | None = None):
    """Draw the race of ``error`` (a ``labops.rtc.DataRaceError``) in a launch of ``threads_per_block``.

    Top: the array as a row of cells (``size`` elements, default: one per thread of the block for a
    ``__shared__`` array, else up to the raced one; at most 32 drawn, around the raced one), the raced
    element outlined in red (gid ``"race-element"``, the others ``"element"``), and the two threads with an
    arrow each: into the element for a write, out of it for a read, numbered in this run's order. Bottom:
    the two threads as lanes in time, the order this CPU run took and the other order, which a GPU may take
    as well, each with what it gives.
    Text artists with gid ``"thread-1"``/``"thread-2"`` name the threads; the title says what is shown.
    """
    first_role, second_role = _ROLES[error.kind]
    name = f"{error.array}[{error.index}]"
    who = [_who(t, threads_per_block) for t in error.threads]
    same_block = len({t // threads_per_block for t in error.threads if t is not None}) <= 1
    short = [_short(t, threads_per_block, with_block=not same_block) for t in error.threads]
    if size is None:
        size = threads_per_block if error.shared else error.index + 1
    size = max(size, error.index + 1)
    lo = max(0, min(error.index - _MAX_CELLS // 2, size - _MAX_CELLS))
    hi = min(size, lo + _MAX_CELLS)
    cells = hi - lo
    span = max(cells, 12)  # the threads' boxes need room even above a short array
    barrier = "no __syncthreads() between them" if same_block else "different blocks: nothing orders them"

    fig = Figure(figsize=(8.0, 5.4), layout="constrained")  # not registered with pyplot, as new_figure's
    grid = fig.add_gridspec(2, 2, height_ratios=[1.55, 1.0])
    space = fig.add_subplot(grid[0, :])
    times = [fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])]

    # ---- space: the array, the element, the two threads ----
    left = lo - (span - cells) / 2
    for e in range(lo, hi):
        raced = e == error.index
        cell = Rectangle((e, 0), 1, 1, facecolor="#fde0dd" if raced else "#eeeeee",
                         edgecolor=_HIGHLIGHT if raced else "#888888", linewidth=2.5 if raced else 0.6,
                         zorder=3 if raced else 2)
        cell.set_gid("race-element" if raced else "element")
        space.add_patch(cell)
        step = 1 if cells <= 16 else 2
        if raced or (e - lo) % step == 0:
            space.text(e + 0.5, -0.25, str(e), ha="center", va="top", fontsize=7,
                       color=_HIGHLIGHT if raced else "black", fontweight="bold" if raced else "normal")
    for edge, more in ((lo, lo > 0), (hi, hi < size)):
        if more:
            space.text(edge + (-0.6 if edge == lo else 0.6), 0.5, "…", ha="center", va="center", fontsize=10)
    kind = "__shared__ array" if error.shared else "output"
    space.text(lo - 0.4 if cells < span else lo, -0.75, f"{kind} {error.array}: element index", ha="left",
               va="top", fontsize=8)
    box_w = min(0.4 * span, 7.5)
    for k, (role, label) in enumerate(((first_role, who[0]), (second_role, who[1]))):
        x = left + span * (0.22 if k == 0 else 0.78)
        colour = _WRITE if role == "wrote" else _READ
        space.add_patch(Rectangle((x - box_w / 2, 2.2), box_w, 1.0, facecolor=colour, alpha=0.25,
                                  edgecolor=colour, linewidth=1.5))
        text = space.text(x, 2.7, f"{label}\n{'1st' if k == 0 else '2nd'} in this run: {role} {name}",
                          ha="center", va="center", fontsize=8)
        text.set_gid(f"thread-{k + 1}")
        box, element = (x, 2.2), (error.index + 0.5, 1.0)
        tail, head = (box, element) if role == "wrote" else (element, box)
        space.add_patch(FancyArrowPatch(tail, head, arrowstyle="-|>", mutation_scale=14, color=colour,
                                        linewidth=1.8, shrinkA=2, shrinkB=2, zorder=4))
        middle = ((box[0] + element[0]) / 2, (box[1] + element[1]) / 2)
        space.text(middle[0] + (-0.3 if k == 0 else 0.3), middle[1], f"{k + 1}. {role}", color=colour,
                   ha="right" if k == 0 else "left", va="center", fontsize=9, fontweight="bold")
    space.set_xlim(left - 0.5, left + span + 0.5)
    space.set_ylim(-1.2, 3.4)
    space.axis("off")
    space.set_title(f"the {kind} {error.array}, one cell per element: which threads touched {name}", fontsize=9)

    # ---- time: the two orders, and what each gives ----
    events = [(0, first_role), (1, second_role)]
    for ax, order, heading in ((times[0], events, "the order this CPU run took"),
                               (times[1], events[::-1], "the other order: a GPU may take it too")):
        for step, (lane, role) in enumerate(order):
            colour = _WRITE if role == "wrote" else _READ
            ax.plot([step + 1], [lane], marker="o", markersize=9, color=colour, zorder=3)
            ax.annotate(f"{role} {name}", (step + 1, lane), xytext=(0, 9), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8, color=colour)
        for lane in (0, 1):
            ax.axhline(lane, color="#bbbbbb", linewidth=0.8, zorder=1)
        outcome = ax.text(1.5, 1.75, _outcome(order, short, name), ha="center", va="top", fontsize=8,
                          style="italic")
        outcome.set_gid("outcome")
        ax.set_xlim(0.3, 2.7)
        ax.set_ylim(2.2, -0.6)
        ax.set_yticks([0, 1], short)
        ax.set_xticks([1, 2], ["first", "second"])
        ax.set_xlabel(f"time → ({barrier})", fontsize=8)
        ax.tick_params(labelsize=8, length=0)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        ax.set_title(heading, fontsize=9)

    fig.suptitle(title or f"data race on {kind} {name}: {short[0]} {first_role} it, {short[1]} "
                 f"{second_role} it,\n{barrier}, so either may come first", fontsize=10)
    return fig


def _who(thread, threads_per_block):
    if thread is None:
        return "several threads"
    block, t = divmod(thread, threads_per_block)
    return f"thread {t} of block {block}"


def _short(thread, threads_per_block, with_block):
    if thread is None:
        return "other threads"
    block, t = divmod(thread, threads_per_block)
    return f"block {block} thread {t}" if with_block else f"thread {t}"


def _outcome(order, short, name):
    """What the element or the reader ends up with when the two accesses come in ``order``."""
    (lane_a, role_a), (lane_b, role_b) = order
    if role_a == role_b == "wrote":
        return f"{name} keeps {short[lane_b]}'s value"
    reader, writer = (short[lane_a], short[lane_b]) if role_a == "read" else (short[lane_b], short[lane_a])
    return (f"{reader} gets what {name} held before" if role_a == "read"
            else f"{reader} gets {writer}'s value")
