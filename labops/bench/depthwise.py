"""Depthwise 3x3 convolution on the MobileNetV2 shapes (batch 32 on a GPU, 2 on the CPU).

native = F.conv2d(..., groups=C) (cuDNN or ATen's depthwise kernels on CUDA).
Bytes counted: forward reads x and w and writes out; forward+backward also
reads grad_out and writes grad_in and grad_w (each tensor moved once).
"""

import torch
import torch.nn.functional as F

import labops
from labops.bench import Case, fwd_bwd

# (C, H, stride) of MobileNetV2's depthwise layers, 3x3, padding 1, no bias (a BatchNorm follows).
SHAPES = [(144, 56, 1), (384, 14, 1), (960, 7, 1), (96, 112, 2)]


def doctor_cases(randn, generator):
    """(name, labops op, native PyTorch, float64 inputs): what `labops doctor` compares, forward and backward."""
    return [("depthwise_conv2d", lambda t, w, b: labops.depthwise_conv2d(t, w, b, 2, 1, 1),
             lambda t, w, b: F.conv2d(t, w, b, 2, 1, 1, groups=8), [randn(2, 8, 6, 6), randn(16, 1, 3, 3), randn(16)])]


def cases(device, size=None):
    batch = size or (32 if device == "cuda" else 2)
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        for c, h, s in SHAPES:
            gen = torch.Generator(device=device).manual_seed(0)
            x = torch.randn(batch, c, h, h, device=device, dtype=dtype, generator=gen).requires_grad_()
            w = torch.randn(c, 1, 3, 3, device=device, dtype=dtype, generator=gen).requires_grad_()
            out_h = (h + 2 - 3) // s + 1
            g = torch.randn(batch, c, out_h, out_h, device=device, dtype=dtype, generator=gen)
            e = x.element_size()
            x_b, w_b, y_b = x.numel() * e, w.numel() * e, g.numel() * e
            fwd_bytes = x_b + w_b + y_b
            bwd_bytes = y_b + x_b + w_b  # read grad_out, write grad_in and grad_w
            shape = f"{batch}x{c}x{h}x{h} s{s}"

            def mine(a, b, s=s):
                return labops.depthwise_conv2d(a, b, None, s, 1)

            def native(a, b, s=s, c=c):
                return F.conv2d(a, b, None, s, 1, 1, c)

            # What MobileNet users run: channels_last tensors, which cuDNN takes in NHWC kernels.
            x_cl, w_cl = (t.detach().to(memory_format=torch.channels_last).requires_grad_() for t in (x, w))
            g_cl = g.to(memory_format=torch.channels_last)
            cl_name = "cuDNN channels_last" if device == "cuda" else "channels_last"
            macs = 2 * 9 * g.numel()  # 9 multiply-adds per output; grad_in and grad_w as many again each
            with torch.no_grad():
                yield Case("depthwise3x3 fwd", shape, dtype, fwd_bytes,
                           lambda m=mine: m(x.detach(), w.detach()),
                           lambda f=native: f(x.detach(), w.detach()), "F.conv2d(groups=C)", macs,
                           {cl_name: lambda f=native: f(x_cl.detach(), w_cl.detach())})
            yield Case("depthwise3x3 fwd+bwd", shape, dtype, fwd_bytes + bwd_bytes,
                       fwd_bwd(mine, (x, w), g), fwd_bwd(native, (x, w), g), "F.conv2d(groups=C)", 3 * macs,
                       {cl_name: fwd_bwd(native, (x_cl, w_cl), g_cl)})
            if device == "cuda":
                # Both sides on channels_last tensors, which labops keeps (its NHWC kernels).
                with torch.no_grad():
                    yield Case("depthwise3x3 fwd cl", shape, dtype, fwd_bytes,
                               lambda m=mine: m(x_cl.detach(), w_cl.detach()),
                               lambda f=native: f(x_cl.detach(), w_cl.detach()), cl_name, macs)
                yield Case("depthwise3x3 fwd+bwd cl", shape, dtype, fwd_bytes + bwd_bytes,
                           fwd_bwd(mine, (x_cl, w_cl), g_cl), fwd_bwd(native, (x_cl, w_cl), g_cl), cl_name,
                           3 * macs)


# The ladder (labops.ladder, `labops bench --ladder depthwise`): every rung of the forward on the same
# MobileNetV2 layers, plus a 5x5 one (MobileNetV3, EfficientNet) and, on CUDA, the first layer in
# channels_last (rung 2 reads it in place; rungs 1 and 3 read NCHW copies).
# (C, H, stride, kernel, channels_last)
LADDER_SHAPES = [(c, h, s, 3, False) for c, h, s in SHAPES] + [(240, 14, 1, 5, False)]
LADDER_SHAPES_CUDA = LADDER_SHAPES + [(144, 56, 1, 3, True)]


def ladder_cases(device):
    batch = 32 if device == "cuda" else 2
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        for c, h, s, k, cl in LADDER_SHAPES_CUDA if device == "cuda" else LADDER_SHAPES:
            gen = torch.Generator(device=device).manual_seed(0)
            x = torch.randn(batch, c, h, h, device=device, dtype=dtype, generator=gen)
            w = torch.randn(c, 1, k, k, device=device, dtype=dtype, generator=gen)
            if cl:
                x = x.contiguous(memory_format=torch.channels_last)
            pad = k // 2
            out_h = (h + 2 * pad - k) // s + 1
            e = x.element_size()
            nbytes = (x.numel() + w.numel() + batch * c * out_h * out_h) * e
            macs = 2 * k * k * batch * c * out_h * out_h
            yield Case(f"depthwise{k}x{k} fwd", f"{batch}x{c}x{h}x{h} s{s}" + (" cl" if cl else ""), dtype, nbytes,
                       lambda x=x, w=w, s=s, pad=pad: labops.depthwise_conv2d(x, w, None, s, pad),
                       lambda x=x, w=w, s=s, pad=pad, c=c: F.conv2d(x, w, None, s, pad, 1, c),
                       "F.conv2d(groups=C)" + (" channels_last" if cl else ""), macs)
