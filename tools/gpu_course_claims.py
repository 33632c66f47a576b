"""GPU machine: measure what the course says about its kernels (issue #31, "what the course asserts, shown").

Writes into the folder given as the first argument:

* ``elementwise_sizes.json`` (notebook 03): labops.tanh's two CUDA kernels over sizes, as GB/s beside a copy
  of the same size and torch.tanh. The vectorized kernel runs when every pointer is 16-byte aligned; a view
  that starts one float into its storage is not, so the same op on it runs the textbook grid-stride kernel.
  The profiler's kernel names, recorded for both, show which one ran.
* ``cudnn_kernels.json`` (notebook 05): the CUDA kernels F.conv2d launches for each convolution of the
  conv2d_mm benchmark suite, forward and forward + backward, with PyTorch's default TF32 and without it.

Usage: python3 tools/gpu_course_claims.py OUT_DIR
"""

import datetime
import json
import pathlib
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import labops
from labops.bench import conv2d_mm, graph_ms, time_ms


def cuda_kernels(fn) -> list[str]:
    """Names of the CUDA kernels one call of ``fn`` launches, in launch order (after a warm-up call)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and not event.name.startswith(("Memcpy", "Memset")):
            names.append(event.name)
    return names


def elementwise_sizes(out: pathlib.Path) -> None:
    rows = []
    kernels = {}
    for k in range(10, 29):
        n = 2**k
        storage = torch.empty(n + 4, device="cuda").uniform_(-3, 3)
        aligned, shifted = storage[:n], storage[1:n + 1]  # shifted: 4 bytes into a 16-byte-aligned storage
        dst = torch.empty(n, device="cuda")
        assert aligned.data_ptr() % 16 == 0 and shifted.data_ptr() % 16 != 0
        for x in (aligned, shifted):
            torch.testing.assert_close(labops.tanh(x), torch.tanh(x))
        fns = {"copy": lambda: dst.copy_(aligned),
               "labops.tanh, vectorized kernel": lambda: labops.tanh(aligned),
               "labops.tanh, textbook kernel": lambda: labops.tanh(shifted),
               "torch.tanh": lambda: torch.tanh(aligned)}
        if k == 20:
            kernels = {name: cuda_kernels(fn) for name, fn in fns.items()}
        row = {"n": n, "bytes": 2 * n * 4}
        for name, fn in fns.items():
            graph = graph_ms(fn)
            row[name] = {"graph_ms": graph, "eager_ms": time_ms(fn, "cuda", min_time=0.05),
                         "graph_GBps": row["bytes"] / (graph * 1e-3) / 1e9}
        rows.append(row)
        print(f"n = 2^{k:2d}: " + "  ".join(f"{name.split(',')[-1].strip()} {row[name]['graph_GBps']:7.0f} GB/s"
                                            for name in fns), flush=True)
        del storage, dst
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": datetime.date.today().isoformat(), "dtype": "float32",
              "timing": "GPU time per call from a CUDA graph of 20 calls (labops.bench.graph_ms); eager_ms from "
                        "labops.bench.time_ms", "kernels_at_2^20": kernels, "rows": rows}
    (out / "elementwise_sizes.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(kernels, indent=1))


def cudnn_kernels(out: pathlib.Path) -> None:
    rows = []
    for case in conv2d_mm.cases("cuda"):
        if "cuDNN" not in case.native_name:
            continue
        runs = {"default": case.native, **case.peers}
        row = {"op": case.op, "shape": case.shape, "dtype": str(case.dtype).replace("torch.", ""), "kernels": {}}
        for name, fn in runs.items():
            row["kernels"][name] = cuda_kernels(fn)
        rows.append(row)
        print(case.op, case.shape, row["dtype"], json.dumps(row["kernels"]), flush=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "date": datetime.date.today().isoformat(),
              "how": "torch.profiler, one call after a warm-up; CUDA kernels in launch order (memcpy/memset left "
                     "out); 'default' is PyTorch's default (TF32 allowed for float32 convolutions)",
              "rows": rows}
    (out / "cudnn_kernels.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    folder = pathlib.Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    elementwise_sizes(folder)
    cudnn_kernels(folder)
