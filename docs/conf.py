"""Sphinx configuration of the labops site: ``sphinx-build -W -b html docs docs/_build/html``.

Two steps run before Sphinx reads a page, so nothing is copied into git:

* the course notebooks (``notebooks/NN_*.ipynb``), the student exercise notebooks
  (``notebooks/exercises/release/*/*.ipynb``), ``glossary.md`` and ``writeups.md`` are
  *copied* into ``docs/notebooks/`` (git-ignored), where MyST-NB renders them from their
  committed outputs (no execution);
* the benchmark tables in ``docs/benchmarks/*.json`` and ``docs/roofline_cuda.json`` are
  drawn with ``labops.viz`` into ``docs/_generated/`` (git-ignored), with a MyST snippet
  that ``performance.md`` includes (captions carry device, torch version and date).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the labops being documented is the one in this checkout
os.environ.setdefault("MPLBACKEND", "Agg")

project = "labops"
author = "the labops authors"
copyright = "labops authors, MIT licence"
release = version = "0.1.0"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 shipped in the wheel: math renders with no network
]

# MathJax from _static/mathjax/ (copied there by sphinx-mathjax-offline), never from a CDN.
mathjax_path = "mathjax/tex-chtml.js"

exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints", "README.md", "benchmarks/**"]  # benchmarks/: data (JSON, comparison tables), drawn by draw_benchmarks
if not (ROOT / "labops" / "rtc.py").exists():  # labops.rtc is optional: its page only when it exists
    exclude_patterns.append("api/rtc.rst")

# ---- notebooks: rendered from their committed outputs ----
nb_execution_mode = "off"
nb_merge_streams = True
# Widget outputs (notebooks 03, 07) would pull require.js and the widget manager from a CDN;
# every widget's figure is also saved as a plain PNG output, which is what the page shows.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None),
                              ("html", "application/vnd.jupyter.widget-state+json", None)]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type"]

# ---- API reference ----
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": False}
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# ---- HTML ----
html_theme = "sphinx_book_theme"
html_title = "labops"
html_static_path: list[str] = []
html_theme_options = {
    "repository_url": "",
    "use_download_button": True,  # every page: download its source (.ipynb for a notebook)
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    # One search box: the primary sidebar's (sphinx-book-theme puts it there). Left unset, pydata-sphinx-theme
    # (>= 0.16) adds its own search field to a header bar above every page, a second box.
    "navbar_persistent": [],
}
html_copy_source = True
html_show_sourcelink = True
html_last_updated_fmt = None


# ---- build-time steps ----

def _link(src: Path, dst: Path) -> None:
    """Copy src to dst when they differ. A copy, not a symlink: MyST resolves a notebook's links to other
    notebooks (``[next](01_layer_contract.ipynb)``) from the file's real path, which for a symlink lies outside
    docs/."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    data = src.read_bytes()
    if dst.is_symlink():
        dst.unlink()
    if dst.exists() and dst.read_bytes() == data:
        return  # unchanged: Sphinx does not read it again
    dst.write_bytes(data)


def link_notebooks() -> list[Path]:
    """Copy the course and the student exercises into docs/notebooks/; drop copies whose source is gone."""
    out = DOCS / "notebooks"
    nb = ROOT / "notebooks"
    wanted = {out / p.name: p for p in sorted(nb.glob("[0-9][0-9]*_*.ipynb"))}
    wanted.update({out / p.name: p for p in (nb / "glossary.md", nb / "writeups.md") if p.exists()})
    wanted.update({out / "exercises" / p.name: p for p in sorted(nb.glob("exercises/release/*/*.ipynb"))})
    for dst, src in wanted.items():
        _link(src, dst)
    for stale in [*out.glob("*"), *out.glob("exercises/*")]:
        if (stale.is_file() or stale.is_symlink()) and stale not in wanted:
            stale.unlink()
    return list(wanted.values())


def _caption(result: dict, what: str) -> str:
    return (f"{what} Measured on {result['device']}, torch {result['torch']}, "
            f"{result.get('date', 'date not recorded')}.")


