"""The drawing kit every figure of ``labops.viz`` is built with: figures, small matrices, controls.

``new_figure`` makes a Figure that pyplot does not track, ``draw_matrix`` draws a
small 2-D array as numbered cells with some outlined, ``explore`` puts sliders
under a figure in a notebook. The colours below are shared so that "block 3"
or "input channel 3" is the same colour in every figure.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

# Colours for "which block", hatches for "which loop iteration".
_BLOCK_COLOURS = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
]
_HATCHES = ["", "//", "\\\\", "xx", "..", "oo", "++", "--", "||", "**"]
_HIGHLIGHT = "#d62728"

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


def explore(draw, *, static_copy: bool = True, **controls):
    """Show ``draw(**values)`` in a notebook; with ipywidgets, controls below it redraw it in place.

    Each control is ``name=(low, high, initial)`` (an integer slider) or ``name=(options, initial)``
    (a menu). With ``static_copy`` (the default) the figure for the initial values is an ordinary PNG
    output, so nbval and static pages (the docs) show it. ``static_copy=False`` is for a figure the
    notebook already shows just above: with ipywidgets the figure is then drawn inside the widget only,
    and a static page, which has no widgets, shows it once (the one above) rather than twice. Either
    way a viewer without widgets reads a one-line note that the controls need Jupyter, not the widgets'
    repr. Without ipywidgets there are no controls, and the figure is a PNG output. Returns the
    widgets by name (empty without ipywidgets).
    """
    from IPython.display import display

    values = {name: spec[-1] for name, spec in controls.items()}
    first = draw(**values)
    try:
        import ipywidgets
    except ImportError:
        display(_png(first))
        print("(pip install ipywidgets for controls that redraw this figure)")
        return {}
    made = {}
    for name, spec in controls.items():
        if isinstance(spec[0], (list, tuple)):
            made[name] = ipywidgets.Dropdown(options=list(spec[0]), value=spec[1], description=name)
        else:
            made[name] = ipywidgets.IntSlider(min=spec[0], max=spec[1], value=spec[2], description=name,
                                              continuous_update=False)
    row = ipywidgets.HBox(list(made.values()))
    if static_copy:
        handle = display(_png(first), display_id=True)
        show = handle.update
        view = row
    else:
        image = ipywidgets.Image(value=_png(first).data, format="png", layout=ipywidgets.Layout(max_width="100%"))

        def show(png):
            image.value = png.data

        view = ipywidgets.VBox([image, row])

    def redraw(_change=None):
        show(_png(draw(**{name: w.value for name, w in made.items()})))

    for widget in made.values():
        widget.observe(redraw, names="value")
    what = "controls" if static_copy else "a figure with controls"
    display(_WidgetView(view, f"({what} for {', '.join(made)}: run the notebook in Jupyter)"))
    return made


class _WidgetView:
    """A widget displayed with ``text`` as its plain-text form: what viewers without widgets (a static page,
    GitHub) show instead of the widget's repr."""

    def __init__(self, widget, text: str):
        self.widget, self.text = widget, text

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {**self.widget._repr_mimebundle_(), "text/plain": self.text}


def _png(figure):
    import io

    from IPython.display import Image

    buf = io.BytesIO()
    figure.savefig(buf, format="png", dpi=90)
    return Image(data=buf.getvalue(), format="png")
