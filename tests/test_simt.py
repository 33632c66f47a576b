"""labops.simt: the index arithmetic of csrc/common/loop.h, and the traces of launches that labops.rtc records.

One model of CUDA execution: the kernels here are CUDA C bodies run by labops.rtc on the CPU (``record=True``
logs every access); simt holds only what a launch does with its indices, as data.
"""

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from labops import rtc, simt

LOOP_H = Path(__file__).resolve().parent.parent / "csrc" / "common" / "loop.h"

# LABOPS_KERNEL_LOOP(i, y_numel), written out in a body that writes each element it visits
GRID_STRIDE = "for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < y_numel; " \
              "i += (long long)blockDim.x * gridDim.x) y[i] = 1.0f;"
TOUCH = rtc.kernel("touch", [], ["y"], GRID_STRIDE)


def record_all(n, grid, block):
    """The writes of one grid-stride launch over n elements, as a simt.Trace."""
    return TOUCH(torch.zeros(n), grid=grid, block=block, record=True).writes["y"]


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
    trace = record_all(20, 2, 4)
    for b in range(2):
        for t in range(4):
            first = b * 4 + t
            assert trace.elements_of(b, t) == [e for e in (first, first + 8, first + 16) if e < 20]
    assert trace.owner(9) == simt.Access(element=9, block=0, thread=1, iteration=1)
    assert trace.owner(19) == simt.Access(element=19, block=0, thread=3, iteration=2)


CONFIGS = [(n, g, b) for n in (1, 7, 20, 64, 100, 257) for g in (1, 2, 3, 5) for b in (1, 4, 32, 33)]


@pytest.mark.parametrize("n,grid,block", CONFIGS)
def test_map_equals_closed_form(n, grid, block):
    trace = record_all(n, grid, block)
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
    trace = record_all(10, (2, 2), (4, 1))
    assert (trace.arrays(10)["count"] == 2).all()


