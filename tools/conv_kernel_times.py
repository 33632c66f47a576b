"""Where a convolution's GPU time goes, kernel by kernel: torch.profiler over CUDA-graph-free eager calls of
labops.conv2d_mm and F.conv2d (cuDNN) on ResNet-18's 3x3 layers, forward and fwd+bwd, NCHW inputs (or,
with --channels-last, x, the weight and grad_output channels_last, as a model moved to channels_last has them).

    python tools/conv_kernel_times.py [--batch 32] [--dtype float16] [--channels-last]

Prints, per layer and pass, each kernel's GPU time per call (microseconds) for labops and for cuDNN.
"""

import argparse
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import labops

RESNET = [(64, 56), (128, 28), (256, 14), (512, 7)]


def kernel_times(step, calls=10):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    times = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name[:90]] += event.device_time / calls
    return sorted(times.items(), key=lambda kv: -kv[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--channels-last", action="store_true", help="x, the weight and grad_output channels_last")
    args = ap.parse_args()
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    torch.backends.cudnn.benchmark = True
    dtype = getattr(torch, args.dtype)
    for channels, hw in RESNET:
        x = torch.randn(args.batch, channels, hw, hw, device="cuda", dtype=dtype)
        x = x.contiguous(memory_format=layout).requires_grad_()
        w = torch.randn(channels, channels, 3, 3, device="cuda", dtype=dtype) / (channels * 9) ** 0.5
        w = w.contiguous(memory_format=layout).requires_grad_()
        b = torch.randn(channels, device="cuda", dtype=dtype, requires_grad=True)
        g = torch.randn(args.batch, channels, hw, hw, device="cuda", dtype=dtype).contiguous(memory_format=layout)
        for name, conv in (("labops", lambda: labops.conv2d_mm(x, w, b, 1, 1, 1)),
                           ("cuDNN", lambda: F.conv2d(x, w, b, 1, 1))):
            for what, step in (("fwd", lambda: conv().detach()),
                               ("fwd+bwd", lambda: torch.autograd.grad(conv(), (x, w, b), g))):
                rows = kernel_times(step)
                total = sum(t for _, t in rows)
                print(f"### {args.batch}x{channels}x{hw}x{hw} {args.dtype}{' channels_last' * args.channels_last} "
                      f"{what} {name}: {total:.1f} us of kernels")
                for kernel, t in rows[:8]:
                    print(f"  {t:8.1f}  {kernel}")


if __name__ == "__main__":
    main()
