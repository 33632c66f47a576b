"""im2col / col2im / conv2d_mm against F.unfold / F.fold, unfold + matmul,
and F.conv2d (cuDNN on a GPU, oneDNN on the CPU).

GPU layers (3x3, padding 1): 32x128x28x28 -> 128, 32x64x56x56 -> 64,
32x256x14x14 -> 256, float32 and float16. The CPU runs 4 images of each.

nbytes: im2col reads x and writes the columns; col2im reads the columns and
writes the image; the conv rows count x, weight, bias and output once (and
their gradients for fwd+bwd), so "% copy" there only says how far the layer
is from memory-bound: the speedup column is what matters.
"""

import torch
import torch.nn.functional as F

import labops
from labops.bench import Case, fwd_bwd

LAYERS = [(128, 28), (64, 56), (256, 14)]  # (channels in = out, height = width)
KERNEL, PAD = 3, 1


def _unfold_matmul(x, w, b):
    """The obvious PyTorch im2col convolution: F.unfold, then one matmul."""
    n, o = x.shape[0], w.shape[0]
    cols = F.unfold(x, KERNEL, padding=PAD)
    out = w.view(o, -1) @ cols + b.view(1, o, 1)
    return out.view(n, o, x.shape[2], x.shape[3])


def _labops_conv(x, w, b):
    return labops.conv2d_mm(x, w, b, padding=PAD)


def _cudnn_conv(x, w, b):
    return F.conv2d(x, w, b, padding=PAD)


def _precision(step, fp32_precision):
    """``step`` with cuDNN's float32 convolutions, and labops's tensor_cores rung, in ``fp32_precision``:
    "ieee" (full float32) or "tf32" (10 bits of mantissa: PyTorch's default for convolutions, while float32
    matmuls, and so labops's cuBLAS GEMMs, stay in full float32)."""
    def run():
        before = torch.backends.cudnn.conv.fp32_precision
        torch.backends.cudnn.conv.fp32_precision = fp32_precision
        try:
            return step()
        finally:
            torch.backends.cudnn.conv.fp32_precision = before

    return run


def _ieee(step):
    """``step`` with float32 convolutions in full float32 (_precision)."""
    return _precision(step, "ieee")


def doctor_cases(randn, generator):
    """(name, labops op, native PyTorch, float64 inputs): what `labops doctor` compares, forward and backward."""
    x = randn(2, 8, 6, 6)
    return [
        ("conv2d_mm", lambda t, w, b: labops.conv2d_mm(t, w, b, 1, 1, 2),
         lambda t, w, b: F.conv2d(t, w, b, 1, 1, 2), [x, randn(4, 8, 3, 3), randn(4)]),
        ("im2col", lambda t: labops.im2col(t, 3, 2, 1), lambda t: F.unfold(t, 3, padding=1, stride=2), [x]),
        ("col2im", lambda t: labops.col2im(t, (6, 6), 3, 2, 1),
         lambda t: F.fold(t, (6, 6), 3, padding=1, stride=2), [randn(2, 72, 9)]),
    ]


