"""Which tile labops.triton.conv2d should use on a GPU: a sweep of Tiles, one run, printed as a table.

For each candidate (block_m, block_n, block_k, num_warps, num_stages) it sets labops/triton/conv2d.py's
GPU_TILES, checks the forward and the three gradients against F.conv2d, then times forward and fwd+bwd (GPU time
from CUDA graphs, labops.bench.graph_ms) on ResNet's 3x3 layers in float16, as cuDNN's time over each (above 1:
faster than cuDNN).

Usage: PYTHONPATH=. python tools/triton_conv_tiles.py [--json out.json]
"""

import argparse
import json


CANDIDATES = [(64, 64, 32, 4, 2), (64, 64, 32, 4, 4), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3),
              (128, 128, 32, 8, 3), (128, 128, 64, 8, 3), (128, 64, 64, 4, 3), (128, 128, 32, 4, 4)]
LAYERS = [(32, 64, 56), (32, 128, 28), (32, 256, 14)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    import importlib

    import labops.triton as lt
    from labops.bench import fwd_bwd, graph_ms

    module = importlib.import_module("labops.triton.conv2d")  # labops.triton.conv2d is the function
    if not torch.cuda.is_available():
        raise SystemExit("tools/triton_conv_tiles.py needs a CUDA GPU")
    torch.backends.cudnn.benchmark = True
    rows = []
    inputs = {}
    for batch, channels, hw in LAYERS:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(batch, channels, hw, hw, generator=gen).cuda().half()
        w = (torch.randn(channels, channels, 3, 3, generator=gen) / (9 * channels) ** 0.5).cuda().half()
        b = torch.randn(channels, generator=gen).cuda().half()
        g = torch.randn(batch, channels, hw, hw, generator=gen).cuda().half()
        leaves = [t.detach().requires_grad_() for t in (x, w, b)]
        cudnn = (graph_ms(lambda: F.conv2d(x, w, b, padding=1)),
                 graph_ms(fwd_bwd(lambda *a: F.conv2d(*a, padding=1), leaves, g)))
        inputs[(batch, channels, hw)] = (x, w, b, g, leaves, cudnn)
    print("| tiles (m, n, k, warps, stages) | layer | fwd vs cuDNN | fwd+bwd vs cuDNN |\n|---|---|---|---|")
    for candidate in CANDIDATES:
        module.GPU_TILES = module.Tiles(*candidate)
        for (batch, channels, hw), (x, w, b, g, leaves, cudnn) in inputs.items():
            want = F.conv2d(x.float(), w.float(), b.float(), padding=1)
            got = lt.conv2d(x, w, b, padding=1)
            assert torch.allclose(got.float(), want, rtol=1e-2, atol=5e-2), f"{candidate}: wrong forward"
            for leaf in leaves:
                leaf.grad = None
            lt.conv2d(*leaves, padding=1).backward(g)
            reference = [t.detach().float().requires_grad_() for t in leaves]
            F.conv2d(*reference, padding=1).backward(g.float())
            for leaf, ref, name in zip(leaves, reference, ("x", "weight", "bias")):
                scale = ref.grad.abs().max().item()
                error = (leaf.grad.float() - ref.grad).abs().max().item()
                assert error <= 2e-2 * scale, f"{candidate}: grad {name} off by {error:.3g} (of {scale:.3g})"
            fwd = graph_ms(lambda: lt.conv2d(x, w, b, padding=1))
            step = graph_ms(fwd_bwd(lambda *a: lt.conv2d(*a, padding=1), leaves, g))
            row = {"tiles": candidate, "layer": f"{batch}x{channels}x{hw}x{hw}", "fwd_vs_cudnn": cudnn[0] / fwd,
                   "fwd_bwd_vs_cudnn": cudnn[1] / step}
            rows.append(row)
            print(f"| {candidate} | {row['layer']} | {row['fwd_vs_cudnn']:.2f} | {row['fwd_bwd_vs_cudnn']:.2f} |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
