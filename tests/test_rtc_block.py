"""labops.rtc with threads that work together: __shared__, barriers, warp shuffles and votes, atomics.

Each feature runs on every device (the CPU's fibers, and a GPU when there is one) against a float64 or
NumPy oracle; each bug the CPU path reports has a kernel with the bug and the same kernel without it.
"""

import time

import numpy as np
import pytest
import torch

from labops import rtc

from test_rtc import poisoned


def seeded(*shape, seed, device="cpu"):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).float().to(device)


# One thread per element loads a block's slice into shared memory; a tree halves the active threads each
# step. `stride` pairs t with t + stride only where t + stride is inside the block, so any block size works.
BLOCK_SUM = r"""
extern __shared__ float partial[];
const unsigned t = threadIdx.x;
const long long i = blockIdx.x * (long long)blockDim.x + t;
partial[t] = i < x_numel ? x[i] : 0.0f;
__syncthreads();
for (unsigned width = blockDim.x; width > 1; width = (width + 1) / 2) {
  const unsigned half = (width + 1) / 2;
  if (t < width / 2) partial[t] += partial[t + half];
  __syncthreads();
}
if (t == 0) y[blockIdx.x] = partial[0];
"""


@pytest.mark.parametrize("threads", [256, 96, 37, 1])
def test_a_block_reduction_in_shared_memory(device, threads):
    x = seeded(1000, seed=threads, device=device)
    blocks = -(-1000 // threads)
    y = poisoned(blocks, device=device)
    rtc.kernel("block_sum", ["x"], ["y"], BLOCK_SUM)(x, y, grid=blocks, block=threads, shared_mem=4 * threads)
    padded = torch.cat([x.double().cpu(), torch.zeros(blocks * threads - 1000, dtype=torch.float64)])
    torch.testing.assert_close(y.double().cpu(), padded.view(blocks, threads).sum(1), rtol=1e-5, atol=1e-5)


WARP_OPS = rtc.kernel("warp_ops", ["x"], ["xor_sum", "down_sum", "up_scan", "broadcast", "ballot", "count"], r"""
const unsigned t = threadIdx.x, lane = t % 32;
const float v = x[t];
float a = v;
for (int offset = 16; offset > 0; offset /= 2) a += __shfl_xor_sync(0xffffffff, a, offset);
xor_sum[t] = a;                                     // every lane: its warp's sum
float b = v;
for (int offset = 8; offset > 0; offset /= 2) b += __shfl_down_sync(0xffffffff, b, offset, 16);
down_sum[t] = b;                                    // lane 0 and 16: their half-warp's sum
float c = v;
for (int offset = 1; offset < 32; offset *= 2) {
  const float before = __shfl_up_sync(0xffffffff, c, offset);
  if (lane >= offset) c += before;
}
up_scan[t] = c;                                     // inclusive prefix sum in the warp
broadcast[t] = __shfl_sync(0xffffffff, v, 5);       // lane 5's value
ballot[t] = (float)__popc(__ballot_sync(0xffffffff, v > 0));
count[t] = (float)__syncthreads_count(v > 0);
""")


def test_warp_shuffles_and_votes(device):
    x = seeded(128, seed=3, device=device)
    outs = [poisoned(128, device=device) for _ in range(6)]
    WARP_OPS(x, *outs, grid=1, block=128)
    got = [o.double().cpu().numpy() for o in outs]
    w = x.double().cpu().numpy().reshape(4, 32)
    np.testing.assert_allclose(got[0].reshape(4, 32), np.repeat(w.sum(1, keepdims=True), 32, 1), rtol=1e-5, atol=1e-5)
    halves = w.reshape(4, 2, 16).sum(2)
    np.testing.assert_allclose(got[1].reshape(4, 2, 16)[:, :, 0], halves, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[2].reshape(4, 32), np.cumsum(w, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[3].reshape(4, 32), np.repeat(w[:, 5:6], 32, 1).astype(np.float32))
    np.testing.assert_array_equal(got[4].reshape(4, 32), np.repeat((w > 0).sum(1, keepdims=True), 32, 1))
    np.testing.assert_array_equal(got[5], np.full(128, (w > 0).sum()))


ATOMICS = rtc.kernel("atomics", ["x", "bins"], ["total", "histogram", "largest", "largest_float"], r"""
__shared__ float block_total;
const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
if (threadIdx.x == 0) block_total = 0.0f;
__syncthreads();
if (i < x_numel) {
  atomicAdd(&block_total, x[i]);
  atomicAdd(&histogram[bins[i]], 1);
  atomicMax(&largest[0], bins[i]);
  // a float max through atomicCAS, as CUDA has no float atomicMax
  int* address = (int*)&largest_float[0];
  int old = *address, assumed;
  do {
    assumed = old;
    old = atomicCAS(address, assumed, __float_as_int(fmaxf(x[i], __int_as_float(assumed))));
  } while (assumed != old);
}
__syncthreads();
if (threadIdx.x == 0) atomicAdd(total, block_total);
""")


def test_atomics_on_global_and_shared_memory(device):
    x = seeded(1000, seed=4, device=device)
    bins = torch.randint(0, 10, (1000,), generator=torch.Generator().manual_seed(4), dtype=torch.int32).to(device)
    total, histogram = torch.zeros(1, device=device), torch.zeros(10, dtype=torch.int32, device=device)
    largest = torch.full((1,), -1, dtype=torch.int32, device=device)
    largest_float = torch.full((1,), -1e30, device=device)
    ATOMICS(x, bins, total, histogram, largest, largest_float, grid=4, block=256)
    torch.testing.assert_close(total.double().cpu(), x.double().sum().view(1).cpu(), rtol=1e-5, atol=1e-4)
    assert torch.equal(histogram.cpu(), torch.bincount(bins.cpu(), minlength=10).int())
    assert largest.item() == bins.max().item() and largest_float.item() == x.max().item()


SGEMM = r"""
#define TILE 16
__shared__ float As[TILE][TILE];
__shared__ float Bs[TILE][TILE];
const int M = A_dims[0], K = A_dims[1], N = B_dims[1];
const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
float acc = 0.0f;
for (int k0 = 0; k0 < K; k0 += TILE) {
  As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;
  Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && col < N) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
  __syncthreads();
  for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
  __syncthreads();
}
if (row < M && col < N) C[row * N + col] = acc;
"""


@pytest.mark.parametrize("m, k, n", [(64, 64, 64), (37, 50, 21), (1, 17, 1)])
def test_a_tiled_sgemm(device, m, k, n):
    a, b = seeded(m, k, seed=5, device=device), seeded(k, n, seed=6, device=device)
    c = poisoned(m, n, device=device)
    rtc.kernel("sgemm", ["A", "B"], ["C"], SGEMM)(a, b, c, grid=(-(-n // 16), -(-m // 16)), block=(16, 16))
    torch.testing.assert_close(c.double().cpu(), a.double().cpu() @ b.double().cpu(), rtol=1e-5, atol=1e-4)


def test_a_256_cubed_sgemm_runs_on_the_cpu_in_under_ten_seconds():
    a, b, c = seeded(256, 256, seed=7), seeded(256, 256, seed=8), poisoned(256, 256)
    k = rtc.kernel("sgemm", ["A", "B"], ["C"], SGEMM)
    k(a[:16, :16].contiguous(), b[:16, :16].contiguous(), c[:16, :16].contiguous(), grid=1, block=(16, 16))  # compile
    start = time.perf_counter()
    k(a, b, c, grid=(16, 16), block=(16, 16))
    seconds = time.perf_counter() - start
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-4)
    assert seconds <= 10, f"256^3 with 16x16 tiles took {seconds:.1f} s on the CPU"


# ---- what the CPU path reports: each bug, and the same kernel without it ----

def run_cpu(body, n=300, threads=64, shared_mem=0, out=None, outputs=("y",)):
    x = seeded(n, seed=9)
    ys = [poisoned(out or -(-n // threads)) for _ in outputs]
    before = [y.clone() for y in ys]
    try:
        rtc.kernel("bug", ["x"], list(outputs), body)(x, *ys, grid=-(-n // threads), block=threads,
                                                      shared_mem=shared_mem)
    except rtc.KernelBugError:
        for y, b in zip(ys, before):  # a launch that stopped writes nothing
            assert torch.equal(y.isnan(), b.isnan())
        raise
    return x, ys


def test_block_sum_runs_clean():
    x, (y,) = run_cpu(BLOCK_SUM, shared_mem=4 * 64)
    torch.testing.assert_close(y.double(), torch.cat([x.double(), torch.zeros(20, dtype=torch.float64)])
                               .view(5, 64).sum(1), rtol=1e-5, atol=1e-5)


def test_a_missing_syncthreads_after_the_load_is_a_race_on_the_shared_array():
    body = BLOCK_SUM.replace("__syncthreads();\nfor", "for", 1)
    with pytest.raises(rtc.DataRaceError, match=r"data race on __shared__ array partial: .* no barrier between") as e:
        run_cpu(body, shared_mem=4 * 64)
    assert e.value.array == "partial" and e.value.shared and e.value.kind == "write after read"


def test_a_missing_syncthreads_in_the_tree_is_a_race():
    with pytest.raises(rtc.DataRaceError, match="partial"):
        run_cpu(BLOCK_SUM.replace("  __syncthreads();\n}", "}"), shared_mem=4 * 64)


def test_a_missing_second_barrier_in_the_tile_loop_is_a_race():
    a, b, c = seeded(32, 32, seed=1), seeded(32, 32, seed=2), poisoned(32, 32)
    one_barrier = SGEMM.replace("acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];\n  __syncthreads();",
                                "acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];")
    assert one_barrier != SGEMM
    with pytest.raises(rtc.DataRaceError, match=r"__shared__ array (As|Bs)"):
        rtc.kernel("sgemm_one_barrier", ["A", "B"], ["C"], one_barrier)(a, b, c, grid=(2, 2), block=(16, 16))
    assert c.isnan().all()


def test_a_syncthreads_in_a_divergent_branch():
    body = BLOCK_SUM.replace("  if (t < width / 2) partial[t] += partial[t + half];\n  __syncthreads();",
                             "  if (t < width / 2) { partial[t] += partial[t + half];\n  __syncthreads(); }")
    with pytest.raises(rtc.BarrierDivergenceError, match=r"__syncthreads\(\) at line 10 is not reached by every "
                                                         r"thread: thread \(0, 0, 0\) .* had finished") as e:
        run_cpu(body, shared_mem=4 * 64)
    assert e.value.line == 10 and e.value.other_line is None


def test_a_syncthreads_after_an_early_return():
    body = "const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\nif (i >= x_numel) return;\n" \
           "__syncthreads();\nif (threadIdx.x == 0) y[blockIdx.x] = 0.0f;"
    with pytest.raises(rtc.BarrierDivergenceError, match="line 3"):
        run_cpu(body, n=100, threads=64)
    run_cpu(body.replace("if (i >= x_numel) return;", "if (i >= x_numel) {}"), n=100, threads=64, out=2)


def test_barriers_at_different_lines():
    body = "if (threadIdx.x % 2) { __syncthreads(); } else { __syncthreads(); }\nif (threadIdx.x == 0) y[0] = 1.0f;"
    with pytest.raises(rtc.BarrierDivergenceError, match="waits at another one, at line 1") as e:
        run_cpu(body, n=64, threads=64, out=1)
    assert e.value.line == 1


def test_a_shuffle_not_every_lane_reaches():
    shuffle = "float v = x[threadIdx.x];\nv += __shfl_xor_sync(0xffffffff, v, 1);\ny[threadIdx.x] = v;"
    with pytest.raises(rtc.BarrierDivergenceError, match="warp operation .* at line 3"):
        run_cpu("if (threadIdx.x == 7) return;\n" + shuffle, n=32, threads=32, out=32)
    x, (y,) = run_cpu(shuffle, n=32, threads=32, out=32)
    torch.testing.assert_close(y, x + x.view(16, 2).flip(1).reshape(32))


def test_a_read_of_shared_memory_no_thread_wrote():
    body = BLOCK_SUM.replace("partial[t] = i < x_numel ? x[i] : 0.0f;", "if (i < x_numel) partial[t] = x[i];")
    with pytest.raises(rtc.UninitializedReadError, match=r"read __shared__ partial\[\d+\], but no thread of its block "
                                                         r"had written it") as e:
        run_cpu(body, shared_mem=4 * 64)  # 300 = 4 * 64 + 44: the last block leaves 20 elements unwritten
    assert e.value.array == "partial" and e.value.index >= 44


def test_shared_indices_are_checked_per_dimension():
    body = "__shared__ float tile[4][5];\ntile[threadIdx.x / 5][threadIdx.x % 5] = x[threadIdx.x];\n__syncthreads();\n" \
           "y[threadIdx.x] = tile[threadIdx.x % 4][threadIdx.x / 4 + 1];"
    with pytest.raises(rtc.OutOfBoundsError, match=r"read __shared__ tile\[0\]\[5\] \(thread \(16, 0, 0\).*declared "
                                                   r"float tile\[4\]\[5\]") as e:
        run_cpu(body, n=20, threads=20, out=20)
    assert e.value.tensor == "tile" and e.value.access == "read"
    x, (y,) = run_cpu(body.replace("threadIdx.x / 4 + 1]", "threadIdx.x / 4]"), n=20, threads=20, out=20)
    t = torch.arange(20)
    assert torch.equal(y, x[(t % 4) * 5 + t // 4])


def test_a_plain_add_where_threads_collide_is_a_race_and_atomic_add_is_not():
    body = "const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\nif (i < x_numel) y[i % 3] += x[i];"
    x = seeded(300, seed=9)
    with pytest.raises(rtc.DataRaceError, match=r"data race on output y: .* need atomicAdd") as e:
        rtc.kernel("collide", ["x"], ["y"], body)(x, torch.zeros(3), grid=5, block=64)
    assert not e.value.shared
    y = torch.zeros(3)
    rtc.kernel("collide_atomic", ["x"], ["y"], body.replace("y[i % 3] += x[i]", "atomicAdd(&y[i % 3], x[i])"))(
        x, y, grid=5, block=64)
    torch.testing.assert_close(y.double(), x.double().view(100, 3).sum(0), rtol=1e-5, atol=1e-5)


def test_two_blocks_writing_one_output_element_race():
    with pytest.raises(rtc.DataRaceError, match=r"block \(1, 0, 0\) wrote it"):
        run_cpu("if (threadIdx.x == 0) y[0] = x[blockIdx.x];", n=128, threads=64, out=1)
    run_cpu("if (threadIdx.x == 0) y[blockIdx.x] = x[blockIdx.x];", n=128, threads=64, out=2)


def test_too_much_static_shared_memory():
    with pytest.raises(rtc.KernelBugError, match=r"take 65536 bytes per block .* 49152 bytes"):
        run_cpu("__shared__ float a[8192];\n__shared__ float b[8192];\na[0] = 1; b[0] = 1; y[0] = a[0] + b[0];",
                n=1, threads=1, out=1)
    with pytest.raises(ValueError, match=r"shared_mem must be an int from 0 to 49152"):
        run_cpu("y[0] = 1;", n=1, threads=1, out=1, shared_mem=49153)


def test_shared_declarations_are_read_and_bad_ones_refused():
    arrays = rtc.shared_arrays("// __shared__ float not_this[4];\nextern __shared__ float dyn[];\n"
                               "__shared__ __align__(16) volatile float tile[16][16 + 1], total;\n")
    assert [(a.name, a.type, a.dims, a.extern) for a in arrays] == [
        ("dyn", "float", ("",), True), ("tile", "float", ("16", "16 + 1"), False), ("total", "float", (), False)]
    with pytest.raises(rtc.CompileError, match="no pointers"):
        rtc.shared_arrays("__shared__ float* p;")
    with pytest.raises(rtc.CompileError, match="empty brackets"):
        rtc.shared_arrays("__shared__ float s[];")


# ---- the same bodies on a GPU: checked launches report the same bugs, clean ones give the CPU's results ----

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SAME_BUGS = {
    "missing barrier after the load": (BLOCK_SUM.replace("__syncthreads();\nfor", "for", 1), rtc.DataRaceError),
    "missing barrier in the tree": (BLOCK_SUM.replace("  __syncthreads();\n}", "}"), rtc.DataRaceError),
    "barrier in a branch": (BLOCK_SUM.replace("  if (t < width / 2) partial[t] += partial[t + half];\n  __syncthreads();",
                                              "  if (t < width / 2) { partial[t] += partial[t + half];\n  __syncthreads(); }"),
                            rtc.BarrierDivergenceError),
    "read of unwritten shared": (BLOCK_SUM.replace("partial[t] = i < x_numel ? x[i] : 0.0f;",
                                                   "if (i < x_numel) partial[t] = x[i];"), rtc.UninitializedReadError),
    "no bounds guard": (BLOCK_SUM.replace("i < x_numel ? x[i] : 0.0f", "x[i]"), rtc.OutOfBoundsError),
    "shared index past its dimension": (BLOCK_SUM.replace("partial[t + half]", "partial[t + half + 1]"),
                                        rtc.OutOfBoundsError),
    "plain += where blocks collide": ("const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
                                      "if (i < x_numel) y[0] += x[i];", rtc.DataRaceError),
    "clean": (BLOCK_SUM, None),
}


@GPU
@pytest.mark.parametrize("case", SAME_BUGS)
def test_a_checked_gpu_launch_reports_what_the_cpu_reports(case):
    body, error = SAME_BUGS[case]
    x = seeded(300, seed=9)
    results = {}
    for device in ("cpu", "cuda"):
        y = poisoned(5, device=device)
        k = rtc.kernel("same_" + case.replace(" ", "_").replace("+=", "add"), ["x"], ["y"], body)
        try:
            k(x.to(device), y, grid=5, block=64, shared_mem=4 * 64, checked=True)
            results[device] = y.cpu()
        except rtc.KernelBugError as e:
            results[device] = type(e)
            assert y.isnan().all(), f"{device}: a launch that found a bug wrote its output"
    if error is None:
        torch.testing.assert_close(results["cuda"], results["cpu"], rtol=1e-6, atol=1e-6)
    else:
        assert results == {"cpu": error, "cuda": error}


@GPU
def test_checked_gpu_launches_of_the_feature_kernels_match_the_cpu():
    x = seeded(128, seed=3)
    got = {}
    for device in ("cpu", "cuda"):
        outs = [poisoned(128, device=device) for _ in range(6)]
        WARP_OPS(x.to(device), *outs, grid=1, block=128, checked=True)
        got[device] = [o.cpu() for o in outs]
    for cpu, cuda in zip(got["cpu"], got["cuda"]):
        torch.testing.assert_close(cuda, cpu, rtol=1e-5, atol=1e-5)
    a, b = seeded(37, 50, seed=5), seeded(50, 21, seed=6)
    c = {d: poisoned(37, 21, device=d) for d in ("cpu", "cuda")}
    for d in c:
        rtc.kernel("sgemm", ["A", "B"], ["C"], SGEMM)(a.to(d), b.to(d), c[d], grid=(2, 3), block=(16, 16), checked=True)
    torch.testing.assert_close(c["cuda"].cpu(), c["cpu"], rtol=1e-5, atol=1e-5)


# ---- __half ----

def test_half_converts_as_cuda_fp16_does(device):
    every_half = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16)
    to_float = rtc.kernel("half_to_float", ["h"], ["f"], "long long i = blockIdx.x * (long long)blockDim.x + "
                          "threadIdx.x;\nif (i < h_numel) f[i] = __half2float(h[i]);")
    f = torch.empty(2**16, device=device)
    to_float(every_half.to(device), f, grid=256, block=256)
    expected = every_half.float()
    assert torch.equal(f.cpu().isnan(), expected.isnan())
    assert torch.equal(f.cpu()[~expected.isnan()], expected[~expected.isnan()])  # all 65536, bit for bit
    # float -> half rounds to nearest, ties to even: the halves, the midpoints between neighbours, and
    # random floats over the whole range, subnormals and overflow included
    finite = expected[expected.isfinite()].double().sort().values
    midpoints = ((finite[:-1] + finite[1:]) / 2).float()
    randoms = torch.randn(20000, generator=torch.Generator().manual_seed(3)) * torch.logspace(-9, 5, 20000)
    x = torch.cat([midpoints, randoms, torch.tensor([70000.0, -1e9, float("inf"), 5.96e-8, 2.98e-8, 0.0])])
    to_half = rtc.kernel("float_to_half", ["x"], ["h"], "long long i = blockIdx.x * (long long)blockDim.x + "
                         "threadIdx.x;\nif (i < x_numel) h[i] = __float2half(x[i]);")
    h = torch.empty(x.numel(), dtype=torch.float16, device=device)
    to_half(x.to(device), h, grid=-(-x.numel() // 256), block=256)
    assert torch.equal(h.cpu().view(torch.int16), x.half().view(torch.int16))
