"""Where the capstone's training step spends its time on one GPU, for every variant tools/gpu_capstone.py times.

Usage (GPU machine, repository root):

    python3 tools/capstone_profile.py OUT.json [--batches 32 1024] [--variants labops_eager torch_nn_eager ...]

For each variant and batch, from the same warmed-up step:
- the step's median time (CUDA events around bursts of steps, as tools/gpu_capstone.py);
- from torch.profiler over 20 steps, per step: the GPU's busy time (the sum of the kernels', copies' and
  memsets' times: the step cannot be shorter), the kernels launched, the CUDA runtime calls that launch or
  wait (cudaLaunchKernel, cudaGraphLaunch, cudaStreamSynchronize, ...), the kernels and host ops that take the
  most time;
- for the CUDA-graph variants, torch.compile's counters (a cudagraph skip means part of the step ran eagerly);
- the kernels each op launched in one step (printed with --kernels).

The step time against the GPU's busy time says whether a variant waits on the host (launches, Python) or on
the kernels. Prints a summary and writes everything to OUT.json.
"""

import argparse
import json
import sys
from pathlib import Path

root = Path(__file__).resolve().parent
sys.path.insert(0, str(root))         # gpu_capstone, beside this file
sys.path.insert(0, str(root.parent))  # labops is not pip-installed on the GPU machine

import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from gpu_capstone import VARIANTS, make_step  # noqa: E402
from labops.bench import time_ms  # noqa: E402

STEPS = 20
# The runtime calls worth counting: what launches work, and what makes the host wait for the device.
RUNTIME_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
                 "cudaMemcpyAsync", "cudaMemsetAsync", "cudaStreamSynchronize", "cudaEventSynchronize",
                 "cudaDeviceSynchronize", "cudaStreamIsCapturing")


def per_step(x):
    return x / STEPS


def kernels_by_op(prof):
    """[(op, [kernel names])] in launch order: each kernel under the outermost op that launched it."""
    rows = []
    for e in sorted(prof.events(), key=lambda e: e.time_range.start):
        if e.device_type != DeviceType.CPU or not e.kernels:
            continue
        top = e
        while top.cpu_parent is not None and not top.cpu_parent.name.startswith(("## ", "Torch-Compiled", "Optimizer")):
            top = top.cpu_parent
        names = [k.name.replace("(anonymous namespace)::", "").split("(")[0].replace("void ", "")[:90]
                 for k in e.kernels]
        if rows and rows[-1][0] == top.name and rows[-1][2] is top:
            rows[-1][1].extend(names)
        else:
            rows.append((top.name, names, top))
    return [(op, names) for op, names, _ in rows]


def profile_variant(name, batch, force_conv=None):
    build, loss_fn, mode = VARIANTS[name]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 1, 8, 8, generator=g).cuda()
    y = torch.randint(0, 10, (batch,), generator=g).cuda()
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    step = make_step(build(seed=0, device="cuda"), loss_fn, x, y, mode)
    if force_conv:  # conv2d_mm's forward on one rung (labops.ladder), for comparison with the automatic choice
        from labops import ladder

        unforced = step

        def step():
            with ladder.use("conv2d_mm", force_conv):
                unforced()

        step()
    step_ms = time_ms(step, "cuda")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as one_step:
        step()
        torch.cuda.synchronize()
    rows = prof.key_averages()
    # The kernels, copies and memsets; not the ranges the profiler draws on the GPU's timeline for annotations
    # (Optimizer.step#SGD.step), which overlap them.
    annotated = annotations(prof)
    device_rows = [r for r in rows if r.device_type == DeviceType.CUDA and r.key not in annotated]
    host_rows = [r for r in rows if r.device_type == DeviceType.CPU]
    busy_us = per_step(sum(r.self_device_time_total for r in device_rows))
    launches = per_step(sum(r.count for r in device_rows))
    runtime = {r.key: per_step(r.count) for r in host_rows if r.key in RUNTIME_CALLS}
    top_kernels = [{"name": r.key[:120], "us": per_step(r.self_device_time_total), "calls": per_step(r.count)}
                   for r in sorted(device_rows, key=lambda r: -r.self_device_time_total)[:12]]
    top_host = [{"name": r.key[:120], "self_us": per_step(r.self_cpu_time_total), "calls": per_step(r.count)}
                for r in sorted(host_rows, key=lambda r: -r.self_cpu_time_total)[:15]]
    return {"variant": name, "batch": batch, "step_ms": step_ms, "gpu_busy_ms": busy_us / 1000,
            "gpu_busy_fraction": busy_us / 1000 / step_ms, "kernels_per_step": launches,
            "runtime_calls_per_step": runtime, "top_kernels": top_kernels, "top_host_ops": top_host,
            "inductor_counters": {k: v for k, v in counters["inductor"].items() if "cudagraph" in k},
            "force_conv": force_conv, "kernels_by_op": kernels_by_op(one_step)}


def annotations(prof):
    return {e.name for e in prof.events() if e.device_type == DeviceType.CPU and e.name.startswith(
        ("Optimizer.", "## ", "Torch-Compiled", "CompiledFunction", "ProfilerStep"))}


def summary(r, kernels=False):
    calls = ", ".join(f"{k} {v:g}" for k, v in sorted(r["runtime_calls_per_step"].items()))
    lines = [f"{r['variant']} batch {r['batch']}: step {r['step_ms']:.3f} ms, GPU busy {r['gpu_busy_ms']:.3f} ms "
             f"({100 * r['gpu_busy_fraction']:.0f} %), {r['kernels_per_step']:g} kernels/step; {calls}"]
    if r["inductor_counters"]:
        lines.append(f"    counters: {r['inductor_counters']}")
    lines += [f"    gpu {k['us']:8.1f} us x{k['calls']:g}  {k['name'][:100]}" for k in r["top_kernels"][:8]]
    lines += [f"    cpu {k['self_us']:8.1f} us x{k['calls']:g}  {k['name'][:100]}" for k in r["top_host_ops"][:8]]
    if kernels:
        lines += [f"    {op}: {', '.join(names)}" for op, names in r["kernels_by_op"]]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 1024])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--force-conv", help="run conv2d_mm's forward on this rung (a name of labops.ladder)")
    parser.add_argument("--kernels", action="store_true", help="print the kernels each op launched in one step")
    args = parser.parse_args()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
               "steps_profiled": STEPS, "rows": []}
    for batch in args.batches:
        for name in args.variants:
            try:
                r = profile_variant(name, batch, args.force_conv)
            except Exception as e:  # recorded, not hidden
                r = {"variant": name, "batch": batch, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
                print(r, flush=True)
            else:
                print(summary(r, args.kernels), flush=True)
            results["rows"].append(r)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
