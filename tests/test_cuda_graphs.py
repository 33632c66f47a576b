"""Every labops op replays in a CUDA graph as it runs eagerly: what torch.compile(mode="reduce-overhead") and a
hand-captured training step need.

A graph records kernels, not host work. So an op cannot be captured if it waits on the device (a .item(), a
check read back, a synchronous copy), and an op whose host code chose something from the values at capture time
would replay that choice on every new input. Each test replays on values other than the captured ones.

The ops and their arguments are every layer's every_op_sample(device) (tests/test_<layer>.py), the same (op,
args) opcheck runs.
"""

import pytest
import torch
from conftest import Seeded, layer_attributes, tf32_convolutions

import labops
from labops import capstone

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")

SAMPLERS = layer_attributes("every_op_sample")


def copy_with_strides(a):
    """A copy of tensor `a` with its sizes and strides (a sliced sample stays strided); anything else as is."""
    if not isinstance(a, torch.Tensor):
        return a
    if 0 in a.stride() and a.numel() > 1:  # expanded: a strided copy would write one element twice
        return a.detach().clone()
    return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a.detach())


def tensors(out):
    return [out] if isinstance(out, torch.Tensor) else [t for t in (out or ()) if isinstance(t, torch.Tensor)]


def replay_matches_eager(op, args):
    static = [copy_with_strides(a) for a in args]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capturing stream: lazy set-up, caches, first allocations
        op(*[copy_with_strides(a) for a in args])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(*static)
    with torch.no_grad():  # new values in the captured inputs: the replay must read them, not the old ones
        for t in static:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                t.copy_(t * 1.5 + 0.25)
    eager_args = [copy_with_strides(t) for t in static]
    graph.replay()
    expected = op(*eager_args)
    got, want = tensors(out), tensors(expected)
    assert len(got) == len(want), f"{op}: {len(got)} outputs replayed, {len(want)} eager"
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, equal_nan=True, msg=lambda m: f"{op}: {m}")
    for s, e in zip(static, eager_args):  # what an op writes in place (acc_grad_parameters' buffers)
        if isinstance(s, torch.Tensor):
            torch.testing.assert_close(s, e, rtol=1e-5, atol=1e-6, equal_nan=True, msg=lambda m: f"{op}: {m}")


@pytest.mark.parametrize("layer", list(SAMPLERS))
def test_every_op_replays_in_a_cuda_graph(layer):
    ops = set()
    for op, args in SAMPLERS[layer]("cuda"):
        replay_matches_eager(op, args)
        ops.add(op)
    assert ops, f"tests/test_{layer}.py's every_op_sample gave no ops"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_tensor_core_convolution_replays_in_a_cuda_graph(dtype):
    """conv2d_mm's tensor-core paths (float32 as TF32): the samples above are float32 at full precision, which
    never reach them. 64 channels, NCHW and channels_last: on Hopper, rung 5 with TMA and its layout copies."""
    randn = Seeded("cuda", dtype, 5).randn
    for layout in (torch.contiguous_format, torch.channels_last):
        x = randn(2, 64, 30, 30).contiguous(memory_format=layout)
        w, b, g = randn(64, 64, 3, 3, scale=0.05), randn(64), randn(2, 64, 30, 30).contiguous(memory_format=layout)
        with tf32_convolutions():
            replay_matches_eager(torch.ops.labops.conv2d_mm.default, (x, w, b, [1, 1], [1, 1], [1, 1]))
            replay_matches_eager(torch.ops.labops.conv2d_mm_backward_input.default,
                                 (g, w, list(x.shape), [1, 1], [1, 1], [1, 1]))
            replay_matches_eager(torch.ops.labops.conv2d_mm_backward_weight.default,
                                 (g, x, list(w.shape), [1, 1], [1, 1], [1, 1]))


def test_capstone_training_step_replays_in_a_cuda_graph():
    """The capstone's whole step (forward, labops.cross_entropy, backward, SGD) captured once, as in PyTorch's
    "whole-network capture", then replayed on three new batches beside an eager twin with the same weights."""
    torch.manual_seed(0)
    model = capstone.labops_model(seed=0, device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 1, 8, 8, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            labops.cross_entropy(model(x), y).backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(side)
    twin = capstone.labops_model(seed=0, device="cuda")
    twin.load_state_dict(model.state_dict())
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)  # the backward allocates .grad from the graph's pool
    with torch.cuda.graph(graph):
        loss = labops.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    for _ in range(3):
        new_x, new_y = torch.randn_like(x), torch.randint(0, 10, y.shape, device="cuda")
        x.copy_(new_x)
        y.copy_(new_y)
        graph.replay()
        twin_optimizer.zero_grad()
        expected = labops.cross_entropy(twin(new_x), new_y)
        expected.backward()
        twin_optimizer.step()
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("batch", [32, 1024])
def test_capstone_compiles_to_cuda_graphs_without_skips(batch):
    """torch.compile(mode="reduce-overhead") captures the labops capstone's forward and backward whole: no
    cudagraph skip (an op it cannot capture, a CPU tensor, a mutated input), and the loss is eager's."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = capstone.labops_model(seed=0, device="cuda")
    step = torch.compile(lambda x, y: labops.cross_entropy(model(x), y), fullgraph=True, mode="reduce-overhead")
    g = torch.Generator().manual_seed(batch)
    for _ in range(4):
        x = torch.randn(batch, 1, 8, 8, generator=g).cuda()
        y = torch.randint(0, 10, (batch,), generator=g).cuda()
        torch.compiler.cudagraph_mark_step_begin()  # a new step: the last one's graph outputs may be overwritten
        loss = step(x, y)
        model.zero_grad(set_to_none=True)  # as a training step does: the last step's gradients were graph outputs
        loss.backward()
        expected = labops.cross_entropy(model(x), y)
        torch.testing.assert_close(loss.detach(), expected.detach(), rtol=1e-5, atol=1e-6)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