def host_time_tables(folder: Path) -> str:
    """docs/benchmarks/host_time/{cuda,cpu}.json (tools/host_time.py --json) -> one MyST table per device."""
    parts = []
    for name, where in (("cuda.json", "on the GPU machine's host"), ("cpu.json", "on the CPU")):
        path = folder / name
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        meta, rows = data["meta"], data["rows"]
        modes = list(dict.fromkeys(r["mode"] for r in rows))
        ops = list(dict.fromkeys((r["op"], r["native"]) for r in rows))
        cell = {(r["op"], r["mode"]): r for r in rows}
        lines = ["| op | native | " + " | ".join(modes) + " |", "|---|---|" + "---|" * len(modes)]
        for op, native in ops:
            cells = [f"{cell[op, m]['labops_us']:.1f} / {cell[op, m]['native_us']:.1f} ({cell[op, m]['ratio']:.2f})"
                     for m in modes]
            lines.append(f"| `{op}` | `{native}` | " + " | ".join(cells) + " |")
        device = meta.get("gpu") or meta.get("cpu")
        order = ("labops's and native's bursts alternating" if meta.get("bursts") == "alternating"
                 else "labops's bursts, then native's")
        parts.append(f"### {where}\n\n" + "\n".join(lines) + f"\n\nMicroseconds per call, labops / native "
                     f"(labops's time over native's); best of {meta['repeats']} bursts of {meta['calls']} calls "
                     f"each, {order}; {device}, torch {meta['torch']}, commit {meta.get('commit') or 'unknown'}. "
                     f"Data: `docs/benchmarks/host_time/{name}`.\n")
    if not parts:
        return ""
    return ("## Host time per eager call\n\nOn tiny inputs the kernels cost next to nothing, so these times are "
            "the host's work per call: the Python face, the dispatcher, the autograd node, allocation, launches. "
            "*fwd*: no input requires grad; *fwd rg*: the input requires grad, so the graph is built; *fwd+bwd*: "
            "forward and `torch.autograd.grad`. Made with `tools/host_time.py`.\n\n" + "\n".join(parts))


def draw_benchmarks() -> None:
    """docs/benchmarks/*.json and docs/roofline_cuda.json -> PNGs and a MyST snippet in docs/_generated/."""
    from labops import viz

    gen = DOCS / "_generated"
    gen.mkdir(exist_ok=True)
    blocks = []
    for path in sorted((DOCS / "benchmarks").glob("*.json")):
        result = viz.load_bench(str(path))
        suite = path.stem
        graph = any(r.get("labops_graph_pct_copy") for r in result["rows"])
        png = gen / f"bench_{suite}.png"
        if not png.exists() or png.stat().st_mtime < path.stat().st_mtime:
            fig = viz.bench_bars(str(path), title=f"{suite}: share of copy bandwidth",
                                 timing="graph" if graph else "eager")
            fig.savefig(png, dpi=80)
        timing = ("GPU time from a CUDA graph" if graph else "eager calls from Python")
        peers = sorted({name for r in result["rows"] for name in r.get("peers", {})})
        also = f", with {' and '.join(f'“{p}”' for p in peers)} in colour where timed" if peers else ""
        what = (f"`{suite}`: labops (blue) and native PyTorch (grey){also}, as % of the copy bandwidth "
                f"({result['copy_GBps']:.0f} GB/s), {timing}; the numbers right of each row are "
                f"labops's speedup over native{', then over each peer' if peers else ''}. "
                f"Data: `docs/benchmarks/{path.name}`.")
        alt = (f"Bar chart of the {suite} benchmark: for each case, labops and native PyTorch as a "
               f"percentage of copy bandwidth on {result['device']}")
        blocks.append(f"### {suite}\n\n```{{figure}} /_generated/{png.name}\n:alt: {alt}\n:width: 100%\n\n"
                      f"{_caption(result, what)}\n```\n")
    roof = DOCS / "roofline_cuda.json"
    if roof.exists():
        result = json.loads(roof.read_text())
        png = gen / "roofline_cuda.png"
        if not png.exists() or png.stat().st_mtime < roof.stat().st_mtime:
            viz.roofline(str(roof), dtype="float32", title="labops float32 on the roofline").savefig(png, dpi=80)
        peaks = ", ".join(f"{k} {v:.0f}" for k, v in sorted(result["peak_TFLOPs"].items()))
        what = (f"Every float32 case of labops as achieved FLOP/s against FLOPs per byte. Roofs: copy "
                f"bandwidth {result['copy_GBps']:.0f} GB/s, matmul peaks (TFLOP/s) {peaks}. "
                f"Data: `docs/roofline_cuda.json`.")
        alt = ("Log-log roofline plot: achieved FLOP/s of each labops case against its arithmetic "
               "intensity, under the copy-bandwidth slope and the matmul peaks")
        blocks.insert(0, f"## The roofline\n\n```{{figure}} /_generated/{png.name}\n:alt: {alt}\n"
                         f":width: 90%\n\n{_caption(result, what)}\n```\n\n## Each suite\n")
    blocks.append(host_time_tables(DOCS / "benchmarks" / "host_time"))
    snippet = gen / "benchmarks.md"
    text = "\n".join(blocks)
    if not snippet.exists() or snippet.read_text() != text:
        snippet.write_text(text)