def cases(device, size=None):
    batch = size or (32 if device == "cuda" else 4)
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    conv_name = "F.conv2d (cuDNN)" if device == "cuda" else "F.conv2d"
    for dtype in dtypes:
        for channels, hw in LAYERS:
            gen = torch.Generator().manual_seed(0)

            def randn(*shape):
                return torch.randn(*shape, generator=gen).to(device, dtype)

            x = randn(batch, channels, hw, hw)
            w = randn(channels, channels, KERNEL, KERNEL) / (channels * KERNEL * KERNEL) ** 0.5
            b = randn(channels)
            g = randn(batch, channels, hw, hw)
            cols = F.unfold(x, KERNEL, padding=PAD)
            e = x.element_size()
            shape = f"{batch}x{channels}x{hw}x{hw}"

            def same_precision(step, dtype=dtype):  # cuDNN in float32 without TF32, beside the default
                tf32_matters = device == "cuda" and dtype == torch.float32
                return {"cuDNN, no TF32": _ieee(step)} if tf32_matters else {}
            unfold_bytes = (x.numel() + cols.numel()) * e
            yield Case("im2col", f"{shape} k3 p1", dtype, unfold_bytes,
                       lambda: labops.im2col(x, KERNEL, padding=PAD),
                       lambda: F.unfold(x, KERNEL, padding=PAD), "F.unfold")
            yield Case("col2im", f"{shape} k3 p1", dtype, unfold_bytes,
                       lambda: labops.col2im(cols, (hw, hw), KERNEL, padding=PAD),
                       lambda: F.fold(cols, (hw, hw), KERNEL, padding=PAD), "F.fold", cols.numel())
            # 2 * outputs * C * k * k for the GEMM, one add per output for the bias; the backward
            # has two GEMMs as large (grad_input, grad_weight) and a sum for grad_bias.
            conv_flops = 2 * g.numel() * channels * KERNEL * KERNEL + g.numel()
            params = (x.numel() + w.numel() + b.numel() + g.numel()) * e  # x, w, b read; out written
            conv_shape = f"{shape} -> {channels} k3 p1"
            yield Case("conv2d_mm fwd", conv_shape, dtype, params,
                       lambda: _labops_conv(x, w, b), lambda: _unfold_matmul(x, w, b), "F.unfold+matmul", conv_flops)
            yield Case("conv2d_mm fwd", conv_shape, dtype, params,
                       lambda: _labops_conv(x, w, b), lambda: _cudnn_conv(x, w, b), conv_name, conv_flops,
                       same_precision(lambda: _cudnn_conv(x, w, b)))
            xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))
            # fwd+bwd: also read g and write dx, dw, db.
            both = 2 * params + g.numel() * e
            yield Case("conv2d_mm fwd+bwd", conv_shape, dtype, both,
                       fwd_bwd(_labops_conv, (xg, wg, bg), g), fwd_bwd(_unfold_matmul, (xg, wg, bg), g),
                       "F.unfold+matmul", 3 * conv_flops)
            yield Case("conv2d_mm fwd+bwd", conv_shape, dtype, both,
                       fwd_bwd(_labops_conv, (xg, wg, bg), g), fwd_bwd(_cudnn_conv, (xg, wg, bg), g), conv_name,
                       3 * conv_flops, same_precision(fwd_bwd(_cudnn_conv, (xg, wg, bg), g)))


# The ladder (labops.ladder, `labops bench --ladder conv2d_mm`): every rung of the forward on the suite's three
# layers, against F.conv2d at labops's precision (cuDNN on a GPU, float32 without TF32; oneDNN on the CPU).
# Compute-bound: measured against the matmul peak of each dtype (LADDER_ROOF), not the copy bandwidth.
# On the CPU 4 images of float32; on CUDA 32 images of float32 and float16.
LADDER_ROOF = "flops"


def ladder_cases(device):
    """On CUDA each row is one precision, for every rung and for cuDNN alike: float32 in full float32 (the
    tensor_cores rung refuses it), float32 as TF32 (its math "tf32": the rungs without tensor cores still
    run full float32), float16 and bfloat16."""
    batch = 32 if device == "cuda" else 4
    rows = [(torch.float32, "ieee")]
    if device == "cuda":
        rows += [(torch.float32, "tf32"), (torch.float16, ""), (torch.bfloat16, "")]
    for dtype, math in rows:
        for channels, hw in LAYERS:
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(batch, channels, hw, hw, generator=gen).to(device, dtype)
            w = (torch.randn(channels, channels, KERNEL, KERNEL, generator=gen) / (channels * KERNEL * KERNEL) ** 0.5
                 ).to(device, dtype)
            b = torch.randn(channels, generator=gen).to(device, dtype)
            outputs = x.numel()  # channels in = out, padding 1: the output has x's shape
            flops = 2 * outputs * channels * KERNEL * KERNEL + outputs  # the GEMM's multiply-adds, and the bias
            nbytes = (2 * x.numel() + w.numel() + b.numel()) * x.element_size()  # x, w, b read; out written
            labops_step = lambda x=x, w=w, b=b: _labops_conv(x, w, b)  # noqa: E731
            native = lambda x=x, w=w, b=b: _cudnn_conv(x, w, b)  # noqa: E731
            conv_name = "F.conv2d"
            if device == "cuda":
                names = {"ieee": "F.conv2d (cuDNN, no TF32)", "tf32": "F.conv2d (cuDNN, TF32)"}
                conv_name = names.get(math, "F.conv2d (cuDNN)")
                if dtype == torch.float32:
                    labops_step, native = _precision(labops_step, math), _precision(native, math)
            yield Case("conv2d_mm fwd", f"{batch}x{channels}x{hw}x{hw} -> {channels} k3 p1", dtype, nbytes,
                       labops_step, native, conv_name, flops, math=math if math == "tf32" else "")
