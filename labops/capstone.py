"""The capstone: a small CNN made only of labops layers, trained on 8x8 handwritten digits.

The same network is built three ways from one description (:data:`ARCHITECTURE`):

* :func:`labops_model`: ``labops.nn`` modules, trained with autograd and ``torch.optim.SGD``;
* :func:`legacy_model`: ``labops.torch7`` Torch7-style modules with the explicit backward
  pass (``forward``, ``backward``, ``zeroGradParameters``, ``updateParameters``);
* :func:`torch_model`: ``torch.nn`` layers (``nn.Conv2d``, ``nn.GELU``, ...), the oracle
  and the speed reference.

Both training styles use plain SGD (``w -= lr * dE/dw``, no momentum: torch7's
``updateParameters`` does exactly that) on the same mini-batches, so their loss curves are
the same numbers. :func:`train_autograd` also runs under ``torch.compile`` and under
``DistributedDataParallel``.

Command line::

    python -m labops.capstone                     # both styles, one process: accuracy, curve agreement
    torchrun --standalone --nproc_per_node=2 -m labops.capstone --ddp   # data parallel (gloo; NCCL on GPUs)

The digits are scikit-learn's copy of the UCI "Optical Recognition of Handwritten Digits"
test set (1797 images of 8x8 pixels, values 0..16; CC BY 4.0), stored in
``labops/data/digits.npz`` (45 KB) so that nothing is downloaded and scikit-learn is not needed.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

DIGITS_PATH = Path(__file__).resolve().parent / "data" / "digits.npz"

# Hyper-parameters of the runs the notebook, the tests and the scripts make: plain SGD at lr 0.2
# on mini-batches of 32, 12 epochs of 44 steps (99.2 % of the test images right, CPU and H200).
EPOCHS = 12
BATCH_SIZE = 32
LR = 0.2
TEST_SIZE = 360

# The network, one layer per entry: (kind, arguments). Shapes for one 1x8x8 image on the right.
ARCHITECTURE = (
    ("upsample", dict(scale_factor=2)),                          # 1 x 16 x 16   bilinear, half-pixel
    ("conv", dict(cin=1, cout=16, k=3, padding=1)),              # 16 x 16 x 16
    ("gelu", {}),
    ("reorg", dict(stride=2)),                                   # 64 x 8 x 8    space-to-depth
    ("depthwise", dict(cin=64, k=3, padding=1)),                 # 64 x 8 x 8
    ("conv", dict(cin=64, cout=32, k=1, padding=0)),             # 32 x 8 x 8    pointwise
    ("gelu", {}),
    ("reorg", dict(stride=2)),                                   # 128 x 4 x 4
    ("conv", dict(cin=128, cout=64, k=3, padding=1)),            # 64 x 4 x 4
    ("gelu", {}),
    ("pool", {}),                                                # 64 x 1 x 1    global average
    ("conv", dict(cin=64, cout=10, k=1, padding=0)),             # 10 x 1 x 1    the classifier
    ("flatten", {}),                                             # 10            logits
)
# Reorg order "crd" is F.pixel_unshuffle (y[n, c*4 + dy*2 + dx] = x[n, c, 2h+dy, 2w+dx]), so
# torch.nn has the same layer. GELU is the exact (erf) form, F.gelu's default.
REORG_ORDER = "crd"
GELU_APPROXIMATE = "none"


# ---------------------------------------------------------------- data

@dataclass
class Digits:
    """A fixed train/test split of the digits, ready for the network.

    x_train: (N_train, 1, 8, 8) floating point, standardised with the training set's mean and
    std; y_train: (N_train,) int64 in 0..9; x_test, y_test likewise (N_test images).
    images_test: (N_test, 8, 8) uint8, the raw test images (0..16), for figures.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    images_test: np.ndarray = field(repr=False)

    def __repr__(self):
        return (f"Digits(train {tuple(self.x_train.shape)}, test {tuple(self.x_test.shape)}, "
                f"{self.x_train.dtype}, {self.x_train.device})")


