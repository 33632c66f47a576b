"""Which block labops.triton.gelu should use on a GPU: elements a program and warps, swept in one run.

For each (GPU_BLOCK, GPU_WARPS) it checks the forward and backward against F.gelu, then times both on 2^26
elements in float32 and float16 (GPU time from CUDA graphs, labops.bench.graph_ms), as % of a plain copy's
bandwidth measured in the same run (the forward moves 2 bytes an element of each dtype's size, fwd+bwd 5).

Usage: PYTHONPATH=. python tools/triton_gelu_blocks.py [--json out.json]
"""

import argparse
import importlib
import json

CANDIDATES = [(1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 8)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    import labops.triton as lt
    from labops.bench import fwd_bwd, graph_ms

    if not torch.cuda.is_available():
        raise SystemExit("tools/triton_gelu_blocks.py needs a CUDA GPU")
    module = importlib.import_module("labops.triton.gelu")  # labops.triton.gelu is the function
    n = 2 ** 26
    rows = []
    print("| block, warps | dtype | fwd % copy | fwd+bwd % copy |\n|---|---|---|---|")
    for dtype in (torch.float32, torch.float16):
        x = (torch.randn(n, generator=torch.Generator().manual_seed(0)) * 3).to("cuda", dtype)
        g = torch.randn_like(x)
        y = torch.empty_like(x)
        copy = graph_ms(lambda: y.copy_(x))
        xg = x.detach().requires_grad_()
        for block, warps in CANDIDATES:
            module.GPU_BLOCK, module.GPU_WARPS = block, warps
            assert torch.allclose(lt.gelu(x).float(), F.gelu(x.float()), rtol=1e-2, atol=1e-2), (block, warps)
            fwd = graph_ms(lambda: lt.gelu(x))
            step = graph_ms(fwd_bwd(lt.gelu, (xg,), g))
            row = {"block": block, "warps": warps, "dtype": str(dtype)[6:], "fwd_pct_copy": 100 * copy / fwd,
                   "fwd_bwd_pct_copy": 100 * 2.5 * copy / step}
            rows.append(row)
            print(f"| {block}, {warps} | {row['dtype']} | {row['fwd_pct_copy']:.0f} | {row['fwd_bwd_pct_copy']:.0f} |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
