"""labops.rtc on a GPU: run its tests on CUDA, then measure it, for notebook 11.

Usage (GPU machine, repository root; needs torch with CUDA and cuda-core):
    python3 tools/gpu_rtc.py [docs/rtc_gpu.json]

1. runs tests/test_rtc.py and tests/test_rtc_layers.py (CPU and CUDA cases) and stops if any fails;
2. times an rtc kernel's first launch (NVRTC compile + load + launch) and a cached relaunch (host time
   per call, against a native torch op's);
3. times, with CUDA events (median of many bursts, labops.bench.time_ms) and CUDA-graph replays
   (labops.bench.graph_ms): the rtc softmax (one block per row), the write-up's one-row-per-thread rtc
   softmax, labops.softmax, torch.softmax; the rtc darknet reorg and labops.reorg; all as % of a device
   copy's bandwidth measured in the same run, and rtc against the compiled op as a ratio.
Prints a table and writes the JSON (device name, torch version, date).
"""

import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root))  # labops is not pip-installed on the GPU machine

import torch  # noqa: E402

import labops  # noqa: E402
import labops.ops  # noqa: E402,F401  (builds the compiled ops the first time)
from labops import rtc, rtc_layers  # noqa: E402
from labops.bench import copy_bandwidth, graph_ms, time_ms  # noqa: E402


def run_tests():
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-rfE", "-p", "no:cacheprovider",
           str(root / "tests" / "test_rtc.py"), str(root / "tests" / "test_rtc_layers.py")]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    tail = done.stdout.strip().splitlines()[-15:]
    print("\n".join(tail), flush=True)
    if done.returncode != 0:
        print(done.stderr[-3000:])
        sys.exit(f"tests/test_rtc.py or tests/test_rtc_layers.py failed (rc {done.returncode})")
    return tail[-1]


def host_us_per_call(fn, calls=2000):
    """Median host microseconds per call over 5 bursts (the GPU may lag behind; the host time is the cost)."""
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) * 1e6 / calls)
        torch.cuda.synchronize()
    return statistics.median(samples)