def load_digits(test_size: int = TEST_SIZE, seed: int = 0, device="cpu", dtype=torch.float32) -> Digits:
    """The 1797 digits split at random (``seed``) into ``1797 - test_size`` training and ``test_size`` test images.

    Read from ``labops/data/digits.npz`` (no download, no scikit-learn). Pixels are scaled by the
    training set's mean and standard deviation (one number each). The split is the same on every
    machine: it comes from ``torch.randperm`` with a seeded CPU generator.

    Example:
        >>> data = load_digits()
        >>> data.x_train.shape, data.y_test.shape
        (torch.Size([1437, 1, 8, 8]), torch.Size([360]))
    """
    with np.load(DIGITS_PATH) as f:
        images, labels = f["images"], f["labels"]
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed)).numpy()
    test, train = order[:test_size], order[test_size:]
    x = torch.from_numpy(images.astype(np.float64)).unsqueeze(1)
    mean, std = x[train].mean(), x[train].std()
    x = ((x - mean) / std).to(device, dtype)
    y = torch.from_numpy(labels.astype(np.int64)).to(device)
    return Digits(x[train], y[train], x[test], y[test], images[test])


def write_digits_npz(path=DIGITS_PATH) -> Path:
    """Write scikit-learn's bundled digits to ``path`` as uint8 arrays (the maintainers' one-time step).

    Needs scikit-learn (``sklearn.datasets.load_digits`` reads a file shipped with it; nothing is
    downloaded). ``images``: (1797, 8, 8) uint8 in 0..16; ``labels``: (1797,) uint8 in 0..9.

    Example:
        >>> write_digits_npz("/tmp/digits.npz")  # doctest: +SKIP
    """
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    images = bunch.data.reshape(-1, 8, 8)
    assert images.min() >= 0 and images.max() <= 16 and (images == images.round()).all()
    np.savez_compressed(path, images=images.astype(np.uint8), labels=bunch.target.astype(np.uint8))
    return Path(path)


# ---------------------------------------------------------------- the network, three ways

def _build(layers):
    return torch.nn.Sequential(*(layers[kind](**args) for kind, args in ARCHITECTURE))


def _init_weights(model: torch.nn.Module, seed: int) -> None:
    """He initialisation for the convolutions (normal, std sqrt(2 / fan_in)), zero biases.

    The classifier (last convolution) gets std sqrt(1 / fan_in). nn.Conv2d's default (uniform,
    variance 1 / (3 fan_in)) shrinks the signal through the four GELU layers: with it plain SGD
    stays at the loss of a uniform guess, ln 10 = 2.30, for ten epochs.
    """
    g = torch.Generator().manual_seed(seed)
    convs = [m for m in model if getattr(m, "weight", None) is not None]
    with torch.no_grad():
        for i, m in enumerate(convs):
            fan_in = m.weight[0].numel()
            gain = 1.0 if i == len(convs) - 1 else 2.0
            m.weight.copy_(torch.randn(m.weight.shape, generator=g, dtype=torch.float64) * math.sqrt(gain / fan_in))
            m.bias.zero_()


def labops_model(seed: int = 0, device="cpu", dtype=torch.float32) -> torch.nn.Sequential:
    """The capstone network from ``labops.nn`` modules (every layer a ``torch.ops.labops`` op).

    Input (N, 1, 8, 8), output (N, 10) logits. ``torch.nn.Flatten`` is the only torch layer: a
    reshape of (N, 10, 1, 1). Weights drawn from ``seed`` (the same on every device and dtype).

    Example:
        >>> model = labops_model(seed=0)
        >>> model(torch.zeros(2, 1, 8, 8)).shape
        torch.Size([2, 10])
    """
    import labops.nn as lnn

    model = _build({
        "upsample": lambda scale_factor: lnn.UpsampleBilinear2d(scale_factor=scale_factor),
        "conv": lambda cin, cout, k, padding: lnn.Conv2dMM(cin, cout, k, padding=padding),
        "gelu": lambda: lnn.GELU(GELU_APPROXIMATE),
        "reorg": lambda stride: lnn.Reorg(stride, REORG_ORDER),
        "depthwise": lambda cin, k, padding: lnn.DepthwiseConv2d(cin, k, padding=padding),
        "pool": lambda: lnn.GlobalAvgPool2d(),
        "flatten": lambda: torch.nn.Flatten(1),
    })
    _init_weights(model, seed)
    return model.to(device, dtype)


