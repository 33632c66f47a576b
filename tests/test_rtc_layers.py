"""labops.rtc_layers: write-up 004's layers as runtime kernels (softmax, cross-entropy, darknet reorg) and the
autograd-aware ops built from them, against torch and the compiled labops ops, on the CPU and on CUDA."""

import pytest
import torch
import torch.nn.functional as F

import labops
from labops import rtc_layers

from conftest import tolerances
from test_rtc import poisoned


SOFTMAX_SHAPES = [(37, 53), (1, 1), (5, 1000), (300, 7)]


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_softmax_matches_torch(device, shape, dtype):
    x = (5 * torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))).to(dtype)
    y = rtc_layers.softmax(x.to(device))
    rtol, atol = tolerances(dtype)
    torch.testing.assert_close(y.cpu().double(), torch.softmax(x.double(), -1), rtol=rtol, atol=atol)


@pytest.mark.parametrize("kernel", ["softmax_rows", "softmax_block_per_row"])
def test_softmax_kernels_with_a_small_grid(device, kernel):
    x = 3 * torch.randn(301, 257, dtype=torch.float64, device=device)
    y = poisoned(301, 257, dtype=torch.float64, device=device)
    getattr(rtc_layers, kernel)(x, y, grid=7, block=64)  # far fewer threads (or blocks) than rows
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-12, atol=1e-14)


def test_softmax_gradcheck(device):
    x = torch.randn(6, 9, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(rtc_layers.softmax, (x,))


def test_softmax_backward_matches_autograd_of_torch(device):
    x = torch.randn(17, 23, dtype=torch.float64, device=device, requires_grad=True)
    g = torch.randn(17, 23, dtype=torch.float64, device=device)
    (ours,) = torch.autograd.grad(rtc_layers.softmax(x), x, g)
    (native,) = torch.autograd.grad(torch.softmax(x, -1), x, g)
    torch.testing.assert_close(ours, native, rtol=1e-12, atol=1e-14)


def test_cross_entropy_and_its_gradient(device):
    gen = torch.Generator().manual_seed(3)
    logits = (4 * torch.randn(29, 11, dtype=torch.float64, generator=gen)).to(device).requires_grad_()
    target = torch.randint(0, 11, (29,), generator=gen).to(device)
    loss = rtc_layers.cross_entropy(logits, target)
    torch.testing.assert_close(loss, F.cross_entropy(logits, target, reduction="none"), rtol=1e-12, atol=1e-13)
    (ours,) = torch.autograd.grad(loss.mean(), logits)
    (compiled,) = torch.autograd.grad(labops.cross_entropy(logits, target, "mean"), logits)
    torch.testing.assert_close(ours, compiled, rtol=1e-12, atol=1e-14)
    small = logits[:4, :5].detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: rtc_layers.cross_entropy(t, target[:4] % 5).mean(), (small,))


def test_cross_entropy_refuses_a_bad_target():
    with pytest.raises(ValueError, match=r"target must hold class indices in \[0, 3\)"):
        rtc_layers.cross_entropy(torch.randn(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="target must be an int64"):
        rtc_layers.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1], dtype=torch.int32))


@pytest.mark.parametrize("shape,stride", [((2, 8, 6, 10), 2), ((1, 18, 9, 6), 3), ((3, 4, 2, 2), 2),
                                          ((1, 5, 3, 7), 1)], ids=str)
def test_reorg_is_darknet_order(device, shape, stride):
    x = torch.randn(*shape, dtype=torch.float64, device=device)
    assert torch.equal(rtc_layers.reorg(x, stride), labops.reorg(x, stride, "darknet"))
    gy = torch.randn(labops.reorg(x, stride, "darknet").shape, dtype=torch.float64, device=device)
    assert torch.equal(torch.ops.labops_rtc.reorg_backward(gy, stride),
                       torch.ops.labops.reorg_backward(gy, stride, "darknet"))


def test_reorg_gradcheck(device):
    x = torch.randn(1, 8, 4, 6, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rtc_layers.reorg(t, 2), (x,))


def test_writeup_reorg_index_is_pixel_unshuffle_not_darknet(device):
    x = torch.randn(2, 4, 6, 6, device=device)
    y = poisoned(2, 16, 3, 3, device=device)
    rtc_layers.reorg_writeup(x, y, grid=2 * 4, block=1)
    assert torch.equal(y, F.pixel_unshuffle(x, 2))
    assert not torch.equal(y, labops.reorg(x, 2, "darknet"))
