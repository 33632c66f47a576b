"""A layer is a folder: csrc/<L>/ holds its math (<L>.h), its entry (entry.h: checks, allocation,
dispatch), its CPU and CUDA launchers (cpu.cpp, cuda.cu) and its registration (register.cpp: schemas
and autograd kernels). Its Python faces are modules named L in labops.ops, labops.nn (where the
layer has modules), labops.reference and labops.bench, and its tests are tests/test_L.py. No list of
layers is written anywhere: every one is read from the folders, so these tests hold the folders
to one set of names."""

import re
from pathlib import Path

import pytest

from labops import _build, _layers

ROOT = Path(__file__).resolve().parents[1]
CSRC_LAYERS = _build.layer_names(ROOT / "csrc")

FILE_SET = ("csrc/{L}/{L}.h", "csrc/{L}/entry.h", "csrc/{L}/cpu.cpp", "csrc/{L}/cuda.cu", "csrc/{L}/register.cpp",
            "labops/ops/{L}.py", "labops/reference/{L}.py", "labops/bench/{L}.py", "tests/test_{L}.py",
            "docs/layers/{L}.md")


def _schemas(layer):
    """The op names csrc/<layer>/register.cpp defines (m.def); names starting with _ are test-only."""
    return re.findall(r'm\.def\(\s*"(\w+)\(', (ROOT / "csrc" / layer / "register.cpp").read_text())


def _fakes(layer):
    """The ops with a fake: a Python register_fake in labops/ops/<layer>.py, or a Meta kernel registered in
    csrc/<layer>/register.cpp (TORCH_LIBRARY_IMPL(labops, Meta, m): the C++ rules and shapes run on fakes),
    one m.impl at a time or as register_kernels<Meta>(m), the list of the layer's ops in its entry.h (which
    LABOPS_REGISTER_LAYER(<layer>), csrc/common/register_layer.h, calls)."""
    python = re.findall(r'register_fake\(\s*"labops::(\w+)"', (ROOT / "labops" / "ops" / f"{layer}.py").read_text())
    register_cpp = (ROOT / "csrc" / layer / "register.cpp").read_text()
    meta_blocks = re.findall(r"TORCH_LIBRARY_IMPL\(labops, Meta, m\) \{(.*?)\n\}", register_cpp, re.S)
    meta = [name for block in meta_blocks for name in re.findall(r'm\.impl\("(\w+)"', block)]
    if (any(re.search(r"register_kernels<[\w:]*\bMeta>\(m\)", block) for block in meta_blocks)
            or re.search(rf"^LABOPS_REGISTER_LAYER\({layer}\)$", register_cpp, re.M)):
        entry = (ROOT / "csrc" / layer / "entry.h").read_text()
        listed = re.search(r"void register_kernels\(Module& m\) \{(.*?)\n\}", entry, re.S).group(1)
        meta += re.findall(r'impl\("(\w+)"', listed)
    return python + meta


def test_python_and_csrc_have_the_same_layers():
    assert CSRC_LAYERS and list(_layers.LAYERS) == CSRC_LAYERS


@pytest.mark.parametrize("layer", CSRC_LAYERS)
def test_layer_has_its_file_set(layer):
    missing = [p.format(L=layer) for p in FILE_SET if not (ROOT / p.format(L=layer)).is_file()]
    assert missing == []


@pytest.mark.parametrize("layer", CSRC_LAYERS)
def test_every_schema_of_a_layer_has_its_fake_in_the_same_layer(layer):
    public = [name for name in _schemas(layer) if not name.startswith("_")]
    assert public, f"csrc/{layer}/register.cpp defines no op"
    assert sorted(set(public) - set(_fakes(layer))) == []


def test_csrc_holds_only_layer_folders_and_common():
    stray = [p.relative_to(ROOT / "csrc").as_posix() for p in (ROOT / "csrc").iterdir()
             if p.name != "common" and not (p / "register.cpp").is_file()]
    assert stray == []
    assert not list((ROOT / "csrc").glob("*.cpp")), "a file at the top of csrc/ is a hub: put it in its layer's folder"


def _global_scope_declarations(text):
    """`using`, `static` and namespace aliases outside every brace: what two files of one unit would share."""
    depth, outside = 0, []
    for line in re.sub(r"//.*", "", text).splitlines():
        if depth == 0 and re.match(r"\s*(using |static |namespace \w+ =)", line):
            outside.append(line.strip())
        depth += line.count("{") - line.count("}")
    return outside


@pytest.mark.parametrize("layer", CSRC_LAYERS)
def test_layer_code_lives_in_its_namespace(layer):
    """Several layers' .cpp files share one translation unit (Note [translation units] in labops/_build.py),
    so a layer's definitions must not meet another's at global scope."""
    for name in ("cpu.cpp", "register.cpp"):
        text = (ROOT / "csrc" / layer / name).read_text()
        assert f"namespace labops::{layer} {{" in text, f"csrc/{layer}/{name} has no namespace labops::{layer}"
        assert _global_scope_declarations(text) == [], f"csrc/{layer}/{name}: declarations at global scope"


def test_common_is_compiled_but_is_not_a_layer():
    """csrc/common/register.cpp holds ops no layer owns (the ladder's, Note [the ladder] in csrc/common/ladder.h):
    compiled with the layers, in a unit with them, yet not a layer (no file set, no Python faces)."""
    assert "common" not in CSRC_LAYERS
    assert _build.plan().sources[:1] == [ROOT / "csrc" / "common" / "register.cpp"]
    assert all(name.startswith("_") for name in _schemas("common")), "csrc/common defines private ops only"
    text = (ROOT / "csrc" / "common" / "register.cpp").read_text()
    assert "namespace labops::ladder {" in text and _global_scope_declarations(text) == []
