"""What the course's prose cites must exist: every file a notebook or a README names.

A student who follows a citation to a file that is not there stops trusting the
rest. Paths are resolved against the repository, csrc/ (notebooks write
`depthwise/depthwise.h` for csrc/depthwise/depthwise.h), labops/, notebooks/, tests/,
docs/benchmarks/ and PyTorch's include directory (for `torch/extension.h`).
"""

import json
import pathlib
import re

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("notebooks/exercises/source/*/*.ipynb")) + [
    ROOT / "README.md", ROOT / "notebooks" / "exercises" / "README.md", ROOT / "docs" / "README.md",
    ROOT / "notebooks" / "glossary.md", ROOT / "notebooks" / "writeups.md"]
# Files named only as examples of what a reader would write themselves (notebook 02's build routes).
HYPOTHETICAL = {"gelu_ext.cpp", "setup.py", "csrc/square_plus.cpp", "csrc/square_plus.cu"}
CITATION = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:h|cuh|cpp|cu|py|ipynb|json|md|toml|cfg|sh|png))(?![\w/])")


def _torch_include_dirs():
    from torch.utils.cpp_extension import include_paths

    return [pathlib.Path(p) for p in include_paths()]


def _text(path: pathlib.Path) -> str:
    if path.suffix == ".ipynb":
        return "\n".join(cell.source for cell in nbformat.read(path, 4).cells)
    return path.read_text()


def missing_citations(text: str, where: pathlib.Path) -> list[str]:
    """The paths ``text`` cites that exist under none of the places a reader would look."""
    roots = [ROOT, ROOT / "csrc", ROOT / "labops", ROOT / "notebooks", ROOT / "tests", ROOT / "docs",
             ROOT / "docs" / "benchmarks", where.parent, *_torch_include_dirs()]
    missing = []
    for match in CITATION.finditer(text):
        cited = match.group(1)
        if cited in HYPOTHETICAL or cited.startswith(("http", "www.")):
            continue
        if not any((root / cited).exists() for root in roots):
            missing.append(cited)
    return missing


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_file_exists(document):
    assert document.exists()
    assert missing_citations(_text(document), document) == []


def test_a_planted_citation_is_caught():
    planted = "The goal (DESIGN.md §6) is 80 %; see csrc/ops/nothing.h and depthwise/depthwise.h."
    assert missing_citations(planted, ROOT / "README.md") == ["DESIGN.md", "csrc/ops/nothing.h"]


# ---- figures from the benchmark tables are read from them, never typed ----

BENCH_DIR = ROOT / "docs" / "benchmarks"
# A figure in prose: "67 %", "2.6x", "9 µs", "4 microseconds"; ranges "64-67 %" give both ends.
FIGURE = re.compile(r"(\d+(?:\.\d+)?)(?:\s*[-–]\s*(\d+(?:\.\d+)?))?\s*(%|x\b|µs|microseconds?)")


def _bench_values() -> dict[str, set]:
    """Every figure the committed tables hold, rounded as prose would quote it, by unit."""
    import json

    values = {"%": set(), "x": set(), "µs": set()}
    for path in BENCH_DIR.glob("*.json"):
        for row in json.loads(path.read_text()).get("rows", []):
            for key, v in row.items():
                if not isinstance(v, (int, float)) or isinstance(v, bool):
                    continue
                if key.endswith("pct_copy"):
                    values["%"] |= {f"{v:.0f}"}
                elif key.endswith("speedup"):
                    values["x"] |= {f"{v:.2f}", f"{v:.1f}"}
                elif key.endswith("_ms"):
                    values["µs"] |= {f"{1000 * v:.0f}", f"{1000 * v:.1f}"}
    return values


def typed_benchmark_figures(text: str, values: dict) -> list[str]:
    """Figures in ``text`` that equal a value of the benchmark tables (goals, said as such, excepted)."""
    found = []
    for m in FIGURE.finditer(text):
        unit = {"%": "%", "x": "x"}.get(m.group(3), "µs")
        start = max(text.rfind(". ", 0, m.start()), text.rfind("\n\n", 0, m.start()), 0)
        stops = [i for i in (text.find(". ", m.end()), text.find("\n\n", m.end())) if i >= 0]
        sentence = text[start: min(stops) if stops else len(text)].lower()
        if any(word in sentence for word in ("goal", "error")):
            continue  # a target the course sets, or a rounding error: not a benchmark figure
        for number in filter(None, (m.group(1), m.group(2))):
            if number in values[unit] and not (unit == "%" and number == "100"):
                found.append(m.group(0))
                break
    return found