link_notebooks()
draw_benchmarks()


def _plain_bars(app, what, name, obj, options, lines):
    """Docstrings write |x| for absolute values; reST would read |x| as a substitution."""
    for i, line in enumerate(lines):
        if "|" in line and "``" not in line and ">>>" not in line:
            lines[i] = line.replace("|", r"\|")


# ---- alt text of notebook figures ----
# MyST-NB gives an output image no alt, so the HTML writer falls back to its file name (a SHA-256 hash).
# Every figure of a notebook page gets the words a reader of the notebook sees with it instead: the caption
# under it (the course's convention: an italic paragraph right after the cell), else the titles its code
# sets, else the paragraph that leads into the cell.

_ALT_CHARS = 300
_TITLE_IN_CODE = re.compile(r"""(?:suptitle|set_title|title)\s*[(=]\s*f?(["'])(.+?)\1""")


def _short(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= _ALT_CHARS:
        return text
    cut = text[:_ALT_CHARS]
    end = cut.rfind(". ")
    return cut[:end + 1] if end > _ALT_CHARS // 2 else cut[:cut.rfind(" ")] + " ..."


def _is_caption(node) -> bool:
    """A paragraph that is all emphasis: the italic caption the course puts under a figure."""
    from docutils import nodes

    parts = [c for c in node.children if not (isinstance(c, nodes.Text) and not c.strip())]
    return isinstance(node, nodes.paragraph) and bool(parts) and all(isinstance(c, nodes.emphasis) for c in parts)


def _figure_words(cell) -> str:
    from docutils import nodes

    parent = cell.parent
    siblings = parent.children if parent is not None else []
    at = siblings.index(cell) if cell in siblings else -1
    after = next((n for n in siblings[at + 1:] if not isinstance(n, (nodes.target, nodes.comment))), None)
    if at >= 0 and after is not None and _is_caption(after):
        return _short(after.astext())
    code = "\n".join(n.astext() for n in cell.findall(nodes.literal_block)
                     if "cell_input" in getattr(n.parent, "get", lambda *_: [])("classes", []))
    titles = [m.group(2) for m in _TITLE_IN_CODE.finditer(code) if "{" not in m.group(2)]
    if titles:
        return _short("; ".join(dict.fromkeys(titles)))
    for n in reversed(siblings[:max(at, 0)]):
        if isinstance(n, nodes.paragraph):
            return _short(n.astext())
        if isinstance(n, nodes.section):
            break
    title = next(iter(parent.findall(nodes.title)), None) if parent is not None else None
    return _short(title.astext()) if title is not None else "a figure drawn by the code above"


def _notebook_alt_text(app, doctree, docname):
    """Every output image of a notebook page without alt gets "Figure: <its caption>" (see above)."""
    from docutils import nodes

    if not docname.startswith("notebooks/"):
        return
    for cell in doctree.findall(lambda n: isinstance(n, nodes.container) and n.get("nb_element") == "cell_code"):
        images = [im for im in cell.findall(nodes.image) if not im.get("alt")]
        if not images:
            continue
        words = _figure_words(cell)
        for i, image in enumerate(images, 1):
            which = f" {i} of {len(images)}" if len(images) > 1 else ""
            image["alt"] = f"Figure{which}: {words}"


def setup(app):
    app.connect("autodoc-process-docstring", _plain_bars)
    app.connect("doctree-resolved", _notebook_alt_text)
