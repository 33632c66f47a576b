"""The capstone (notebook 10): data, the network three ways, both training styles, DDP with two processes."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from labops import capstone
from labops.testing import rel_error

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def one_thread():
    # The layers are small: one thread is faster than two on a busy 2-core runner, and the
    # torchrun test's two processes get a core each.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- data ----

def test_digits_file_is_small_and_whole():
    assert capstone.DIGITS_PATH.stat().st_size <= 100_000
    with np.load(capstone.DIGITS_PATH) as f:
        images, labels = f["images"], f["labels"]
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8 and images.max() == 16
    assert labels.shape == (1797,) and sorted(set(labels.tolist())) == list(range(10))


def test_digits_file_equals_scikit_learns():
    datasets = pytest.importorskip("sklearn.datasets")
    bunch = datasets.load_digits()
    with np.load(capstone.DIGITS_PATH) as f:
        np.testing.assert_array_equal(f["images"].reshape(-1, 64), bunch.data)
        np.testing.assert_array_equal(f["labels"], bunch.target)


def test_split_is_fixed_and_standardised():
    a, b = capstone.load_digits(), capstone.load_digits()
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert a.x_train.shape == (1797 - capstone.TEST_SIZE, 1, 8, 8) and a.x_test.shape == (capstone.TEST_SIZE, 1, 8, 8)
    assert a.x_train.dtype == torch.float32 and a.y_train.dtype == torch.int64
    assert sorted(set(a.y_test.tolist())) == list(range(10))
    with np.load(capstone.DIGITS_PATH) as f:
        raw = f["images"].reshape(len(f["images"]), -1)
    # The split is a seeded permutation: train rows, then test rows, each an affine image of the raw pixels.
    halves = np.concatenate([a.x_train.flatten(1).numpy(), a.x_test.flatten(1).numpy()]).astype(np.float64)
    rows = _raw_in_split_order(raw)
    scale, shift = np.polyfit(halves.ravel(), rows.ravel(), 1)
    assert scale > 0 and np.abs(halves * scale + shift - rows).max() < 1e-3
    # Standardised with the training half's numbers.
    assert abs(a.x_train.double().mean().item()) < 1e-6 and abs(a.x_train.double().std().item() - 1) < 1e-6
    np.testing.assert_array_equal(a.images_test.reshape(len(a.images_test), -1),
                                  _raw_in_split_order(raw)[-capstone.TEST_SIZE:])
    assert not torch.equal(a.y_test, capstone.load_digits(seed=1).y_test)


def _raw_in_split_order(raw):
    """The raw rows in the order load_digits puts them: train, then test."""
    order = torch.randperm(len(raw), generator=torch.Generator().manual_seed(0)).numpy()
    test, train = order[:capstone.TEST_SIZE], order[capstone.TEST_SIZE:]
    return np.concatenate([raw[train], raw[test]]).astype(np.float64)


def test_batches_cover_each_epoch_once():
    seen = [b for b in capstone.batches(10, batch_size=3, epochs=2, seed=0)]
    assert [len(b) for b in seen] == [3] * 6
    for epoch in (seen[:3], seen[3:]):
        flat = torch.cat(epoch).tolist()
        assert len(set(flat)) == 9 and set(flat) <= set(range(10))
    assert torch.cat(seen[:3]).tolist() != torch.cat(seen[3:]).tolist()


# ---- the network ----

def test_labops_model_equals_torch_nn_in_float64(device):
    torch.manual_seed(0)
    x = torch.randn(6, 1, 8, 8, dtype=torch.float64, device=device)
    y = torch.randint(0, 10, (6,), device=device)
    ours = capstone.labops_model(seed=3, device=device, dtype=torch.float64)
    theirs = capstone.torch_model(seed=3, device=device, dtype=torch.float64)
    for (name_a, a), (name_b, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        assert name_a == name_b and torch.equal(a, b)
    out_a, out_b = ours(x), theirs(x)
    assert out_a.shape == (6, 10)
    assert rel_error(out_a, out_b) < 1e-10
    from labops.ops import cross_entropy

    cross_entropy(out_a, y).backward()
    F.cross_entropy(out_b, y).backward()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert rel_error(a.grad, b.grad) < 1e-9, name


def test_the_weights_come_from_the_seed():
    a, b, c = capstone.labops_model(seed=0), capstone.labops_model(seed=0), capstone.labops_model(seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a[1].weight, c[1].weight)
    assert all(not torch.any(m.bias) for m in a if getattr(m, "bias", None) is not None)


def test_legacy_model_has_copies_of_the_weights(device):
    model = capstone.labops_model(device=device)
    net = capstone.legacy_model(model)
    weights, grads = net.parameters()
    assert len(weights) == len(list(model.parameters())) == 10
    for w, p in zip(weights, model.parameters()):
        assert torch.equal(w, p) and w.data_ptr() != p.data_ptr()
    assert all(not g.any() for g in grads)
    x = torch.randn(5, 1, 8, 8, device=device)
    torch.testing.assert_close(net.forward(x), model(x).detach(), rtol=0, atol=0)


def test_one_legacy_step_is_one_autograd_step(device):
    data = capstone.load_digits(device=device)
    model = capstone.labops_model(device=device)
    net = capstone.legacy_model(model)
    auto = capstone.train_autograd(model, data, epochs=1, batch_size=32, lr=0.2)
    torch7 = capstone.train_legacy(net, data, epochs=1, batch_size=32, lr=0.2)
    assert len(auto.losses) == len(torch7.losses) == (1797 - capstone.TEST_SIZE) // 32
    assert auto.losses[-1] < auto.losses[0] - 0.5  # it learns
    # The same ops on the same numbers: the CPU gives the same bits; allow float32 rounding elsewhere.
    assert capstone.max_relative_difference(auto.losses, torch7.losses) < 1e-5
    for w, p in zip(net.parameters()[0], model.parameters()):
        assert rel_error(w, p) < 1e-5
    assert abs(auto.test_accuracy - torch7.test_accuracy) < 0.01


def test_a_wrong_update_is_seen():
    # The comparison above can fail: a legacy step with a different learning rate drifts at once.
    data = capstone.load_digits()
    model = capstone.labops_model()
    net = capstone.legacy_model(model)
    auto = capstone.train_autograd(model, data, epochs=1)
    torch7 = capstone.train_legacy(net, data, epochs=1, lr=capstone.LR * 1.01)
    assert capstone.max_relative_difference(auto.losses, torch7.losses) > 1e-4


# ---- data parallel: the real path, torchrun with two processes (gloo) ----

def test_ddp_two_processes_gloo(tmp_path):
    curve = tmp_path / "curve.txt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "labops.capstone", "--ddp", "--device", "cpu", "--curve", str(curve)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "backend gloo, 2 processes" in done.stdout
    found = re.findall(r"test accuracy: (\d+\.\d) %", done.stdout)
    assert len(found) == 1, done.stdout  # rank 0 alone prints it
    assert float(found[0]) >= 95.0
    # Two ranks of 16 images with averaged gradients are one process on batches of 32: the first
    # epoch agrees to float32 rounding (the sums run in another order, so not to the bit).
    ddp = np.loadtxt(curve)
    assert len(ddp) == capstone.EPOCHS * ((1797 - capstone.TEST_SIZE) // capstone.BATCH_SIZE)
    single = capstone.train_autograd(capstone.labops_model(), capstone.load_digits(), epochs=1)
    assert capstone.max_relative_difference(single.losses, ddp[:len(single.losses)]) < 1e-5
