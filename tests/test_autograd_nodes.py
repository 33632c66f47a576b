"""The graph nodes csrc/<layer>/register.cpp files build by hand behave like PyTorch's own.

Most ops build their autograd node the way PyTorch's generated code does (a Node with plain fields,
for host time) instead of through torch::autograd::Function. What Function gave for free must
still hold: saved tensors are freed after a backward (a second one raises, as for native ops),
retain_graph keeps them, saved-tensor hooks see them, and an op with no input requiring grad
records nothing.
"""

import pytest
import torch
from conftest import layer_cases

import labops


def _x(*shape):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


# Each layer's rows sit beside its other tests, as AUTOGRAD_NODE_CASES in tests/test_<layer>.py:
# (name, labops fn, native fn, input shape, whether the node saves a tensor). A new layer adds its rows there.
CASES = [case for cases in layer_cases("AUTOGRAD_NODE_CASES").values() for case in cases]


@pytest.mark.parametrize("name, fn, native, shape, saves", CASES, ids=[c[0] for c in CASES])
def test_node_matches_native_and_frees_what_it_saved(name, fn, native, shape, saves):
    x = _x(*shape).requires_grad_()
    y = fn(x)
    assert y.grad_fn is not None and y.requires_grad
    g = torch.ones_like(y)
    (want,) = torch.autograd.grad(native(x), x, g)
    (first,) = torch.autograd.grad(y, x, g, retain_graph=True)
    (second,) = torch.autograd.grad(y, x, g)  # retain_graph kept what the node saved
    torch.testing.assert_close(first, want)
    torch.testing.assert_close(second, want)
    if saves:  # the last backward freed the saved tensors, as for a native op
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            torch.autograd.grad(y, x, g)


@pytest.mark.parametrize("name, fn, native, shape, saves", CASES, ids=[c[0] for c in CASES])
def test_no_graph_without_requires_grad(name, fn, native, shape, saves):
    x = _x(*shape)
    assert fn(x).grad_fn is None
    with torch.no_grad():
        assert fn(x.requires_grad_()).grad_fn is None


def test_saved_tensor_hooks_see_what_the_node_saves():
    x = _x(3, 4).requires_grad_()
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = labops.softmax(x, 1)
    assert packed == [y.shape]  # softmax saves its output, nothing else
    (grad,) = torch.autograd.grad(y, x, torch.ones_like(y))
    torch.testing.assert_close(grad, torch.zeros_like(x))  # rows of softmax sum to 1
