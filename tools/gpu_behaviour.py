"""GPU behaviour a CPU-only learner never sees, measured once and committed for the notebooks.

Usage (GPU machine, repository root): python3 tools/gpu_behaviour.py docs/gpu_behaviour.json

Records, as counts and ratios measured in this one run (never bare times):
  * notebook 07: how many elements of the atomic-scatter backward change bits between runs (and of the gather);
  * notebook 09: a kernel timed by the host clock without synchronizing, with it, and with CUDA events;
    the host time of an eager call against its kernel time (a CUDA graph replay);
  * notebook 08: write-up 004's softmax, one thread per row in a single block, against labops.softmax and
    torch.softmax, as % of the copy bandwidth.
"""

import json
import statistics
import sys
import time
from pathlib import Path

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root))

import torch  # noqa: E402

import labops  # noqa: E402
from labops.bench import copy_bandwidth, graph_ms, time_ms  # noqa: E402

# Write-up 004's mx.rtc softmax, as it is: the row from the thread index, three passes over the row,
# launched as ONE block of `rows` threads (grid (1,1,1), block (rows,1,1)).
WRITEUP_004 = r"""
#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>

__global__ void softmax_one_thread_per_row(const float* x, float* y, int cols) {
  int i = threadIdx.x + blockIdx.x * blockDim.x;
  float max_x = x[i * cols];
  for (int j = 1; j < cols; ++j) {
    if (max_x < x[i * cols + j]) max_x = x[i * cols + j];
  }
  float sum = 0.0f;
  for (int j = 0; j < cols; ++j) sum += expf(x[i * cols + j] - max_x);
  for (int j = 0; j < cols; ++j) y[i * cols + j] = expf(x[i * cols + j] - max_x) / sum;
}

torch::Tensor softmax_writeup004(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == at::kFloat && x.size(0) <= 1024,
              "x: a contiguous float32 CUDA matrix of at most 1024 rows (one block)");
  auto y = torch::empty_like(x);
  softmax_one_thread_per_row<<<1, x.size(0), 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
  return y;
}
"""


def median_ms(samples):
    return statistics.median(samples)


def main(path):
    device = "cuda"
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    bandwidth = copy_bandwidth(device)
    result["copy_GBps"] = bandwidth / 1e9

    # -- 07: atomics change the last bits of a float sum from run to run --
    backward = torch.ops.labops.upsample_bilinear2d_backward
    g = torch.randn(8, 64, 256, 256, device=device)
    size = [8, 64, 128, 128]
    determinism = {}
    for deterministic, name in [(False, "scatter (atomics)"), (True, "gather")]:
        runs = [backward(g, size, "half_pixel", 2.0, 2.0, deterministic) for _ in range(5)]
        determinism[name] = {
            "elements": runs[0].numel(),
            "elements_differing_from_run_1": [int((runs[0] != r).sum()) for r in runs[1:]],
            "largest_relative_difference": max(
                float(((runs[0] - r).abs() / runs[0].abs().clamp_min(1e-30)).max()) for r in runs[1:]),
        }
    result["upsample_backward_two_runs"] = determinism
    print(json.dumps(determinism, indent=1), flush=True)

    # -- 09: which clock measures a kernel --
    x = torch.randn(64 * 2**20, device=device)
    labops.gelu(x)
    torch.cuda.synchronize()
    launch, synced, events = [], [], []
    for _ in range(30):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        labops.gelu(x)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        labops.gelu(x)
        end.record()
        end.synchronize()
        launch.append((t1 - t0) * 1e3)
        synced.append((t2 - t0) * 1e3)
        events.append(start.elapsed_time(end))
    kernel = median_ms(events)
    result["gelu_64M_clocks"] = {
        "without_synchronize_over_events": median_ms(launch) / kernel,
        "with_synchronize_over_events": median_ms(synced) / kernel,
        "events_pct_copy": 100 * 2 * x.numel() * 4 / (kernel * 1e-3) / bandwidth,
    }
    print(result["gelu_64M_clocks"], flush=True)

    # -- 09: host-bound or kernel-bound: one eager call against its kernel (graph replay) --
    xp = torch.randn(64, 2048, 7, 7, device=device)
    host = {}
    for name, fn in [("labops.global_avg_pool2d", lambda: labops.global_avg_pool2d(xp)),
                     ("x.mean", lambda: xp.mean((-2, -1), keepdim=True))]:
        eager, graph = time_ms(fn, device), graph_ms(fn)
        host[name] = {"eager_over_graph": eager / graph, "graph_pct_copy": 100 * xp.numel() * 4 / (graph * 1e-3)
                      / bandwidth, "eager_pct_copy": 100 * xp.numel() * 4 / (eager * 1e-3) / bandwidth}
    result["pooling_64x2048x7x7_eager_vs_graph"] = host
    print(host, flush=True)

    # -- 08: write-up 004's one-thread-per-row softmax --
    from torch.utils.cpp_extension import load_inline

    ext = load_inline("writeup004_softmax", cpp_sources="torch::Tensor softmax_writeup004(torch::Tensor x);",
                      cuda_sources=WRITEUP_004,
                      functions=["softmax_writeup004"], extra_cuda_cflags=["-O3"], verbose=False)
    rows = []
    for shape in [(1024, 1000), (1024, 4096)]:
        xs = torch.randn(*shape, device=device)
        expected = torch.softmax(xs.double(), -1).float()
        got = ext.softmax_writeup004(xs)
        assert torch.allclose(got, expected, atol=1e-6), "the write-up's kernel is wrong?"
        nbytes = 2 * xs.numel() * 4
        timings = {name: graph_ms(fn) for name, fn in [
            ("write-up 004 (one thread per row, one block)", lambda: ext.softmax_writeup004(xs)),
            ("labops.softmax", lambda: labops.softmax(xs, -1)),
            ("torch.softmax", lambda: torch.softmax(xs, -1))]}
        rows.append({"shape": f"{shape[0]}x{shape[1]}", "dtype": "float32",
                     "pct_copy": {k: 100 * nbytes / (v * 1e-3) / bandwidth for k, v in timings.items()},
                     "labops_speedup_over_writeup": timings["write-up 004 (one thread per row, one block)"]
                     / timings["labops.softmax"]})
    result["softmax_one_thread_per_row"] = rows
    print(json.dumps(rows, indent=1), flush=True)

    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gpu_behaviour.json")