NOTEBOOKS = sorted(ROOT.glob("notebooks/[0-9][0-9]*_*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_no_benchmark_figure_is_typed_in_prose(notebook):
    values = _bench_values()
    typed = {i: typed_benchmark_figures(cell.source, values)
             for i, cell in enumerate(nbformat.read(notebook, 4).cells) if cell.cell_type == "markdown"}
    typed = {i: figures for i, figures in typed.items() if figures}
    assert typed == {}, f"figures typed in markdown (cell: figures); print them from docs/benchmarks instead: {typed}"


def test_a_planted_benchmark_figure_is_caught():
    values = {"%": {"67", "68"}, "x": {"2.64", "2.6"}, "µs": {"9.0", "9"}}
    planted = "The forward reaches 67-68 % of the copy (2.6x native). The goal is 70 %. A launch lasts 9 µs."
    assert typed_benchmark_figures(planted, values) == ["67-68 %", "2.6x", "9 µs"]


LISTING = re.compile(r"^// (csrc/\S+), lines (\d+)-(\d+)$", re.M)  # show_source's first line
MAX_LISTING_LINES = 120


def long_listings(outputs_text: str) -> list[str]:
    """The show_source listings in a notebook's outputs longer than a reader follows in one go."""
    return [m.group(0) for m in LISTING.finditer(outputs_text)
            if int(m.group(3)) - int(m.group(2)) + 1 > MAX_LISTING_LINES]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_each_source_listing_is_short_enough_to_read(notebook):
    """A listing whose end marker moved away prints whatever lies between (notebook 05 once showed 678 lines
    of cuda.cu for its 17-line im2col kernel, once new kernels were written between the two markers)."""
    outputs = "\n".join("".join(out.get("text", "")) for cell in nbformat.read(notebook, 4).cells
                        if cell.cell_type == "code" for out in cell.outputs)
    assert long_listings(outputs) == [], f"listings over {MAX_LISTING_LINES} lines: move their end markers"


def test_a_planted_long_listing_is_caught():
    planted = "// csrc/conv2d_mm/cuda.cu, lines 64-741\ntemplate <int V>\n// csrc/a.h, lines 1-120\n"
    assert long_listings(planted) == ["// csrc/conv2d_mm/cuda.cu, lines 64-741"]


TIME_LINE = re.compile(r"\*\*Time:\*\* about (\d+) minutes to read and run \((\d+) words of prose at about 100 words "
                       r"a minute, and a minute for each of its (\d+) code cells\)")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_opens_with_objectives_and_an_honest_time(notebook):
    cells = nbformat.read(notebook, 4).cells
    head = cells[0].source
    assert "## Learning objectives" in head and "## Prerequisites" in head
    found = TIME_LINE.search(head)
    assert found, "the first cell needs the **Time:** line"
    minutes, words, code_cells = map(int, found.groups())
    actual_words = sum(len(c.source.split()) for c in cells[1:] if c.cell_type == "markdown")
    actual_cells = sum(c.cell_type == "code" for c in cells)
    assert code_cells == actual_cells and abs(words - actual_words) <= 0.1 * actual_words, (
        f"the Time line says {words} words and {code_cells} code cells; the notebook has {actual_words} and "
        f"{actual_cells}")
    assert abs(minutes - (actual_words / 100 + actual_cells)) <= 5


def test_each_notebook_mark_names_a_test_file_and_a_notebook():
    """`pytest -m nbNN` must not lose a test file to a rename."""
    from conftest import NOTEBOOK_OF_TEST_FILE

    for stem, mark in NOTEBOOK_OF_TEST_FILE.items():
        assert (ROOT / "tests" / f"{stem}.py").exists(), stem
        assert list(ROOT.glob(f"notebooks/{mark[2:]}_*.ipynb")), mark


def test_no_committed_measurement_is_older_than_the_tables_it_is_compared_with():
    """Notebook 09 compares the roofline with every table of docs/benchmarks, notebook 05 the cuDNN kernel
    names with conv2d_mm's table: each such file must come from the same GPU and be at least as new."""
    tables = {p.name: json.loads(p.read_text()) for p in (ROOT / "docs" / "benchmarks").glob("*.json")}
    pairs = [("roofline_cuda.json", name) for name in tables] + [("cudnn_kernels_gpu.json", "conv2d_mm.json")]
    for figure_file, table_file in pairs:
        figure, table = json.loads((ROOT / "docs" / figure_file).read_text()), tables[table_file]
        assert figure["device"] == table["device"], (figure_file, table_file)
        assert figure["date"] >= table["date"], (
            f"docs/{figure_file} ({figure['date']}) is older than docs/benchmarks/{table_file} ({table['date']}), "
            f"which it is compared with: measure it again")


# ---- a claim about someone else's code cites that code (issue #31) ----
#
# A paragraph claims something about outside code when it names one of OUTSIDE_CODE and, in the same sentence
# and within CLAIM_WINDOW words after the name, a verb of what code does (CODE_VERB): "THCUNN adds the bias with
# a second GEMM", "write-up 003 reads `scale_` as ...". Such a paragraph must carry a citation a reader can follow:
# a URL; a code span naming a file (it holds a "/" or ends in a source extension) or a function or macro
# (`name(`, `ns::name`, or one identifier of 6+ characters in ALL_CAPS, CamelCase or snake_case); or a pointer
# into a write-up ("§", "listing", "its section"). A paragraph that only names a library ("orange bars are
# cuDNN") makes no claim about its code and passes. Names and verbs are looked for outside code spans and URLs.
# The paragraphs are the blank-line blocks of every numbered notebook's markdown cells, writeups.md,
# glossary.md and docs/**/*.md; a list item, a table row or a heading is a paragraph of its own.

OUTSIDE_CODE = re.compile(r"(?<![\w/.-])(?:THNN|THCUNN|THC|ATen|cuDNN|cuBLAS|MXNet|[Dd]arknet|Caffe|cunn"
                          r"|Torch7's nn|[Ww]rite-up \d{3})(?![\w/-])")
CODE_VERB = re.compile(r"\b(?:compute[sd]?|call(?:s|ed)?|use[sd]?|add(?:s|ed)?|fill(?:s|ed)?|launch(?:es|ed)?"
                       r"|reuse[sd]?|keeps?|kept|writes?|wrote|reads?|runs?|ran|divide[sd]?|return(?:s|ed)?"
                       r"|implement(?:s|ed)?|gives?|gave|sums?|summed)\b")
CLAIM_WINDOW = 8
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_URL = re.compile(r"https?://\S+")
_WRITEUP_POINTER = re.compile(r"§|\blisting\b|\bits section\b")
_SOURCE_FILE = re.compile(r"\.(?:c|cc|cpp|cu|cuh|h|hpp|py|lua)\b")
_CALL = re.compile(r"[A-Za-z_]\w*\s*(?:\(|::)")
_IDENTIFIER = re.compile(r"\b(?:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Z]{6,}|[a-z]\w*?[a-z0-9][A-Z]\w*"
                         r"|[A-Z][a-z0-9]+[A-Z]\w*|[A-Za-z][A-Za-z0-9]*_\w+)\b")
CLAIM_DOCUMENTS = NOTEBOOKS + [ROOT / "notebooks" / "writeups.md", ROOT / "notebooks" / "glossary.md"] + sorted(
    p for p in ROOT.glob("docs/**/*.md")
    if not any(part.startswith("_") or part == "notebooks" for part in p.relative_to(ROOT / "docs").parts))


def _paragraphs(markdown: str):
    """Blank-line blocks of ``markdown`` without fenced code; list items, table rows and headings apart."""
    for block in re.split(r"\n\s*\n", _FENCE.sub("", markdown)):
        lines = []
        for line in block.splitlines():
            if lines and re.match(r"\s*(?:[-*+]\s|\d+\.\s|\||#)", line):
                yield "\n".join(lines)
                lines = []
            lines.append(line)
        if lines:
            yield "\n".join(lines)


def claims_about_outside_code(paragraph: str) -> bool:
    prose = re.sub(r"\]\([^)]*\)", "]", _URL.sub(" ", _CODE_SPAN.sub(" ", paragraph)))
    for name in OUTSIDE_CODE.finditer(prose):
        end = re.search(r"[.;:!?](?:\s|$)", prose[name.end():])
        sentence = prose[name.end(): name.end() + end.start() if end else len(prose)]
        if CODE_VERB.search(" ".join(sentence.split()[:CLAIM_WINDOW])):
            return True
    return False


def cites_code(paragraph: str) -> bool:
    if _URL.search(paragraph) or _WRITEUP_POINTER.search(paragraph):
        return True
    for span in (m.group(2).strip() for m in _CODE_SPAN.finditer(paragraph)):
        if "/" in span or _SOURCE_FILE.search(span) or _CALL.search(span):
            return True
        if any(len(ident) >= 6 for ident in _IDENTIFIER.findall(span)):
            return True
    return False


def uncited_claims(markdown: str) -> list[str]:
    """The paragraphs of ``markdown`` that claim what outside code does and cite nothing a reader can open."""
    return [p for p in _paragraphs(markdown) if claims_about_outside_code(p) and not cites_code(p)]


def _markdown_parts(path: pathlib.Path) -> dict:
    if path.suffix == ".ipynb":
        return {f"cell {i}": cell.source for i, cell in enumerate(nbformat.read(path, 4).cells)
                if cell.cell_type == "markdown"}
    return {"": path.read_text()}


@pytest.mark.parametrize("document", CLAIM_DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_claim_about_outside_code_cites_it(document):
    uncited = {where: found for where, text in _markdown_parts(document).items() if (found := uncited_claims(text))}
    assert uncited == {}, (
        "say where the code is (file and function, a URL, or the write-up's listing or §) in the same paragraph: "
        f"{uncited}")


def test_a_planted_uncited_claim_is_caught():
    caught = ["THCUNN's kernel computes the mean with one thread per plane, as the write-up does.",
              "- **Bias.** Write-up 003 adds the bias with a second GEMM.",
              "In Caffe the depthwise layer was computed as a grouped convolution."]
    passes = ["Orange bars are cuDNN; grey bars native PyTorch.",                      # names, claims nothing
              "The recorded run (calls from Python) is compared with cuBLAS at the same size.",  # verb too far
              "THCUNN adds the bias with a second GEMM (`SpatialConvolutionMM_updateOutput`).",
              "darknet's `forward_reorg_layer` calls `reorg_cpu` with the input's sizes.",
              "THNN computes it from the output (`THNN/generic/Tanh.c`).",
              "Write-up 002 reads every element with `Tensor::item()`.",
              "Write-up 004 launches one block (its last listing).",
              "cuDNN runs TF32 here (https://docs.nvidia.com/deeplearning/cudnn/).",
              "```\nATen computes this\n```"]
    assert [claims_about_outside_code(p) and not cites_code(p) for p in caught] == [True] * len(caught)
    assert [uncited_claims(p) for p in passes] == [[]] * len(passes)


# ---- each trap on a layer page points where the course shows it (issue #31: one source, link) ----
#
# A docs/layers/ page does not retell its notebook: every bullet of its "## Traps" list links the notebook
# section that shows the trap ({doc}`notebook 08 <../notebooks/08_...>`, section "Speed") or, for a trap in
# code, names the code: a code span holding a path (a "/" or a source extension) or a function (`name(`,
# `ns::name`). A bullet is a list item: it starts with "\n- " and runs to the next one or the list's end.

LAYER_PAGES = sorted(p for p in (ROOT / "docs" / "layers").glob("*.md") if p.name not in ("index.md", "add_a_layer.md"))
_TRAPS = re.compile(r"^## Traps[ \t]*\n(.*?)(?=^#{1,2} |\Z)", re.M | re.S)
_NOTEBOOK_LINK = re.compile(r"\{doc\}`[^`<]*<\.\./notebooks/[^>`]+>`")


def _points_where_shown(bullet: str) -> bool:
    if _NOTEBOOK_LINK.search(bullet):
        return True
    for span in (m.group(2).strip() for m in _CODE_SPAN.finditer(_NOTEBOOK_LINK.sub(" ", bullet))):
        if "/" in span or _SOURCE_FILE.search(span) or _CALL.search(span):
            return True
    return False


def traps_without_a_pointer(markdown: str) -> list[str]:
    """The first words of each "## Traps" bullet of ``markdown`` that links no notebook and names no code."""
    unlinked = []
    for section in _TRAPS.findall(markdown):
        for bullet in re.split(r"\n- ", "\n" + section.rstrip())[1:]:
            if not _points_where_shown(bullet):
                unlinked.append(" ".join(bullet.split()[:6]))
    return unlinked


@pytest.mark.parametrize("page", LAYER_PAGES, ids=lambda p: p.name)
def test_each_trap_on_a_layer_page_links_where_it_is_shown(page):
    text = page.read_text()
    assert _TRAPS.search(text), f"{page.relative_to(ROOT)} has no '## Traps' section"
    assert traps_without_a_pointer(text) == [], (
        f"{page.relative_to(ROOT)}: link the notebook section that shows each trap "
        "({doc}`notebook NN <../notebooks/NN_name>`, section \"...\") or name the code (a path, `name(`): "
        f"{traps_without_a_pointer(text)}")


def test_a_planted_bare_trap_is_caught():
    planted = ("# Layer\n\n## Traps\n\n"
               "- **Bare.** The notebook says so in other words, `x` and `float32` included.\n"
               "- **Linked.** See {doc}`notebook 08 <../notebooks/08_softmax_crossentropy_reorg>`, section \"Speed\".\n"
               "- **Code.** `csrc/softmax/cuda.cu` handles it.\n"
               "- **Function.** `find_bad_target()` checks it; Notebook 08 draws it.\n"
               "- **Unlinked mention.** Notebook 07 draws the difference.\n\n"
               "## Next\n\n- **Not a trap.** Anything.\n")
    assert traps_without_a_pointer(planted) == ["**Bare.** The notebook says so in", "**Unlinked mention.** Notebook 07 draws the"]
