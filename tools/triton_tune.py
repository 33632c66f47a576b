"""Which launch settings labops.triton's layers use on a GPU: one sweep per layer, one run, printed as a table.

    PYTHONPATH=. python tools/triton_tune.py conv|gelu|softmax [--json out.json]

Each candidate is set in the layer's module (its GPU_* settings), checked against native PyTorch, then timed
(GPU time from CUDA graphs, labops.bench.graph_ms):
  * conv: Tiles (block_m, block_n, block_k, warps, stages) on ResNet's 3x3 layers in float16, forward and
    fwd+bwd, as cuDNN's time over each (above 1: faster than cuDNN);
  * gelu: (GPU_BLOCK, GPU_WARPS) on 2^26 elements, float32 and float16, as % of a copy's bandwidth;
  * softmax: warps per row-program (GPU_WARPS: block -> warps) on 4096x4096 and 8192x1024, float32 and
    float16, as % of a copy's bandwidth, beside torch.compile's.
The settings committed in labops/triton/ are the fastest of these runs (docs/benchmarks/triton/*_h100.md).
"""

import argparse
import importlib
import json

CONV_TILES = [(64, 64, 32, 4, 2), (64, 64, 32, 4, 4), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3),
              (128, 128, 32, 8, 3), (128, 128, 64, 8, 3), (128, 64, 64, 4, 3), (128, 128, 32, 4, 4)]
CONV_LAYERS = [(32, 64, 56), (32, 128, 28), (32, 256, 14)]
GELU_BLOCKS = [(1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 8)]
SOFTMAX_WARPS = [1, 2, 4, 8, 16]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("layer", choices=["conv", "gelu", "softmax"])
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("tools/triton_tune.py needs a CUDA GPU")
    torch.backends.cudnn.benchmark = True
    rows = {"conv": conv, "gelu": gelu, "softmax": softmax}[args.layer]()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "layer": args.layer, "rows": rows}, f, indent=1)


def _randn(*shape, dtype, scale=1.0):
    import torch

    return (torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * scale).to("cuda", dtype)


def conv():
    import torch
    import torch.nn.functional as F

    import labops.triton as lt
    from labops.bench import fwd_bwd, graph_ms

    module = importlib.import_module("labops.triton.conv2d")  # labops.triton.conv2d is the function
    layers = {}
    for batch, channels, hw in CONV_LAYERS:
        x = _randn(batch, channels, hw, hw, dtype=torch.float16)
        w = _randn(channels, channels, 3, 3, dtype=torch.float16, scale=(9 * channels) ** -0.5)
        b, g = _randn(channels, dtype=torch.float16), _randn(batch, channels, hw, hw, dtype=torch.float16)
        leaves = [t.detach().requires_grad_() for t in (x, w, b)]
        cudnn = (graph_ms(lambda: F.conv2d(x, w, b, padding=1)),
                 graph_ms(fwd_bwd(lambda *a: F.conv2d(*a, padding=1), leaves, g)))
        layers[f"{batch}x{channels}x{hw}x{hw}"] = (x, w, b, g, leaves, cudnn)
    rows = []
    print("| tiles (m, n, k, warps, stages) | layer | fwd vs cuDNN | fwd+bwd vs cuDNN |\n|---|---|---|---|")
    for candidate in CONV_TILES:
        module.GPU_TILES = module.Tiles(*candidate)
        for layer, (x, w, b, g, leaves, cudnn) in layers.items():
            want = F.conv2d(x.float(), w.float(), b.float(), padding=1)
            assert torch.allclose(lt.conv2d(x, w, b, padding=1).float(), want, rtol=1e-2, atol=5e-2), candidate
            for leaf in leaves:
                leaf.grad = None
            lt.conv2d(*leaves, padding=1).backward(g)
            reference = [t.detach().float().requires_grad_() for t in leaves]
            F.conv2d(*reference, padding=1).backward(g.float())
            for leaf, ref, name in zip(leaves, reference, ("x", "weight", "bias")):
                error, scale = (leaf.grad.float() - ref.grad).abs().max().item(), ref.grad.abs().max().item()
                assert error <= 2e-2 * scale, f"{candidate}: grad {name} off by {error:.3g} (of {scale:.3g})"
            fwd = graph_ms(lambda: lt.conv2d(x, w, b, padding=1))
            step = graph_ms(fwd_bwd(lambda *a: lt.conv2d(*a, padding=1), leaves, g))
            rows.append({"tiles": candidate, "layer": layer, "fwd_vs_cudnn": cudnn[0] / fwd,
                         "fwd_bwd_vs_cudnn": cudnn[1] / step})
            print(f"| {candidate} | {layer} | {cudnn[0] / fwd:.2f} | {cudnn[1] / step:.2f} |", flush=True)
    return rows


def _bandwidth_sweep(title, cases, candidates, apply, fn, native, compiled=None):
    """% of a copy for fn on each case (x, bytes fwd, bytes fwd+bwd) under each candidate (apply(candidate))."""
    import torch

    from labops.bench import fwd_bwd, graph_ms

    rows = []
    print(f"| {title} | case | fwd % copy | fwd+bwd % copy |" + (" torch.compile fwd % copy |" if compiled else "")
          + "\n|---|---|---|---|" + ("---|" if compiled else ""))
    for label, x in cases:
        y = torch.empty_like(x)
        copy = graph_ms(lambda: y.copy_(x))
        xg, g = x.detach().requires_grad_(), torch.randn_like(x)
        reference = graph_ms(lambda: compiled(x)) if compiled else None
        for candidate in candidates:
            apply(candidate)
            assert torch.allclose(fn(x).float(), native(x.float()), rtol=1e-2, atol=1e-2), (label, candidate)
            fwd, step = graph_ms(lambda: fn(x)), graph_ms(fwd_bwd(fn, (xg,), g))
            row = {"candidate": candidate, "case": label, "fwd_pct_copy": 100 * copy / fwd,
                   "fwd_bwd_pct_copy": 100 * 2.5 * copy / step}
            if compiled:
                row["compile_fwd_pct_copy"] = 100 * copy / reference
            rows.append(row)
            print(f"| {candidate} | {label} | {row['fwd_pct_copy']:.0f} | {row['fwd_bwd_pct_copy']:.0f} |"
                  + (f" {row['compile_fwd_pct_copy']:.0f} |" if compiled else ""), flush=True)
    return rows


def gelu():
    import torch
    import torch.nn.functional as F

    import labops.triton as lt

    module = importlib.import_module("labops.triton.gelu")

    def apply(candidate):
        module.GPU_BLOCK, module.GPU_WARPS = candidate

    cases = [(f"2^26 {str(d)[6:]}", _randn(2 ** 26, dtype=d, scale=3.0)) for d in (torch.float32, torch.float16)]
    return _bandwidth_sweep("block, warps", cases, GELU_BLOCKS, apply, lt.gelu, F.gelu)


def softmax():
    import torch

    import labops.triton as lt
    from labops.bench import compiled

    module = importlib.import_module("labops.triton.softmax")

    def apply(warps):
        module.GPU_WARPS = lambda block: warps

    native = lambda t: torch.softmax(t, -1)  # noqa: E731
    cases = [(f"{r}x{c} {str(d)[6:]}", _randn(r, c, dtype=d, scale=4.0))
             for r, c in ((4096, 4096), (8192, 1024)) for d in (torch.float32, torch.float16)]
    return _bandwidth_sweep("warps", cases, SOFTMAX_WARPS, apply, lt.softmax, native, compiled(native))


if __name__ == "__main__":
    main()
