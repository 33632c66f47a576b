"""The capstone (notebook 10) on one GPU: training, and the training-step time against torch.nn.

Usage (GPU machine, repository root; no Jupyter, no scikit-learn needed):

    python3 tools/gpu_capstone.py docs/capstone_gpu.json

1. Trains the labops network on CUDA three ways from the same initial weights (autograd, Torch7-style
   labops.torch7, autograd under torch.compile(fullgraph=True)): loss-curve agreement and test accuracy
   (asserted >= 95 %), and the same architecture from torch.nn for comparison.
2. Times one training step (forward, loss, backward, SGD update) of the labops network and of the same
   architecture from torch.nn (F.conv2d / cuDNN, F.gelu, F.interpolate, F.pixel_unshuffle, ...), eager and
   torch.compile'd (the default mode, and mode="reduce-overhead": forward and backward replayed as CUDA graphs),
   in this one run: CUDA events around bursts of steps, medians; the eager and default-mode variants take
   their samples in turn (labops.bench.time_ms_interleaved), so their ratios meet one host. Prints and records
   ratios.

The two-GPU data-parallel run (NCCL) is separate:

    torchrun --standalone --nproc_per_node=2 -m labops.capstone --ddp
"""

import json
import sys
import time
from pathlib import Path

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root))  # labops is not pip-installed on the GPU machine

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from labops import capstone  # noqa: E402
from labops.bench import time_ms, time_ms_interleaved  # noqa: E402
from labops.ops import cross_entropy  # noqa: E402


def train_all(device):
    data = capstone.load_digits(device=device)
    model = capstone.labops_model(seed=0, device=device)
    net = capstone.legacy_model(model)
    auto = capstone.train_autograd(model, data)
    torch7 = capstone.train_legacy(net, data)
    compiled = capstone.train_autograd(capstone.labops_model(seed=0, device=device), data, compile=True)
    native = capstone.train_autograd(capstone.torch_model(seed=0, device=device), data, loss_fn=F.cross_entropy)
    result = {
        "steps": len(auto.losses),
        "test_accuracy": {"autograd": auto.test_accuracy, "torch7_style": torch7.test_accuracy,
                          "compiled": compiled.test_accuracy, "torch_nn": native.test_accuracy},
        "max_relative_difference_of_loss": {
            "torch7_style_vs_autograd": capstone.max_relative_difference(auto.losses, torch7.losses),
            "compiled_vs_autograd": capstone.max_relative_difference(auto.losses, compiled.losses),
            "torch_nn_vs_labops": capstone.max_relative_difference(auto.losses, native.losses),
        },
        "identical_steps_torch7_style_vs_autograd": sum(a == b for a, b in zip(auto.losses, torch7.losses)),
        "seconds": {"autograd": auto.seconds, "torch7_style": torch7.seconds,
                    "compiled_including_compilation": compiled.seconds, "torch_nn": native.seconds},
        "final_loss": {"autograd": auto.losses[-1], "torch7_style": torch7.losses[-1]},
    }
    print(json.dumps(result, indent=1), flush=True)
    print(f"test accuracy: {100 * auto.test_accuracy:.1f} %", flush=True)
    assert auto.test_accuracy >= 0.95 and compiled.test_accuracy >= 0.95, result
    # float32 on a GPU: the same kernels on the same inputs; a bound, not the bits, in case a kernel reduces
    # with atomics. What was measured is in the JSON.
    assert result["max_relative_difference_of_loss"]["torch7_style_vs_autograd"] < 1e-3, result
    return result


