"""What torch.compile writes for three native functions: the kernels Inductor generates, saved for notebook 12.

On a GPU Inductor writes Triton; on a CPU it writes C++. Each case runs its forward and backward under
`torch._inductor.utils.run_and_get_code`, which returns the Python modules Inductor generated (one for the
forward graph, one for the backward), and keeps the kernels' own source: the strings handed to
`async_compile.triton(...)` or `async_compile.cpp_pybinding(...)`.

Usage: PYTHONPATH=. python tools/inductor_code.py --device cuda --out docs/triton/inductor
       (writes <case>_<device>.md, one per case: each kernel's name and source, and which graph it came from)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code


def _gelu(x):
    return F.gelu(x)


def _softmax(x):
    return torch.softmax(x, dim=-1)


def _conv_bias_gelu(x, w, b):
    return F.gelu(F.conv2d(x, w, b, padding=1))


def cases(device):
    """(name, function, inputs that require grad, what the notebook reads it for)."""
    def leaf(*shape):
        return torch.randn(*shape, device=device, requires_grad=True)
    return [
        ("gelu", _gelu, (leaf(4096, 1024),), "an elementwise op: one fused kernel each way"),
        ("softmax", _softmax, (leaf(4096, 1000),), "a row reduction: max, sum and the division in one kernel"),
        ("conv_bias_gelu", _conv_bias_gelu, (leaf(8, 32, 28, 28), leaf(64, 32, 3, 3), leaf(64)),
         "a convolution is an extern call (cuDNN or oneDNN); the bias and GELU after it are fused"),
    ]


# A kernel in Inductor's module: async_compile.triton('name', '''source''', ...) or
# name = async_compile.cpp_pybinding([...], r'''source''').
_TRITON = re.compile(r"async_compile\.triton\('(?P<name>\w+)', '''(?P<src>.*?)'''", re.S)
_CPP = re.compile(r"(?P<name>\w+) = async_compile\.cpp_pybinding\(\[.*?\], r'''(?P<src>.*?)'''", re.S)
_EXTERN = re.compile(r"extern_kernels\.(\w+)|aten\.(convolution\w*)")


def kernels(module_source: str) -> list[tuple[str, str, str]]:
    """(name, language, source) of every kernel Inductor wrote into one generated module."""
    found = [(m["name"], "python", m["src"].strip()) for m in _TRITON.finditer(module_source)]
    found += [(m["name"], "cpp", m["src"].strip()) for m in _CPP.finditer(module_source)]
    return found


def externs(module_source: str) -> list[str]:
    """The calls Inductor leaves to a library (cuDNN, cuBLAS, oneDNN) instead of writing a kernel."""
    return sorted({a or b for a, b in _EXTERN.findall(module_source)})


def capture(device: str) -> dict[str, str]:
    pages = {}
    for name, fn, inputs, why in cases(device):
        torch._dynamo.reset()
        compiled = torch.compile(fn)

        def step():
            out = compiled(*inputs)
            out.backward(torch.randn_like(out))

        _, modules = run_and_get_code(step)
        lines = [f"# What torch.compile writes for `{name}` on {device}", "",
                 f"{why}. Captured by tools/inductor_code.py with torch {torch.__version__}"
                 + (f" on {torch.cuda.get_device_name()}" if device == "cuda" else "") + ".", ""]
        for graph, module in zip(("forward", "backward"), modules):
            found = kernels(module)
            lines += [f"## {graph}: {len(found)} kernel(s)"
                      + (f"; library calls: {', '.join(externs(module))}" if externs(module) else ""), ""]
            for kernel, language, src in found:
                lines += [f"### `{kernel}`", "", f"```{language}", src, "```", ""]
        pages[name] = "\n".join(lines)
    return pages


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--out", default="docs/triton/inductor")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("inductor_code: --device cuda needs a GPU (Inductor writes Triton only for one)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, page in capture(args.device).items():
        path = out / f"{name}_{args.device}.md"
        path.write_text(page)
        print(f"wrote {path} ({page.count('### ')} kernels)")


if __name__ == "__main__":
    main()
