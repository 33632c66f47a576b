"""Every layer keeps the same file set (see the layout in docs and issue 15): a schema in
csrc/registration.cpp belongs to the layer whose labops/ops/L.py registers its fake, and that layer
has csrc/ops/L.h (math), csrc/ops/L_ops.h (entry points), csrc/cpu/L.cpp, csrc/cuda/L.cu,
labops/ops/L.py, labops/reference/L.py, labops/bench/L.py and tests/test_L.py."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FILE_SET = ("csrc/ops/{L}.h", "csrc/ops/{L}_ops.h", "csrc/cpu/{L}.cpp", "csrc/cuda/{L}.cu", "labops/ops/{L}.py",
            "labops/reference/{L}.py", "labops/bench/{L}.py", "tests/test_{L}.py")

# Files that the C++ branches add or rename (pooling_ops.h, reorg_ops.h, conv2d_mm.h/.cpp/.cu).
def _schemas():
    """Public op names: m.def("name(...") in registration.cpp; names starting with _ are test-only."""
    text = (ROOT / "csrc" / "registration.cpp").read_text()
    return [name for name in re.findall(r'm\.def\(\s*"(\w+)\(', text) if not name.startswith("_")]


def _layer_of_fakes():
    """op name -> the layer L whose labops/ops/L.py registers its fake."""
    owner = {}
    for path in sorted((ROOT / "labops" / "ops").glob("[!_]*.py")):
        for name in re.findall(r'register_fake\(\s*"labops::(\w+)"', path.read_text()):
            owner[name] = path.stem
    return owner


LAYERS = ["activation", "conv2d_mm", "depthwise", "pooling", "reorg", "softmax", "upsample"]


def test_every_schema_has_a_layer():
    owner = _layer_of_fakes()
    schemas = _schemas()
    assert schemas, "no schema found in csrc/registration.cpp"
    assert [s for s in schemas if s not in owner] == []
    assert sorted(set(owner[s] for s in schemas)) == LAYERS


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_has_its_file_set(layer):
    missing = [p.format(L=layer) for p in FILE_SET if not (ROOT / p.format(L=layer)).is_file()]
    assert missing == []
