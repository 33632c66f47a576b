"""labops.simt: the Python emulator of a CUDA launch must reproduce csrc/common/loop.h exactly."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from labops import simt

LOOP_H = Path(__file__).resolve().parent.parent / "csrc" / "common" / "loop.h"


def record_all(ctx, n):
    for _ in simt.kernel_loop(ctx, n):
        pass


def test_constants_match_loop_h():
    text = LOOP_H.read_text()
    assert int(re.search(r"kThreadsPerBlock\s*=\s*(\d+)", text).group(1)) == simt.THREADS_PER_BLOCK
    assert int(re.search(r"kMaxBlocks\s*=\s*(\d+)", text).group(1)) == simt.MAX_BLOCKS
    # The macro's index is 64-bit and starts at blockIdx.x * blockDim.x + threadIdx.x.
    assert "for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x" in text


@pytest.mark.parametrize("threads", [1, 32, 128, 256, 1024])
def test_get_blocks(threads):
    for n in [0, 1, threads - 1, threads, threads + 1, 1000, 10**6, 2**31 + 7, 2**40]:
        expected = max(1, min(math.ceil(n / threads), 65535))
        assert simt.get_blocks(n, threads) == expected
    assert simt.get_blocks(2**40, threads) == 65535  # the cap


def test_the_briefs_example():
    # n = 20, 2 blocks of 4 threads: thread (b, t) handles b*4 + t, then +8, then +16.
    trace = simt.launch(record_all, grid=2, block=4, n=20)
    for b in range(2):
        for t in range(4):
            first = b * 4 + t
            assert trace.elements_of(b, t) == [e for e in (first, first + 8, first + 16) if e < 20]
    assert trace.owner(9) == simt.Access(element=9, block=0, thread=1, iteration=1)
    assert trace.owner(19) == simt.Access(element=19, block=0, thread=3, iteration=2)


CONFIGS = [(n, g, b) for n in (0, 1, 7, 20, 64, 100, 257) for g in (1, 2, 3, 5) for b in (1, 4, 32, 33)]


@pytest.mark.parametrize("n,grid,block", CONFIGS)
def test_map_equals_closed_form(n, grid, block):
    trace = simt.launch(record_all, grid=grid, block=block, n=n)
    data = trace.arrays(n)
    e = np.arange(n)
    total = grid * block
    # Element e is handled by global thread e % total on iteration e // total.
    np.testing.assert_array_equal(data["count"], np.ones(n, dtype=np.int64))
    np.testing.assert_array_equal(data["block"], (e % total) // block)
    np.testing.assert_array_equal(data["thread"], (e % total) % block)
    np.testing.assert_array_equal(data["iteration"], e // total)
    assert len(trace.accesses) == n


def test_the_loop_uses_only_x():
    # Like the macro, the loop ignores y and z: a 2-D grid does the same work twice.
    trace = simt.launch(record_all, grid=(2, 2), block=(4, 1), n=10)
    assert (trace.arrays(10)["count"] == 2).all()


def test_multidimensional_ranks_and_warps():
    seen = []
    simt.launch(lambda ctx: seen.append((ctx.block_rank, ctx.thread_rank, ctx.warp, ctx.lane)),
                grid=(2, 3), block=(8, 4, 2))
    assert len(seen) == 6 * 64
    assert sorted(seen) == sorted(seen, key=lambda s: (s[0], s[1]))  # blocks, then threads, in rank order
    assert {(b, t) for b, t, _, _ in seen} == {(b, t) for b in range(6) for t in range(64)}
    assert all(w == t // 32 and lane == t % 32 for _, t, w, lane in seen)


def test_a_wrong_loop_shows_in_the_trace():
    def bad(ctx, n):  # strides by blockDim only: blocks redo each other's work
        i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
        it = 0
        while i < n:
            ctx.record(i, it)
            i += ctx.blockDim.x
            it += 1

    trace = simt.launch(bad, grid=2, block=4, n=20)
    counts = trace.arrays(20)["count"]
    assert counts[:4].tolist() == [1, 1, 1, 1] and (counts[4:] == 2).all()
    with pytest.raises(LookupError, match="touched 2 times"):
        trace.owner(5)


@pytest.mark.parametrize("grid,block", [(0, 4), (2, 0), ((1, 2, 3, 4), 1), (1, 2048)])
def test_bad_launch_sizes(grid, block):
    with pytest.raises(ValueError, match="simt"):
        simt.launch(record_all, grid=grid, block=block, n=4)


def test_64_bit_index_past_2_31():
    n = 2**31 + 1000
    blocks = simt.get_blocks(n)
    stride = blocks * 256
    last = simt.loop_indices(blocks - 1, 255, 256, blocks, n)
    assert last == list(range(blocks * 256 - 1, n, stride))  # exact, and it ends
    assert last[-1] >= 2**31 - stride and last[-1] < n


def test_32_bit_index_wraps_negative():
    # n fits in an int, but i + stride does not: the 32-bit loop goes negative and keeps going.
    n = 2**31 - 1
    blocks = simt.get_blocks(n)
    good = simt.loop_indices(blocks - 1, 255, 256, blocks, n)
    bad = simt.loop_indices(blocks - 1, 255, 256, blocks, n, index_bits=32, max_iterations=len(good) + 3)
    assert bad[: len(good)] == good
    wrapped = good[-1] + blocks * 256
    assert wrapped >= n  # the 64-bit loop stops here ...
    assert bad[len(good)] == wrapped - 2**32 < 0  # ... the 32-bit one writes at a negative index
    assert len(bad) == len(good) + 3
    with pytest.raises(ValueError, match="index_bits"):
        simt.loop_indices(0, 0, 1, 1, 4, index_bits=16)


# ---- a kernel body run under the emulator equals the compiled op ----

def gelu_sigmoid_kernel(ctx, x, y, n):
    # csrc/ops/activation.h, gelu_forward<Sigmoid>: x / (1 + exp(-1.702 x))
    for i in simt.kernel_loop(ctx, n):
        y[i] = x[i] / (1.0 + math.exp(-1.702 * x[i]))


def tanh_backward_kernel(ctx, g, out, grad_input, n):
    for i in simt.kernel_loop(ctx, n):
        grad_input[i] = g[i] * (1.0 - out[i] * out[i])


def test_emulated_kernels_match_compiled_ops_and_references():
    import labops
    from labops import reference

    gen = torch.Generator().manual_seed(0)
    n = 37  # not a multiple of the 3 x 4 = 12 threads: three threads do a fourth trip
    x = torch.randn(n, dtype=torch.float64, generator=gen) * 3
    g = torch.randn(n, dtype=torch.float64, generator=gen)
    y = np.full(n, np.nan)
    trace = simt.launch(gelu_sigmoid_kernel, grid=3, block=4, x=x.numpy(), y=y, n=n)
    assert (trace.arrays(n)["count"] == 1).all()
    torch.testing.assert_close(torch.from_numpy(y), labops.gelu(x, "sigmoid"), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(y, reference.gelu_forward_numpy(x.numpy(), "sigmoid"), rtol=1e-12, atol=1e-14)

    out = labops.tanh(x)
    gi = np.full(n, np.nan)
    simt.launch(tanh_backward_kernel, grid=2, block=8, g=g.numpy(), out=out.numpy(), grad_input=gi, n=n)
    torch.testing.assert_close(torch.from_numpy(gi), torch.ops.labops.tanh_backward(g, out), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gi, reference.tanh_backward_loop(g.numpy(), out.numpy()), rtol=1e-12, atol=1e-14)
