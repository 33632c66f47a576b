"""labops.torch7: the Torch7 contract gives the same numbers as autograd."""

import pytest
import torch

import labops.torch7 as torch7
from labops import nn


def build_pair(device):
    """The same small network twice: as Torch7-style modules and as labops.nn modules."""
    torch.manual_seed(0)
    old = (
        torch7.Sequential()
        .add(torch7.SpatialConvolutionMM(3, 8, 3, 3, 1, 1, 1))
        .add(torch7.Tanh())
        .add(torch7.SpatialDepthWiseConvolution(8, 2, 3, 3, 2, 2, 1))
        .add(torch7.GELU("sigmoid"))
        .add(torch7.SpatialUpSamplingBilinear(scale_factor=2))
    ).to(device=device, dtype=torch.float64)
    new = torch.nn.Sequential(
        nn.Conv2dMM(3, 8, 3, padding=1),
        nn.Tanh(),
        nn.DepthwiseConv2d(8, 3, stride=2, padding=1, multiplier=2),
        nn.GELU("sigmoid"),
        nn.UpsampleBilinear2d(scale_factor=2),
    ).to(device=device, dtype=torch.float64)
    with torch.no_grad():
        for o, n in [(old.modules[0], new[0]), (old.modules[2], new[2])]:
            n.weight.copy_(o.weight)
            n.bias.copy_(o.bias)
    return old, new


def assert_matches_autograd(old, new, x):
    """One explicit forward/backward of the Torch7-style net equals autograd through `new`:
    outputs, input gradients and every parameter gradient, to float64 rounding."""
    out = old.forward(x)
    g = torch.randn_like(out)
    grad_in = old.backward(x, g)
    xa = x.clone().requires_grad_()
    out_a = new(xa)
    out_a.backward(g)
    torch.testing.assert_close(out, out_a.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_in, xa.grad, rtol=1e-12, atol=1e-12)
    grads, expected = old.parameters()[1], [p.grad for p in new.parameters()]
    assert len(grads) == len(expected) > 0
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_torch7_matches_autograd(device):
    old, new = build_pair(device)
    assert len(old.parameters()[1]) == 4
    assert_matches_autograd(old, new, torch.randn(2, 3, 9, 9, dtype=torch.float64, device=device))


def test_acc_grad_parameters_accumulates_with_scale(device):
    old, _ = build_pair(device)
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64, device=device)
    g = torch.randn_like(old.forward(x))
    old.zeroGradParameters()
    old.backward(x, g, scale=1.0)
    once = [t.clone() for t in old.parameters()[1]]
    assert all(t.abs().sum() > 0 for t in once)
    old.zeroGradParameters()
    assert all(t.abs().sum() == 0 for t in old.parameters()[1])
    old.backward(x, g, scale=0.5)
    old.backward(x, g, scale=0.5)
    for got, want in zip(old.parameters()[1], once):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_update_parameters_is_sgd_step(device):
    old, _ = build_pair(device)
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64, device=device)
    old.zeroGradParameters()
    old.backward(x, torch.randn_like(old.forward(x)))
    before = [w.clone() for w in old.parameters()[0]]
    old.updateParameters(0.1)
    for w, g, b in zip(*old.parameters(), before):
        torch.testing.assert_close(w, b - 0.1 * g)


def test_linear_matches_torch():
    torch.manual_seed(1)
    layer = torch7.Linear(5, 3, dtype=torch.float64)
    ref = torch.nn.Linear(5, 3).double()
    with torch.no_grad():
        ref.weight.copy_(layer.weight)
        ref.bias.copy_(layer.bias)
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 3, dtype=torch.float64)
    out = layer.forward(x.detach())
    gi = layer.backward(x.detach(), g)
    ref(x).backward(g)
    torch.testing.assert_close(out, ref(x).detach())
    torch.testing.assert_close(gi, x.grad)
    torch.testing.assert_close(layer.gradWeight, ref.weight.grad)
    torch.testing.assert_close(layer.gradBias, ref.bias.grad)


def test_sequential_add_returns_itself():
    seq = torch7.Sequential()
    assert seq.add(torch7.Tanh()) is seq


@pytest.mark.parametrize("cls", [torch7.Tanh, torch7.GELU])
def test_parameter_free_layers_have_no_parameters(cls):
    assert cls().parameters() == ([], [])