def torch_model(seed: int = 0, device="cpu", dtype=torch.float32) -> torch.nn.Sequential:
    """The same network from ``torch.nn`` layers, with the same weights as ``labops_model(seed)``.

    ``nn.Upsample(bilinear)``, ``nn.Conv2d`` (``groups=C`` for the depthwise layer), ``nn.GELU``,
    ``nn.PixelUnshuffle`` (reorg order "crd"), ``nn.AdaptiveAvgPool2d(1)``, ``nn.Flatten``. Its
    state_dict has the same keys and shapes as the labops model's.

    Example:
        >>> x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
        >>> a, b = labops_model(dtype=torch.float64), torch_model(dtype=torch.float64)
        >>> bool(torch.allclose(a(x), b(x)))
        True
    """
    nn = torch.nn
    model = _build({
        "upsample": lambda scale_factor: nn.Upsample(scale_factor=scale_factor, mode="bilinear",
                                                     align_corners=False),
        "conv": lambda cin, cout, k, padding: nn.Conv2d(cin, cout, k, padding=padding),
        "gelu": lambda: nn.GELU(GELU_APPROXIMATE),
        "reorg": lambda stride: nn.PixelUnshuffle(stride),
        "depthwise": lambda cin, k, padding: nn.Conv2d(cin, cin, k, padding=padding, groups=cin),
        "pool": lambda: nn.AdaptiveAvgPool2d(1),
        "flatten": lambda: nn.Flatten(1),
    })
    _init_weights(model, seed)
    return model.to(device, dtype)


def legacy_model(model: torch.nn.Sequential):
    """A ``labops.torch7.Sequential`` equal to ``model`` (a :func:`labops_model`), with copies of its weights.

    The weights are cloned (training one does not move the other), on the model's device and
    dtype; gradient buffers start at zero.

    Example:
        >>> net = legacy_model(labops_model(seed=0))
        >>> net.forward(torch.zeros(2, 1, 8, 8)).shape
        torch.Size([2, 10])
    """
    import labops.nn as lnn
    from labops import torch7

    net = torch7.Sequential()
    with torch.random.fork_rng(devices=[]):  # the constructors draw weights we replace
        for m in model:
            if isinstance(m, lnn.UpsampleBilinear2d):
                layer = torch7.SpatialUpSamplingBilinear(m.size, m.scale_factor, m.align_corners, m.coordinate_mode)
            elif isinstance(m, lnn.Conv2dMM):
                if m.dilation != (1, 1):
                    raise ValueError("torch7.SpatialConvolutionMM has no dilation")
                (kh, kw), (sh, sw), (ph, pw) = m.kernel_size, m.stride, m.padding
                layer = torch7.SpatialConvolutionMM(m.in_channels, m.out_channels, kw, kh, sw, sh, pw, ph)
            elif isinstance(m, lnn.DepthwiseConv2d):
                if m.dilation != (1, 1):
                    raise ValueError("torch7.SpatialDepthWiseConvolution has no dilation")
                (kh, kw), (sh, sw), (ph, pw) = m.kernel_size, m.stride, m.padding
                layer = torch7.SpatialDepthWiseConvolution(m.in_channels, m.out_channels // m.in_channels,
                                                           kw, kh, sw, sh, pw, ph)
            elif isinstance(m, lnn.GELU):
                layer = torch7.GELU(m.approximate)
            elif isinstance(m, lnn.Reorg):
                layer = torch7.Reorg(m.stride, m.order)
            elif isinstance(m, lnn.GlobalAvgPool2d):
                layer = torch7.SpatialGlobalAveragePooling()
            elif isinstance(m, torch.nn.Flatten):
                layer = torch7.View(-1)
            else:
                raise TypeError(f"legacy_model: no torch7 module for {type(m).__name__}")
            if getattr(m, "weight", None) is not None:
                layer.weight = m.weight.detach().clone()
                layer.bias = m.bias.detach().clone()
                layer.gradWeight, layer.gradBias = torch.zeros_like(layer.weight), torch.zeros_like(layer.bias)
            net.add(layer)
    return net


