"""What the course's prose cites must exist: every file a notebook or a README names.

A student who follows a citation to a file that is not there stops trusting the
rest. Paths are resolved against the repository, csrc/ (notebooks write
`ops/depthwise.h` for csrc/ops/depthwise.h), labops/, notebooks/, tests/,
docs/benchmarks/ and PyTorch's include directory (for `torch/extension.h`).
"""

import pathlib
import re

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("notebooks/exercises/source/*/*.ipynb")) + [
    ROOT / "README.md", ROOT / "notebooks" / "exercises" / "README.md", ROOT / "docs" / "README.md"]
# Files named only as examples of what a reader would write themselves (notebook 02's history section).
HYPOTHETICAL = {"gelu_ext.cpp", "setup.py"}
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
    roots = [ROOT, ROOT / "csrc", ROOT / "labops", ROOT / "notebooks", ROOT / "tests",
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
