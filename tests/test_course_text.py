"""What the course's prose cites must exist: every file a notebook or a README names.

A student who follows a citation to a file that is not there stops trusting the
rest. Paths are resolved against the repository, csrc/ (notebooks write
`ops/depthwise.h` for csrc/ops/depthwise.h), labops/, notebooks/, tests/,
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
    planted = "The goal (DESIGN.md §6) is 80 %; see csrc/ops/nothing.h and ops/depthwise.h."
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
