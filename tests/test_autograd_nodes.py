"""The graph nodes csrc/<layer>/register.cpp files build by hand behave like PyTorch's own.

Most ops build their autograd node the way PyTorch's generated code does (a Node with plain fields,
for host time) instead of through torch::autograd::Function. What Function gave for free must
still hold: saved tensors are freed after a backward (a second one raises, as for native ops),
retain_graph keeps them, saved-tensor hooks see them, and an op with no input requiring grad
records nothing.
"""

import pytest
import torch
import torch.nn.functional as F

import labops


def _x(*shape):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


TARGET = torch.tensor([0, 2, 1, 4])

# (name, labops fn, native fn, input shape, whether the node saves a tensor)
CASES = [
    ("tanh", labops.tanh, torch.tanh, (3, 4), True),
    ("gelu", lambda a: labops.gelu(a, "tanh"), lambda a: F.gelu(a, approximate="tanh"), (3, 4), True),
    ("softmax", lambda a: labops.softmax(a, 0), lambda a: torch.softmax(a, 0), (3, 4), True),
    ("cross_entropy", lambda a: labops.cross_entropy(a, TARGET), lambda a: F.cross_entropy(a, TARGET),
     (4, 5), True),
    ("global_avg_pool2d", labops.global_avg_pool2d, lambda a: a.mean((-2, -1), keepdim=True), (2, 3, 4, 4),
     False),
    ("im2col", lambda a: labops.im2col(a, 3, 1, 1), lambda a: F.unfold(a, 3, 1, 1), (2, 3, 4, 4), False),
    ("upsample_bilinear2d", lambda a: labops.upsample_bilinear2d(a, scale_factor=2),
     lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"), (2, 3, 4, 4), False),
    ("reorg", lambda a: labops.reorg(a, 2, "crd"), lambda a: F.pixel_unshuffle(a, 2), (2, 3, 4, 4), False),
    ("batch_norm", lambda a: labops.batch_norm(a, training=True), lambda a: F.batch_norm(a, None, None, training=True),
     (2, 3, 4, 4), True),
]


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
