"""Nsight Compute's view of conv2d_mm's default CUDA forward and of cuDNN's on one layer, issue #33's
"where the time goes": run under ncu with --profile-from-start off (tools/conv_profile.sh). labops gets NCHW
tensors, or with a fifth argument `channels_last` the channels_last ones cuDNN gets.

    python tools/conv_profile.py 32 128 28 float16 [channels_last]
"""

import sys

import torch
import torch.nn.functional as F

import labops

batch, channels, hw, dtype = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), getattr(torch, sys.argv[4])
x = torch.randn(batch, channels, hw, hw, device="cuda", dtype=dtype)
w = torch.randn(channels, channels, 3, 3, device="cuda", dtype=dtype) / (9 * channels) ** 0.5
b = torch.randn(channels, device="cuda", dtype=dtype)
xl, wl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
if sys.argv[5:] == ["channels_last"]:
    x, w = xl, wl
torch.backends.cudnn.benchmark = True
for _ in range(3):  # warm up: the build, cuDNN's algorithm search
    labops.conv2d_mm(x, w, b, 1, 1, 1)
    F.conv2d(xl, wl, b, 1, 1)
torch.cuda.synchronize()
torch.cuda.profiler.start()
labops.conv2d_mm(x, w, b, 1, 1, 1)
F.conv2d(xl, wl, b, 1, 1)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
