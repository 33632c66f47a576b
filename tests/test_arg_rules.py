"""Every argument rule of every op, fed to the eager op and to its fake: the same exception, word for word.

The rules are written once, in C++: csrc/<layer>/entry.h's rule functions run first in every eager call
and are the op's Meta kernel, which fake tensors run under torch.compile (registered in
csrc/<layer>/register.cpp). This file shows the two paths agree: each bad case goes to
``torch.ops.labops.<op>`` with real CPU tensors and with fake ones (``FakeTensorMode``), and both must
raise the same type with the same message. Layers that still have a Python fake are held to it the same way.
"""

import re
from pathlib import Path

import pytest
import torch
from conftest import layer_cases, t
from torch._subclasses.fake_tensor import FakeTensorMode

import labops.ops  # noqa: F401  (builds the ops the first time, and loads them)

L = torch.ops.labops
ROOT = Path(__file__).resolve().parents[1]

# Each layer's rows sit beside its other tests, as ARG_RULE_CASES in tests/test_<layer>.py: (op, id, args),
# each breaking one rule of the op's C++ checks. A new layer adds its rows there, and nothing here.
CASES_OF_LAYER = layer_cases("ARG_RULE_CASES")
CASES = [case for cases in CASES_OF_LAYER.values() for case in cases]


def _op_of(case):
    return case.values[0] if hasattr(case, "values") else case[0]


def _id(case):
    values = case.values if hasattr(case, "values") else case
    return f"{values[0]}: {values[1]}"


def _raised(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - which exception is what the test compares
        return type(e), str(e)
    return None, "no exception"


def _fake_args(mode, args):
    return tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.parametrize("op,name,args", CASES, ids=[_id(c) for c in CASES])
def test_eager_and_fake_raise_the_same(op, name, args):
    eager = _raised(lambda: getattr(L, op)(*args))
    assert eager[0] is ValueError, f"the eager op accepted a bad case: {eager}"
    assert eager[1].startswith(f"labops.{op.removesuffix('_backward')}") or eager[1].startswith(f"labops.{op}")
    with FakeTensorMode() as mode:
        fake = _raised(lambda: getattr(L, op)(*_fake_args(mode, args)))
    assert fake == eager


def test_a_value_rule_is_eager_only():
    # cross_entropy's targets must lie in [0, C): a rule on values, which a fake tensor does not have.
    logits, bad = t(4, 3), torch.tensor([0, 1, 2, 3])
    with pytest.raises(ValueError, match=re.escape("target must hold class indices in [0, C) = [0, 3)")):
        L.cross_entropy(logits, bad, "mean")
    with FakeTensorMode() as mode:
        assert L.cross_entropy(*_fake_args(mode, (logits, bad)), "mean").shape == ()


def _public_schemas(register_cpp):
    return {name for name in re.findall(r'm\.def\(\s*"(\w+)\(', register_cpp.read_text()) if not name.startswith("_")}


def test_every_op_has_bad_cases():
    # Every public op of every csrc/*/register.cpp has a row, and each row sits in the test file of the layer
    # whose register.cpp defines the op's schema.
    public = set().union(*(_public_schemas(path) for path in (ROOT / "csrc").glob("*/register.cpp")))
    assert public - {_op_of(c) for c in CASES} == set()
    for layer, cases in CASES_OF_LAYER.items():
        others = {_op_of(c) for c in cases} - _public_schemas(ROOT / "csrc" / layer / "register.cpp")
        assert others == set(), f"tests/test_{layer}.py has rows of ops its layer does not define"
