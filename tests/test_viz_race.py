"""viz.race_figure draws the race a real kernel raised: the raced element, the two threads, both orders."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from labops import rtc, viz  # noqa: E402

# A block sum over 16 threads with the barrier after the load left out: in the first step of the tree,
# thread 0 reads partial[8] before thread 8 has written it.
NO_BARRIER_AFTER_THE_LOAD = r"""
extern __shared__ float partial[];
const unsigned t = threadIdx.x;
const long long i = blockIdx.x * (long long)blockDim.x + t;
partial[t] = i < x_numel ? x[i] : 0.0f;
for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
  if (t < stride) partial[t] += partial[t + stride];
  __syncthreads();
}
if (t == 0) y[blockIdx.x] = partial[0];
"""


def raised(body, x, y, **launch):
    with pytest.raises(rtc.DataRaceError) as caught:
        rtc.kernel("race", ["x"], ["y"], body)(x, y, **launch)
    return caught.value


def texts(fig, gid):
    return [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == gid]


def test_a_missing_barrier_is_drawn_with_its_element_threads_and_orders():
    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    error = raised(NO_BARRIER_AFTER_THE_LOAD, x, torch.empty(4), grid=4, block=16, shared_mem=4 * 16)
    assert (error.array, error.index, error.threads, error.kind) == ("partial", 8, (0, 8), "write after read")
    fig = viz.race_figure(error, threads_per_block=16)
    fig.canvas.draw()
    space, cpu_order, other_order = fig.axes
    cells = [p for p in space.patches if p.get_gid() in ("element", "race-element")]
    assert len(cells) == 16  # one per element of partial, that is one per thread of the block
    (marked,) = [p for p in cells if p.get_gid() == "race-element"]
    assert marked.get_x() == 8
    assert texts(fig, "thread-1") == ["thread 0 of block 0\n1st in this run: read partial[8]"]
    assert texts(fig, "thread-2") == ["thread 8 of block 0\n2nd in this run: wrote partial[8]"]
    assert texts(fig, "outcome") == ["thread 0 gets what partial[8] held before", "thread 0 gets thread 8's value"]
    title = fig.get_suptitle()
    assert "partial[8]" in title and "no __syncthreads() between them" in title
    # the lanes in time: in this run thread 0 (lane 0) came first, in the other order thread 8 (lane 1)
    assert [line.get_ydata()[0] for line in cpu_order.lines if line.get_marker() == "o"] == [0, 1]
    assert [line.get_ydata()[0] for line in other_order.lines if line.get_marker() == "o"] == [1, 0]


def test_a_collision_between_blocks_on_an_output():
    x = torch.randn(32, generator=torch.Generator().manual_seed(1))
    body = "if (threadIdx.x == 0) y[0] = x[blockIdx.x];"
    error = raised(body, x, torch.zeros(1), grid=2, block=16)
    assert not error.shared and error.threads == (0, 16) and error.kind == "two writes"
    fig = viz.race_figure(error, threads_per_block=16)
    assert texts(fig, "thread-2") == ["thread 0 of block 1\n2nd in this run: wrote y[0]"]
    assert "different blocks" in fig.get_suptitle() and "output y[0]" in fig.get_suptitle()
    assert texts(fig, "outcome") == ["y[0] keeps block 1 thread 0's value", "y[0] keeps block 0 thread 0's value"]