def compile_and_relaunch():
    body = (f"// fresh body {uuid.uuid4().hex}: nothing cached\n"
            "long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            "if (i < x_numel) y[i] = 2 * x[i] + 1;\n")
    k = rtc.kernel("scale_shift", ["x"], ["y"], body)
    x = torch.randn(4096, device="cuda")
    y = torch.empty_like(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    k(x, y, grid=16, block=256)
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    assert torch.allclose(y, 2 * x + 1)
    rtc_us = host_us_per_call(lambda: k(x, y, grid=16, block=256))
    torch_us = host_us_per_call(lambda: torch.mul(x, 2, out=y))
    return {"first_launch_ms": first_ms, "relaunch_host_us": rtc_us, "torch_mul_host_us": torch_us,
            "relaunch_over_torch_op": rtc_us / torch_us}


def pct(nbytes, ms, bandwidth):
    return None if ms is None else 100 * nbytes / (ms * 1e-3) / bandwidth


def timed(fns, nbytes, bandwidth):
    row = {}
    for name, fn in fns.items():
        eager, graph = time_ms(fn, "cuda"), graph_ms(fn)
        row[name] = {"eager_pct_copy": pct(nbytes, eager, bandwidth), "graph_pct_copy": pct(nbytes, graph, bandwidth),
                     "eager_ms": eager, "graph_ms": graph}
    return row


def softmax_rows(bandwidth):
    rows = []
    for shape in [(4096, 1000), (8192, 4096), (1024, 32768)]:
        x = torch.randn(*shape, device="cuda")
        y = torch.empty_like(x)
        torch.testing.assert_close(rtc_layers.softmax(x), torch.softmax(x.double(), -1).float(), rtol=1e-5, atol=1e-6)
        fns = {
            "rtc one block per row": lambda: rtc_layers.softmax_block_per_row(x, y, grid=min(shape[0], 65535), block=256),
            "rtc one row per thread": lambda: rtc_layers.softmax_rows(x, y, grid=(shape[0] + 127) // 128, block=128),
            "labops.softmax": lambda: labops.softmax(x, -1),
            "torch.softmax": lambda: torch.softmax(x, -1),
        }
        timing = timed(fns, 2 * x.numel() * 4, bandwidth)
        rows.append({"shape": f"{shape[0]}x{shape[1]}", "dtype": "float32", "pct_copy": timing,
                     "rtc_block_per_row_over_labops_time": timing["rtc one block per row"]["graph_ms"]
                     / timing["labops.softmax"]["graph_ms"],
                     "row_per_thread_over_block_per_row_time": timing["rtc one row per thread"]["graph_ms"]
                     / timing["rtc one block per row"]["graph_ms"]})
    return rows


def reorg_rows(bandwidth):
    rows = []
    for shape in [(32, 64, 104, 104), (16, 256, 52, 52)]:
        x = torch.randn(*shape, device="cuda")
        y = torch.empty(shape[0], shape[1] * 4, shape[2] // 2, shape[3] // 2, device="cuda")
        assert torch.equal(rtc_layers.reorg(x, 2), labops.reorg(x, 2, "darknet"))
        grid = min(65535, (y.numel() + 255) // 256)
        fns = {
            "rtc reorg (darknet)": lambda: rtc_layers.reorg_darknet(x, y, grid=grid, block=256),
            "labops.reorg (darknet)": lambda: labops.reorg(x, 2, "darknet"),
            "device copy": lambda: y.view(-1).copy_(x.view(-1)),
        }
        timing = timed(fns, 2 * x.numel() * 4, bandwidth)
        rows.append({"shape": "x".join(map(str, shape)), "dtype": "float32", "pct_copy": timing,
                     "rtc_over_labops_time": timing["rtc reorg (darknet)"]["graph_ms"]
                     / timing["labops.reorg (darknet)"]["graph_ms"]})
    return rows


def main(path):
    assert torch.cuda.is_available(), "needs a GPU"
    tests = run_tests()
    rtc._import_cuda_core()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cuda_core": getattr(rtc._cuda_core, "__version__", "?"), "date": time.strftime("%Y-%m-%d"),
              "tests": tests}
    bandwidth = copy_bandwidth("cuda")
    result["copy_GBps"] = bandwidth / 1e9
    result["compile"] = compile_and_relaunch()
    result["softmax"] = softmax_rows(bandwidth)
    result["reorg"] = reorg_rows(bandwidth)

    print(f"\n{result['device']} | torch {result['torch']} | cuda.core {result['cuda_core']} | "
          f"copy {result['copy_GBps']:.0f} GB/s | tests: {tests}")
    c = result["compile"]
    print(f"first launch (NVRTC compile + load + launch): {c['first_launch_ms']:.0f} ms; cached relaunch "
          f"{c['relaunch_host_us']:.1f} us of host time per call = {c['relaunch_over_torch_op']:.1f}x a torch.mul")
    print(f"{'case':34s} {'impl':26s} {'% copy eager':>12s} {'% copy graph':>12s}")
    for row in result["softmax"] + result["reorg"]:
        for name, t in row["pct_copy"].items():
            graph = "-" if t["graph_pct_copy"] is None else f"{t['graph_pct_copy']:.1f}"
            print(f"{row['shape'] + ' ' + row['dtype']:34s} {name:26s} {t['eager_pct_copy']:12.1f} {graph:>12s}")
    for row in result["softmax"]:
        print(f"softmax {row['shape']}: rtc block-per-row takes {row['rtc_block_per_row_over_labops_time']:.2f}x "
              f"labops.softmax's time; row-per-thread {row['row_per_thread_over_block_per_row_time']:.1f}x "
              "block-per-row's")
    for row in result["reorg"]:
        print(f"reorg {row['shape']}: rtc takes {row['rtc_over_labops_time']:.2f}x labops.reorg's time")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(root / "docs" / "rtc_gpu.json"))