def test_multidimensional_ranks_in_the_log():
    # A block of (8, 4, 2) threads in a (2, 3) grid: each thread writes its own element, its linear rank.
    k = rtc.kernel("ranks", [], ["y"], """
        const long long block = blockIdx.x + (long long)gridDim.x * blockIdx.y;
        const long long thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        y[block * (blockDim.x * blockDim.y * blockDim.z) + thread] = (float)thread;""")
    y = torch.zeros(6 * 64)
    trace = k(y, grid=(2, 3), block=(8, 4, 2), record=True).writes["y"]
    data = trace.arrays(6 * 64)
    assert (data["count"] == 1).all() and trace.threads == 6 * 64
    np.testing.assert_array_equal(data["block"], np.arange(6 * 64) // 64)
    np.testing.assert_array_equal(data["thread"], np.arange(6 * 64) % 64)
    assert y.tolist() == [float(t % 64) for t in range(6 * 64)]


def test_a_wrong_loop_shows_in_the_trace_and_a_checked_launch_names_it():
    # Strides by blockDim only: blocks redo each other's work. Recorded, the map shows it; checked, it is a race.
    bad = rtc.kernel("bad", [], ["y"], GRID_STRIDE.replace("(long long)blockDim.x * gridDim.x", "blockDim.x"))
    trace = bad(torch.zeros(20), grid=2, block=4, record=True).writes["y"]
    counts = trace.arrays(20)["count"]
    assert counts[:4].tolist() == [1, 1, 1, 1] and (counts[4:] == 2).all()
    with pytest.raises(LookupError, match="touched 2 times"):
        trace.owner(5)
    with pytest.raises(rtc.DataRaceError, match=r"wrote y\[4\].*two writes"):
        bad(torch.zeros(20), grid=2, block=4)


def test_reads_are_recorded_with_each_threads_order():
    # Each thread sums a row of 3 (reads x three times, in order) and writes one y: reads and writes apart.
    k = rtc.kernel("row_sum", ["x"], ["y"], """
        const int r = threadIdx.x;
        if (r < y_numel) { double s = 0; for (int j = 0; j < 3; ++j) s += x[3 * r + j]; y[r] = s; }""")
    x = torch.randn(4, 3, dtype=torch.float64)
    y = torch.zeros(4, dtype=torch.float64)
    rec = k(x, y, grid=1, block=6, record=True)
    torch.testing.assert_close(y, x.sum(1))
    reads, writes = rec.reads["x"], rec.writes["y"]
    assert [(a.element, a.thread, a.iteration) for a in reads.accesses if a.thread == 2] == [(6, 2, 0), (7, 2, 1),
                                                                                               (8, 2, 2)]
    assert sorted(a.element for a in writes.accesses) == [0, 1, 2, 3]
    assert rec.writes["x"].accesses == [] and rec.reads["y"].accesses == []
    assert rec.log.shape == (12 + 4, 4) and "x: 12 reads" in repr(rec)


def test_a_recorded_launch_still_checks_indices_and_knows_its_limit(monkeypatch):
    past = rtc.kernel("past", [], ["y"], GRID_STRIDE.replace("i < y_numel", "i <= y_numel"))
    with pytest.raises(rtc.OutOfBoundsError, match=r"wrote y\[10\]"):
        past(torch.zeros(10), grid=1, block=4, record=True)
    monkeypatch.setattr(rtc, "RECORD_LIMIT", 5)
    with pytest.raises(ValueError, match="made 10 accesses.*RECORD_LIMIT = 5"):
        TOUCH(torch.zeros(10), grid=1, block=4, record=True)
    with pytest.raises(TypeError, match="record must be True or False"):
        TOUCH(torch.zeros(10), grid=1, block=4, record=1)


@pytest.mark.parametrize("value", [0, (1, 2, 3, 4), (2, 0)])
def test_bad_dim3(value):
    with pytest.raises(ValueError, match="simt"):
        simt.Dim3.of(value)


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


# ---- a CUDA C body run on the CPU equals the compiled op ----

GELU_SIGMOID = rtc.kernel("gelu_sigmoid", ["x"], ["y"], """
    // csrc/activation/activation.h, gelu_forward<Sigmoid>: x / (1 + exp(-1.702 x)), in a grid-stride loop
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < x_numel;
         i += (long long)blockDim.x * gridDim.x)
        y[i] = x[i] / (1.0 + exp(-1.702 * x[i]));""")
TANH_BACKWARD = rtc.kernel("tanh_backward", ["g", "out"], ["grad_input"], """
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < g_numel;
         i += (long long)blockDim.x * gridDim.x)
        grad_input[i] = g[i] * (1.0 - out[i] * out[i]);""")


def test_kernel_bodies_match_compiled_ops_and_references():
    import labops
    from labops import reference

    gen = torch.Generator().manual_seed(0)
    n = 37  # not a multiple of the 3 x 4 = 12 threads: one thread does a fourth trip
    x = torch.randn(n, dtype=torch.float64, generator=gen) * 3
    g = torch.randn(n, dtype=torch.float64, generator=gen)
    y = torch.full((n,), math.nan, dtype=torch.float64)
    trace = GELU_SIGMOID(x, y, grid=3, block=4, record=True).writes["y"]
    assert (trace.arrays(n)["count"] == 1).all() and trace.owner(36).iteration == 3
    torch.testing.assert_close(y, labops.gelu(x, "sigmoid"), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(y.numpy(), reference.gelu_forward_numpy(x.numpy(), "sigmoid"), rtol=1e-12, atol=1e-14)

    out = labops.tanh(x)
    gi = torch.full((n,), math.nan, dtype=torch.float64)
    TANH_BACKWARD(g, out, gi, grid=2, block=8)
    torch.testing.assert_close(gi, torch.ops.labops.tanh_backward(g, out), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gi.numpy(), reference.tanh_backward_loop(g.numpy(), out.numpy()), rtol=1e-12,
                               atol=1e-14)