def test_classifier_with_pooling_reorg_softmax_matches_autograd(device):
    torch.manual_seed(2)
    conv = torch7.SpatialConvolutionMM(3, 8, 3, 3, 1, 1, 1, dtype=torch.float64)
    fc = torch7.Linear(32, 5, dtype=torch.float64)
    old = (
        torch7.Sequential().add(conv).add(torch7.GELU("tanh")).add(torch7.Reorg(2, "darknet"))
        .add(torch7.SpatialGlobalAveragePooling()).add(torch7.View(32)).add(fc).add(torch7.SoftMax())
    ).to(device=device)
    new_conv, new_fc = nn.Conv2dMM(3, 8, 3, padding=1).double(), torch.nn.Linear(32, 5).double()
    with torch.no_grad():
        new_conv.weight.copy_(conv.weight)
        new_conv.bias.copy_(conv.bias)
        new_fc.weight.copy_(fc.weight)
        new_fc.bias.copy_(fc.bias)
    new = torch.nn.Sequential(new_conv, nn.GELU("tanh"), nn.Reorg(2, "darknet"), nn.GlobalAvgPool2d(),
                              torch.nn.Flatten(), new_fc, nn.Softmax(-1)).to(device)
    assert_matches_autograd(old, new, torch.randn(4, 3, 8, 8, dtype=torch.float64, device=device))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_criterion_matches_torch(device, reduction):
    torch.manual_seed(3)
    logits = torch.randn(6, 5, dtype=torch.float64, device=device) * 3
    target = torch.randint(0, 5, (6,), device=device)
    crit = torch7.CrossEntropyCriterion(reduction)
    loss = crit.forward(logits, target)
    grad = crit.backward(logits, target)
    la = logits.clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(la, target, reduction=reduction)
    ref.backward(torch.ones_like(ref))
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, la.grad, rtol=1e-12, atol=1e-12)


def test_cross_entropy_criterion_rejects_bad_target():
    with pytest.raises(ValueError, match="target"):
        torch7.CrossEntropyCriterion().forward(torch.randn(3, 4), torch.tensor([0, 4, 1]))


LAYERS = {
    "Linear": (lambda: torch7.Linear(6, 4, dtype=torch.float64), (5, 6),
               lambda x, w, b: torch.nn.functional.linear(x, w, b)),
    "SpatialConvolutionMM": (lambda: torch7.SpatialConvolutionMM(3, 4, 3, 2, 2, 1, 1, dtype=torch.float64),
                             (2, 3, 7, 6),
                             lambda x, w, b: torch.nn.functional.conv2d(x, w, b, stride=(1, 2), padding=1)),
    "SpatialDepthWiseConvolution": (lambda: torch7.SpatialDepthWiseConvolution(3, 2, 3, 3, 2, 2, 1,
                                                                               dtype=torch.float64),
                                    (2, 3, 7, 6),
                                    lambda x, w, b: torch.nn.functional.conv2d(x, w, b, stride=2, padding=1,
                                                                               groups=3)),
}


@pytest.mark.parametrize("name", LAYERS)
def test_acc_update_grad_parameters_is_an_sgd_step_that_keeps_grad_weight(device, name):
    """accUpdateGradParameters(input, gradOutput, lr) does W -= lr * dE/dW in place (torch/nn Module.lua
    Module:accUpdateGradParameters) and leaves gradWeight / gradBias as they were; float64 oracle: autograd
    through the functional op."""
    make, shape, functional = LAYERS[name]
    torch.manual_seed(4)
    layer = make().to(device=device)
    x = torch.randn(shape, dtype=torch.float64, device=device)
    g = torch.randn_like(layer.forward(x))
    for grad in (layer.gradWeight, layer.gradBias):
        grad.copy_(torch.randn_like(grad))  # gradients of earlier batches, which the update must not touch
    grads_before = [layer.gradWeight.clone(), layer.gradBias.clone()]
    grad_buffers = [layer.gradWeight, layer.gradBias]
    weight, bias = layer.weight, layer.bias
    w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    dw, db = torch.autograd.grad(functional(x, w, b), (w, b), g)
    lr = 0.37
    layer.accUpdateGradParameters(x, g, lr)
    assert layer.weight is weight and layer.bias is bias  # updated in place
    assert [layer.gradWeight, layer.gradBias] == grad_buffers  # the same tensors, put back
    torch.testing.assert_close(layer.weight, w.detach() - lr * dw, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer.bias, b.detach() - lr * db, rtol=1e-12, atol=1e-12)
    for got, want in zip((layer.gradWeight, layer.gradBias), grads_before):
        assert torch.equal(got, want)


def test_backward_update_of_a_sequential_matches_autograd(device):
    """backwardUpdate = updateGradInput with the old weights, then every module's W -= lr * dE/dW."""
    old, new = build_pair(device)
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64, device=device)
    g = torch.randn_like(old.forward(x))
    old.zeroGradParameters()
    before = [w.clone() for w in old.parameters()[0]]
    xa = x.clone().requires_grad_()
    new(xa).backward(g)
    lr = 0.05
    grad_in = old.backwardUpdate(x, g, lr)
    torch.testing.assert_close(grad_in, xa.grad, rtol=1e-12, atol=1e-12)
    for w, b, p in zip(old.parameters()[0], before, new.parameters()):
        torch.testing.assert_close(w, b - lr * p.grad, rtol=1e-12, atol=1e-12)
    assert all(t.abs().sum() == 0 for t in old.parameters()[1])  # no gradient was stored


@pytest.mark.parametrize("cls", [torch7.Tanh, torch7.GELU])
def test_acc_update_grad_parameters_of_a_parameter_free_layer_changes_nothing(cls):
    layer = cls()
    x = torch.randn(3, 4, dtype=torch.float64)
    layer.forward(x)
    layer.accUpdateGradParameters(x, torch.randn_like(x), 0.1)
    assert layer.parameters() == ([], []) and not hasattr(layer, "gradWeight")
