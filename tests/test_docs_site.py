"""The built documentation site (docs/_build/html), as a reader gets it.

Run after `sphinx-build -W -b html docs docs/_build/html` (.ci/run does); every test skips when
the site has not been built.
"""

import importlib
import inspect
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from labops._layers import LAYERS

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "_build" / "html"
pytestmark = pytest.mark.skipif(not (SITE / "index.html").exists(), reason="docs/_build/html is not built")

API_MODULES = ["labops.ops", "labops.nn", "labops.reference", "labops.testing", "labops.simt", "labops.viz",
               "labops.source", "labops.exercises", "labops.ladder"] + (["labops.rtc", "labops.rtc_layers"]
                                                        if (ROOT / "labops" / "rtc.py").exists() else [])


class Tags(HTMLParser):
    """Every start tag of a page as (tag, attributes), and the ids it defines."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if attrs.get("id"):
            self.ids.add(attrs["id"])


_parsed = {}


def parse(page: Path) -> Tags:
    if page not in _parsed:
        tags = Tags()
        tags.feed(page.read_text(encoding="utf-8"))
        _parsed[page] = tags
    return _parsed[page]


def pages():
    return sorted(p for p in SITE.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts)


def notebooks():
    nb = ROOT / "notebooks"
    course = [(p, Path("notebooks") / p.name) for p in sorted(nb.glob("[0-9][0-9]*_*.ipynb"))]
    exercises = [(p, Path("notebooks/exercises") / p.name) for p in sorted(nb.glob("exercises/release/*/*.ipynb"))]
    return course + exercises


@pytest.mark.parametrize("source,docname", notebooks(), ids=lambda v: getattr(v, "name", None))
def test_every_notebook_has_its_page_figures_and_download(source, docname):
    page = SITE / docname.with_suffix(".html")
    assert page.exists(), f"{source.relative_to(ROOT)} has no page"
    figures = sum("image/png" in out.get("data", {}) or "image/svg+xml" in out.get("data", {})
                  for cell in json.loads(source.read_text())["cells"] for out in cell.get("outputs", []))
    tags = parse(page)
    images = [a for t, a in tags.tags if t == "img" and "_static" not in a.get("src", "")]
    assert len(images) >= figures, f"{page.name}: {len(images)} <img> for {figures} figures in the notebook"
    assert all((page.parent / unquote(a["src"])).exists() for a in images), page.name
    downloads = [a["href"] for t, a in tags.tags if t == "a" and a.get("href", "").endswith(source.name)]
    assert downloads and (page.parent / unquote(downloads[0])).exists(), f"{page.name}: no download link"


def test_no_internal_link_is_broken():
    broken = []
    for page in pages():
        for tag, attrs in parse(page).tags:
            for key in ("href", "src"):
                url = attrs.get(key)
                if not url or url.startswith(("mailto:", "javascript:", "data:")) or urlparse(url).scheme:
                    continue
                path, _, fragment = url.partition("#")
                path = path.partition("?")[0]
                target = (page.parent / unquote(path)).resolve() if path else page
                if target.is_dir():
                    target = target / "index.html"
                if not target.exists():
                    broken.append(f"{page.relative_to(SITE)}: {url}")
                elif fragment and target.suffix == ".html" and unquote(fragment) not in parse(target).ids:
                    broken.append(f"{page.relative_to(SITE)}: {url} (no such anchor)")
    assert not broken, "\n".join(broken[:20])


def test_nothing_is_loaded_from_outside_the_site():
    outside = []
    for page in pages():
        for tag, attrs in parse(page).tags:
            loads = {"script": "src", "img": "src", "link": "href", "iframe": "src", "source": "src"}.get(tag)
            if tag == "link" and attrs.get("rel") in ("canonical",):
                continue
            if loads and re.match(r"(https?:)?//", attrs.get(loads, "") or ""):
                outside.append(f"{page.relative_to(SITE)}: <{tag} {loads}={attrs[loads]}>")
    assert not outside, "\n".join(outside[:20])
    # MathJax is the local copy
    assert (SITE / "_static" / "mathjax" / "tex-chtml.js").exists()


def test_images_have_alt_text():
    missing = [f"{p.relative_to(SITE)}: {a.get('src')}" for p in pages() for t, a in parse(p).tags
               if t == "img" and not (a.get("alt") or "").strip()]
    assert not missing, "\n".join(missing[:20])


def public_functions(module_name):
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items()
                 if not n.startswith("_") and getattr(v, "__module__", None) == module_name]
    return [n for n in names if inspect.isfunction(getattr(module, n)) or inspect.isclass(getattr(module, n))]


@pytest.mark.parametrize("module_name", API_MODULES)
def test_api_pages_list_every_public_function(module_name):
    ids = set().union(*(parse(p).ids for p in (SITE / "api").glob("*.html")))
    missing = [n for n in public_functions(module_name) if f"{module_name}.{n}" not in ids]
    assert not missing, f"{module_name}: not on the API pages: {missing}"


def test_math_and_layer_sources_are_there():
    softmax = (SITE / "layers" / "softmax.html").read_text()
    assert 'class="math' in softmax and "mathjax/tex-chtml.js" in softmax
    for layer in LAYERS:
        html = (SITE / "layers" / f"{layer}.html").read_text()
        assert html.count('class="highlight-') >= 3, f"{layer}: reference, C++ body and CUDA launcher listings"
        assert "linenos" in html, f"{layer}: listings without line numbers"


def test_benchmark_figures_are_drawn_with_their_device_and_date():
    html = (SITE / "performance.html").read_text()
    for path in sorted((ROOT / "docs" / "benchmarks").glob("*.json")):
        result = json.loads(path.read_text())
        assert f"bench_{path.stem}.png" in html
        assert result["device"] in html and result["torch"] in html and result["date"] in html


def test_host_time_tables_show_every_committed_row():
    html = (SITE / "performance.html").read_text()
    assert "Host time per eager call" in html
    for path in sorted((ROOT / "docs" / "benchmarks" / "host_time").glob("c*.json")):
        if "_" in path.stem:  # an older checkout's table, kept as data
            continue
        for row in json.loads(path.read_text())["rows"]:
            cell = f"{row['labops_us']:.1f} / {row['native_us']:.1f} ({row['ratio']:.2f})"
            assert cell in html, f"{path.name}: {row['op']} {row['mode']} not on the page"


def test_one_search_box_on_every_page():
    # sphinx-book-theme's search field is in the sidebar; pydata-sphinx-theme would add a second one in a header
    # bar above the page unless conf.py's html_theme_options set navbar_persistent (issue #31)
    for page in pages():
        fields = [a for t, a in parse(page).tags if "search-button-field" in (a.get("class") or "").split()]
        assert len(fields) == 1, f"{page.relative_to(SITE)}: {len(fields)} search fields"


def _cell_after(html: str, code: str) -> str:
    """The HTML of the notebook cell whose code holds ``code``: from there to the next cell or markdown."""
    start = html.index(code)
    end = re.compile(r'<div class="cell[ "]|<p>|<section').search(html, start)
    return html[start:end.start() if end else len(html)]


def test_notebook_03_shows_the_explored_figure_once_and_no_widget_repr():
    html = (SITE / "notebooks" / "03_cuda_kernel_loop.html").read_text(encoding="utf-8")
    explore = _cell_after(html, "explore</span>")
    assert "<img" not in explore, "viz.explore's figure repeats the map drawn just above it"
    assert not re.search(r"[HV]Box\(children=|IntSlider\(", html), "a widget's repr instead of the controls"
    text = re.sub(r"<[^>]+>", "", html)
    assert re.search(r"Try other launches\.\s+When this notebook runs in Jupyter", text)
    assert "has no controls" in text


_FILE_LIKE_ALT = re.compile(r"[0-9a-f]{16,}|\.(png|svg|jpe?g|gif)\b|_images/", re.IGNORECASE)


def test_notebook_figures_have_meaningful_alt_text():
    bad = []
    for page in sorted((SITE / "notebooks").rglob("*.html")):
        for tag, attrs in parse(page).tags:
            if tag == "img" and "_static" not in attrs.get("src", ""):
                alt = (attrs.get("alt") or "").strip()
                if len(alt) < 20 or _FILE_LIKE_ALT.search(alt):
                    bad.append(f"{page.relative_to(SITE)}: alt={alt!r}")
    assert not bad, "\n".join(bad[:20])
    # the caption under a figure is its alt text
    alts = [a["alt"] for t, a in parse(SITE / "notebooks" / "03_cuda_kernel_loop.html").tags if t == "img"]
    assert any(alt.startswith("Figure: Each row is one trip of the loop") for alt in alts)


def test_notebook_03_packs_map_is_readable_at_page_width():
    # The page shows a figure at most about 700 CSS pixels wide; a 32-column map left 21 pixels a cell and
    # 5.4 pt labels. Each column must get at least 35 pixels.
    pytest.importorskip("PIL")
    from PIL import Image

    page = SITE / "notebooks" / "03_cuda_kernel_loop.html"
    html = page.read_text(encoding="utf-8")
    cell = _cell_after(html, "vec_trace</span><span class=\"p\">,</span> <span class=\"n\">row_length")
    columns = int(re.search(r'row_length</span><span class="o">=</span><span class="mi">(\d+)', cell).group(1))
    src = re.search(r'<img [^>]*src="([^"]+)"', cell).group(1)
    width = Image.open(page.parent / unquote(src)).width
    assert min(width, 700) / columns >= 35, f"{columns} columns in a {width}-pixel figure"