# ---------------------------------------------------------------- training

@dataclass
class TrainResult:
    """What a training run returns.

    losses: the mini-batch loss of every step, in order (float); test_accuracy: the fraction of
    test images classified right after training; seconds: wall time of the training loop.
    """

    losses: list
    test_accuracy: float
    seconds: float

    def __repr__(self):
        return (f"TrainResult({len(self.losses)} steps, loss {self.losses[0]:.3f} -> {self.losses[-1]:.3f}, "
                f"test accuracy {100 * self.test_accuracy:.1f} %, {self.seconds:.1f} s)")


def batches(n: int, batch_size: int = BATCH_SIZE, epochs: int = EPOCHS, seed: int = 0):
    """Index tensors of the mini-batches: each epoch a new seeded shuffle of range(n), cut in full batches.

    The last ``n % batch_size`` indices of each shuffle are left out (every batch has the same
    shape: ``torch.compile`` compiles once). Both training styles draw the same batches.

    Example:
        >>> [b.tolist() for b in batches(5, batch_size=2, epochs=1, seed=0)]
        [[4, 0], [1, 3]]
    """
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(n, generator=g)
        for i in range(n // batch_size):
            yield order[i * batch_size:(i + 1) * batch_size]


def accuracy(logits: torch.Tensor, target: torch.Tensor) -> float:
    """Fraction of rows of (N, 10) ``logits`` whose largest entry is at ``target`` (N,)."""
    return (logits.argmax(1) == target).double().mean().item()


def train_autograd(model: torch.nn.Module, data: Digits, *, epochs: int = EPOCHS, batch_size: int = BATCH_SIZE,
                   lr: float = LR, seed: int = 0, loss_fn=None, compile: bool = False, rank: int = 0,
                   world_size: int = 1) -> TrainResult:
    """Train ``model`` in place with autograd and ``torch.optim.SGD(lr)`` (no momentum).

    Each step: loss of a mini-batch (:func:`batches`), ``backward()``, ``step()``. ``loss_fn``
    defaults to ``labops.cross_entropy`` (pass ``F.cross_entropy`` for a torch.nn model).
    ``compile=True`` runs the forward and the loss under ``torch.compile(fullgraph=True)`` (the
    backward is compiled with it). For DistributedDataParallel pass the wrapped model, ``rank``
    and ``world_size``: each global batch is split rank-strided (``batch[rank::world_size]``),
    DDP averages the gradients, so the step is the one-process step on the whole batch; the loss
    curve returned is the global one (averaged over ranks once, at the end).

    Example:
        >>> data = load_digits()
        >>> result = train_autograd(labops_model(), data, epochs=1)  # doctest: +SKIP
        >>> len(result.losses)  # doctest: +SKIP
        44
    """
    if loss_fn is None:
        from labops.ops import cross_entropy as loss_fn
    if batch_size % world_size:
        raise ValueError(f"batch_size {batch_size} must be divisible by world_size {world_size}")
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, foreach=False)  # the update labops.torch7 makes

    def step_loss(x, y):
        return loss_fn(model(x), y)

    if compile:
        step_loss = torch.compile(step_loss, fullgraph=True)
    device = data.x_train.device
    losses = []
    start = time.perf_counter()
    for idx in batches(len(data.x_train), batch_size, epochs, seed):
        idx = idx[rank::world_size].to(device)
        loss = step_loss(data.x_train[idx], data.y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    curve = torch.stack(losses)
    if world_size > 1:
        torch.distributed.all_reduce(curve)
        curve /= world_size
    curve = curve.tolist()  # one synchronization, after the loop
    seconds = time.perf_counter() - start
    plain = model.module if hasattr(model, "module") else model  # DDP's wrapped model
    with torch.no_grad():
        acc = accuracy(plain(data.x_test), data.y_test)
    return TrainResult(curve, acc, seconds)


def train_legacy(net, data: Digits, *, epochs: int = EPOCHS, batch_size: int = BATCH_SIZE, lr: float = LR,
                 seed: int = 0) -> TrainResult:
    """Train a ``labops.torch7`` network in place, Torch7 style, on the batches :func:`train_autograd` uses.

    Each step: ``zeroGradParameters()``; ``forward``; ``CrossEntropyCriterion`` ``forward`` and
    ``backward`` (dE/dlogits); ``net.backward`` (updateGradInput and accGradParameters, layer by
    layer, last to first); ``updateParameters(lr)`` (``w -= lr * gradW``). No autograd.

    Example:
        >>> result = train_legacy(legacy_model(labops_model()), load_digits(), epochs=1)  # doctest: +SKIP
        >>> len(result.losses)  # doctest: +SKIP
        44
    """
    from labops import torch7

    criterion = torch7.CrossEntropyCriterion()
    device = data.x_train.device
    losses = []
    start = time.perf_counter()
    for idx in batches(len(data.x_train), batch_size, epochs, seed):
        idx = idx.to(device)
        x, y = data.x_train[idx], data.y_train[idx]
        net.zeroGradParameters()
        logits = net.forward(x)
        losses.append(criterion.forward(logits, y).detach().clone())
        net.backward(x, criterion.backward(logits, y))
        net.updateParameters(lr)
    curve = torch.stack(losses).tolist()
    seconds = time.perf_counter() - start
    return TrainResult(curve, accuracy(net.forward(data.x_test), data.y_test), seconds)


def max_relative_difference(a, b) -> float:
    """max |a - b| / max(|a|, |b|) over two loss curves of the same length (0.0 when identical)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"curves of different lengths: {a.shape} and {b.shape}")
    return float(np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-30)))


# ---------------------------------------------------------------- command line

def _ddp_main(args) -> None:
    """One rank of ``torchrun --nproc_per_node=K -m labops.capstone --ddp``."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if "LOCAL_RANK" not in os.environ:
        raise SystemExit("--ddp runs under torchrun: torchrun --standalone --nproc_per_node=2 -m labops.capstone --ddp")
    local_rank = int(os.environ["LOCAL_RANK"])
    cuda = torch.cuda.is_available() and args.device != "cpu"
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    data = load_digits(device=device)
    model = labops_model(seed=0, device=device)  # the same weights on every rank; DDP also broadcasts rank 0's
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    result = train_autograd(ddp, data, epochs=args.epochs, rank=rank, world_size=world)
    if rank == 0:
        print(f"backend {dist.get_backend()}, {world} processes, {BATCH_SIZE // world} images each per step, "
              f"{len(result.losses)} steps in {result.seconds:.1f} s")
        print(f"final loss {result.losses[-1]:.4f}")
        print(f"test accuracy: {100 * result.test_accuracy:.1f} %")
        if args.curve:
            np.savetxt(args.curve, np.asarray(result.losses))
    dist.destroy_process_group()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m labops.capstone", description=__doc__.split("\n")[0])
    parser.add_argument("--ddp", action="store_true", help="one rank of a torchrun data-parallel run")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--curve", default=None, help="--ddp: write rank 0's loss curve (one value a line) here")
    args = parser.parse_args(argv)
    if args.ddp:
        return _ddp_main(args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        # The layers are small: one thread does a step in about 18 ms here; two threads on a
        # busy 2-core machine waited for each other (over 300 ms a step, measured).
        torch.set_num_threads(1)
    data = load_digits(device=device)
    model = labops_model(seed=0, device=device)
    net = legacy_model(model)
    auto = train_autograd(model, data, epochs=args.epochs)
    torch7 = train_legacy(net, data, epochs=args.epochs)
    print(f"autograd:    {auto}")
    print(f"Torch7-style: {torch7}")
    print(f"loss curves: max relative difference {max_relative_difference(auto.losses, torch7.losses):.1e}")
    print(f"test accuracy: {100 * auto.test_accuracy:.1f} %")


if __name__ == "__main__":
    main()