def make_step(model, loss_fn, x, y, compile):
    """One training step of `model` on (x, y), warmed up (compilation, autotuning, the caching allocator).
    compile: False (eager), or torch.compile's mode for the forward and loss ("default", "reduce-overhead")."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)

    def forward_loss(x, y):
        return loss_fn(model(x), y)

    if compile:
        forward_loss = torch.compile(forward_loss, fullgraph=True, mode=compile)

    def step():
        if compile == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # a new step: the last one's graph outputs are dead
        loss = forward_loss(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(10):  # warm-up: compilation, autotuning, the caching allocator
        step()
    return step


# name: (model builder, loss, compile mode or False). The variants of TOGETHER are timed together, their
# samples taken in turn (labops.bench.time_ms_interleaved), so that the ratios between them (labops over torch.nn,
# compiled over eager) meet one host: timed one after the other, torch.nn's own eager step moved from 1.47 to
# 2.25 ms between runs on the H100's host (docs/benchmarks/capstone/h100_session32_ab.md). Each variant of ALONE
# (mode="reduce-overhead": CUDA graphs, a graph tree per compiled function) is timed by itself after a dynamo reset.
TOGETHER = {
    "labops_eager": (capstone.labops_model, cross_entropy, False),
    "labops_compiled": (capstone.labops_model, cross_entropy, "default"),
    # labops.cross_entropy reads back its target check (one synchronization a step): the same network
    # with F.cross_entropy separates that cost from the layers'.
    "labops_layers_F_cross_entropy_eager": (capstone.labops_model, F.cross_entropy, False),
    "torch_nn_eager": (capstone.torch_model, F.cross_entropy, False),
    "torch_nn_compiled": (capstone.torch_model, F.cross_entropy, "default"),
}
ALONE = {
    "labops_cudagraphs": (capstone.labops_model, cross_entropy, "reduce-overhead"),
    "torch_nn_cudagraphs": (capstone.torch_model, F.cross_entropy, "reduce-overhead"),
}
VARIANTS = {**TOGETHER, **ALONE}  # every variant by name (tools/capstone_profile.py picks from these)


def _failed(row, name, e):
    """Recorded, not hidden: the JSON says which variant failed and why."""
    row[f"{name}_ms"] = float("nan")
    row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    torch.cuda.synchronize()


def time_steps(device, batches=(32, 1024)):
    rows = []
    g = torch.Generator().manual_seed(0)
    for batch in batches:
        x = torch.randn(batch, 1, 8, 8, generator=g).to(device)
        y = torch.randint(0, 10, (batch,), generator=g).to(device)
        row = {"batch": batch}
        torch._dynamo.reset()
        steps = {}
        for name, (build, loss_fn, compile) in TOGETHER.items():
            try:
                steps[name] = make_step(build(seed=0, device=device), loss_fn, x, y, compile)
            except Exception as e:
                _failed(row, name, e)
        for name, t in zip(steps, time_ms_interleaved(list(steps.values()), device)):
            row[f"{name}_ms"] = t
        for name, (build, loss_fn, compile) in ALONE.items():
            torch._dynamo.reset()
            try:
                row[f"{name}_ms"] = time_ms(make_step(build(seed=0, device=device), loss_fn, x, y, compile), device)
            except Exception as e:
                _failed(row, name, e)
        row["labops_over_torch_nn_eager"] = row["labops_eager_ms"] / row["torch_nn_eager_ms"]
        row["labops_over_torch_nn_compiled"] = row["labops_compiled_ms"] / row["torch_nn_compiled_ms"]
        row["labops_compiled_over_eager"] = row["labops_compiled_ms"] / row["labops_eager_ms"]
        row["torch_nn_compiled_over_eager"] = row["torch_nn_compiled_ms"] / row["torch_nn_eager_ms"]
        row["labops_over_torch_nn_cudagraphs"] = row["labops_cudagraphs_ms"] / row["torch_nn_cudagraphs_ms"]
        row["labops_cudagraphs_over_eager"] = row["labops_cudagraphs_ms"] / row["labops_eager_ms"]
        row["torch_nn_cudagraphs_over_eager"] = row["torch_nn_cudagraphs_ms"] / row["torch_nn_eager_ms"]
        rows.append({k: float(v) if isinstance(v, float) else v for k, v in row.items()})
        print(f"batch {batch:5d}: " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in row.items() if k != "batch"), flush=True)
    return rows


def main(path):
    device = "cuda"
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "date": time.strftime("%Y-%m-%d"),
              "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
              "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
              "note": "training step = forward + loss + backward + SGD update; each sample a burst of about 1 ms "
                      "of steps between CUDA events, medians; eager and compiled variants sampled in turn, the "
                      "CUDA-graph ones each alone; ratios > 1 mean labops (or compiled) is slower"}
    result["training"] = train_all(device)
    result["step_time"] = time_steps(device)
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(root / "docs" / "capstone_gpu.json"))
