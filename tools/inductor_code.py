"""What torch.compile writes for three native functions, saved as pages for notebook 12 and the docs.

On a GPU Inductor writes Triton, on a CPU C++ (labops.inductor.generated_kernels). Run on the GPU machine:
the CPU's C++ a learner can generate in the notebook itself, the GPU's Triton only where there is a GPU.

Usage: PYTHONPATH=. python tools/inductor_code.py --device cuda --out docs/triton/inductor
       (writes <case>_<device>.md: each graph's kernels with their source, and its library calls)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from labops.inductor import generated_kernels


def cases(device):
    """(name, function, inputs, what the page shows)."""
    def leaf(*shape):
        return torch.randn(*shape, device=device, requires_grad=True)
    return [
        ("gelu", F.gelu, (leaf(4096, 1024),), "an elementwise op: one fused kernel each way"),
        ("softmax", lambda x: torch.softmax(x, dim=-1), (leaf(4096, 1000),),
         "a row reduction: the max, the sum and the division in one kernel"),
        ("conv_bias_gelu", lambda x, w, b: F.gelu(F.conv2d(x, w, b, padding=1)),
         (leaf(8, 32, 28, 28), leaf(64, 32, 3, 3), leaf(64)),
         "a convolution stays a library call (cuDNN, oneDNN); the bias and the GELU after it are fused"),
    ]


def page(name, why, graphs, device) -> str:
    where = f" on {torch.cuda.get_device_name()}" if device == "cuda" else ""
    lines = [f"# What torch.compile writes for `{name}` ({device})", "",
             f"{why}. Captured by `tools/inductor_code.py` with torch {torch.__version__}{where}.", ""]
    for g in graphs:
        calls = f"; library calls: {', '.join(g.library_calls)}" if g.library_calls else ""
        lines += [f"## {g.graph}: {len(g.kernels)} kernel(s){calls}", ""]
        for k in g.kernels:
            lines += [f"### `{k.name}`", "", f"```{k.language}", k.source, "```", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--out", default="docs/triton/inductor")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("inductor_code: --device cuda needs a GPU (Inductor writes Triton only for one)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, fn, inputs, why in cases(args.device):
        path = out / f"{name}_{args.device}.md"
        path.write_text(page(name, why, generated_kernels(fn, *inputs), args.device))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
