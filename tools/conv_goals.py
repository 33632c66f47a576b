"""Issue #33's goal table on a GPU: labops.conv2d_mm against cuDNN on ResNet-18's 3x3 layers and the
capstone's, forward and fwd+bwd, at one precision per row for both (float16, bfloat16, float32 as TF32,
float32 in full), cuDNN given NCHW and channels_last. GPU time from CUDA-graph replays (no host time).

    python tools/conv_goals.py [--batches 32 128] [--json out.json]

Each row: labops's rung that ran, then ratios (cuDNN's time / labops's: above 1 labops is faster): labops
and cuDNN both given NCHW tensors, labops given NCHW against cuDNN given channels_last, and both given
channels_last (labops then writes channels_last outputs too, as cuDNN does); and labops's TFLOP/s (NCHW).
"""

import argparse
import json

import torch
import torch.nn.functional as F

import labops
from labops import ladder
from labops.bench import fwd_bwd, graph_ms
from labops.bench.conv2d_mm import _precision as with_precision

# (C in = C out, H = W): ResNet-18's 3x3 stages; the capstone's layers (labops/capstone.py) are added below.
RESNET = [(64, 56), (128, 28), (256, 14), (512, 7)]
PRECISIONS = {"float16": (torch.float16, "ieee"), "bfloat16": (torch.bfloat16, "ieee"),
              "tf32": (torch.float32, "tf32"), "float32": (torch.float32, "ieee")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    ap.add_argument("--backward", action="store_true", help="also fwd+bwd")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest algorithm for each shape
    rows = []
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print("| layer | precision | pass | labops rung | NCHW: cuDNN / labops | cuDNN channels_last / labops NCHW | "
          "channels_last: cuDNN / labops | labops TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for batch in args.batches:
        for channels, hw in RESNET:
            for name in args.precisions:
                dtype, fp32 = PRECISIONS[name]
                gen = torch.Generator().manual_seed(0)
                x = torch.randn(batch, channels, hw, hw, generator=gen).to("cuda", dtype)
                w = (torch.randn(channels, channels, 3, 3, generator=gen) / (channels * 9) ** 0.5).to("cuda", dtype)
                b = torch.randn(channels, generator=gen).to("cuda", dtype)
                xl = x.contiguous(memory_format=torch.channels_last)
                wl = w.contiguous(memory_format=torch.channels_last)
                flops = 2 * x.numel() * channels * 9
                passes = [("fwd", lambda: labops.conv2d_mm(x, w, b, 1, 1, 1), lambda: F.conv2d(x, w, b, 1, 1),
                           lambda: F.conv2d(xl, wl, b, 1, 1), lambda: labops.conv2d_mm(xl, wl, b, 1, 1, 1), flops)]
                if args.backward:
                    g = torch.randn_like(x)
                    xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))
                    xlg, wlg = (t.detach().requires_grad_() for t in (xl, wl))
                    conv = lambda t, k, c: F.conv2d(t, k, c, 1, 1)  # noqa: E731
                    mine = lambda t, k, c: labops.conv2d_mm(t, k, c, 1, 1, 1)  # noqa: E731
                    gl = g.contiguous(memory_format=torch.channels_last)
                    passes.append(("fwd+bwd", fwd_bwd(mine, (xg, wg, bg), g),
                                   fwd_bwd(conv, (xg, wg, bg), g),
                                   fwd_bwd(conv, (xlg, wlg, bg), gl),
                                   fwd_bwd(mine, (xlg, wlg, bg), gl),
                                   3 * flops))
                for what, mine, nchw, nhwc, mine_nhwc, work in passes:
                    mine, nchw, nhwc, mine_nhwc = (with_precision(f, fp32) for f in (mine, nchw, nhwc, mine_nhwc))
                    mine()
                    rung = ladder.rungs("conv2d_mm", "cuda")[ladder.last_rung("conv2d_mm") - 1]
                    t_mine, t_nchw, t_nhwc = graph_ms(mine), graph_ms(nchw), graph_ms(nhwc)
                    t_mine_nhwc = graph_ms(mine_nhwc)
                    row = {"batch": batch, "channels": channels, "hw": hw, "precision": name, "pass": what,
                           "rung": rung, "labops_ms": t_mine, "cudnn_nchw_ms": t_nchw, "cudnn_nhwc_ms": t_nhwc,
                           "labops_nhwc_ms": t_mine_nhwc, "labops_tflops": work / (t_mine * 1e-3) / 1e12}
                    rows.append(row)
                    print(f"| {batch}x{channels}x{hw}x{hw} | {name} | {what} | {rung} | {t_nchw / t_mine:.2f} | "
                          f"{t_nhwc / t_mine:.2f} | {t_nhwc / t_mine_nhwc:.2f} | {row['labops_tflops']:.0f} |",
                          flush=True)
                del x, w, b, xl, wl
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
