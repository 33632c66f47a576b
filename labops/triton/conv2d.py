"""2-D convolution in Triton as an implicit GEMM: im2col's columns matrix, never written out.

``labops.conv2d_mm`` (THNN's SpatialConvolutionMM) builds the columns matrix in memory, one column of
``C * kH * kW`` values per output pixel, then multiplies it by the weight. Here the same product is
tiled as in Triton's tutorial 03-matrix-multiplication:

    out[m, f] = sum over r of  columns[m, r] * weight[f, r]

with m = (n, oh, ow) an output pixel (M = N * Hout * Wout rows), f a filter, r = (c, kh, kw) a tap
(R = C * kH * kW). A program owns a BLOCK_M x BLOCK_N tile of out and walks r in steps of BLOCK_K;
each step *loads* its tile of columns straight from x, ``columns[m, r] = x[n, c, ih, iw]`` with
``ih = oh * stride - padding + kh * dilation``, and the mask turns the taps that fall in the padding
into zeros: im2col done in registers (``columns_tile``).

The backward is two more implicit GEMMs, each program owning its output tile (no atomics, so the
result does not depend on the order programs run in):

    grad_weight[f, r] = sum over m of grad[m, f] * columns[m, r]   (the same columns tiles)
    grad_x[p, c]      = sum over (f, kh, kw) of grad[n, f, oh, ow] * weight[f, c, kh, kw]

where p = (n, ih, iw) is an input pixel and (oh, ow) the output pixel that tap (kh, kw) reaches from it,
``oh = (ih + padding - kh * dilation) / stride`` when that divides evenly (a gather: where col2im
would scatter and sum the overlaps, each input pixel sums its own). grad_weight's sum over m is long
and its output small, so on a GPU it is split over several programs (split-K), each writing its own
partial sums, which are then added in one fixed order. grad_bias is ``grad.sum((0, 2, 3))``.

Example:
    >>> import torch, torch.nn.functional as F
    >>> from labops.triton import conv2d
    >>> x, w, b = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
    >>> y = conv2d(x, w, b, padding=1)
    >>> y.shape
    torch.Size([2, 4, 8, 8])
    >>> torch.allclose(y, F.conv2d(x, w, b, padding=1), atol=1e-4)
    True
"""

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .._checks import check_floating, check_tensor, conv_output_size, pair, shape_str
from ._launch import kernel

__all__ = ["conv2d"]


# ---- the kernels ------------------------------------------------------------------------------------------------

@triton.jit  # a device function: compiled kernels inline it; interpreted ones call it (_launch.py)
def columns_tile(x_ptr, m, r, M, R, C, H, W, Hout, Wout, kH, kW, sh, sw, ph, pw, dh, dw):
    """The [len(m), len(r)] tile of the virtual columns matrix, columns[m, r] = x[n, c, ih, iw]: 0 in the
    padding and past the matrix's M rows and R columns (the last tiles overhang)."""
    n = m // (Hout * Wout)  # output pixel m = (n, oh, ow)
    oh = (m // Wout) % Hout
    ow = m % Wout
    c = r // (kH * kW)  # tap r = (c, kh, kw)
    kh = (r // kW) % kH
    kw = r % kW
    ih = oh[:, None] * sh - ph + kh[None, :] * dh  # [len(m), len(r)]
    iw = ow[:, None] * sw - pw + kw[None, :] * dw
    inside = (m[:, None] < M) & (r[None, :] < R) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    return tl.load(x_ptr + ((n[:, None] * C + c[None, :]) * H + ih) * W + iw, mask=inside, other=0.0)


@kernel
def conv2d_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, C, H, W, F, Hout, Wout, kH, kW, sh, sw, ph, pw, dh, dw,
                  HAS_BIAS: tl.constexpr, DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # This program's tile: output pixels m (rows), filters f (columns). 64-bit: N * F * Hout * Wout may pass 2**31.
    m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    f = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    M = N * Hout * Wout
    R = C * kH * kW
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    for r0 in range(0, R, BLOCK_K):
        r = r0 + tl.arange(0, BLOCK_K)
        a = columns_tile(x_ptr, m, r, M, R, C, H, W, Hout, Wout, kH, kW, sh, sw, ph, pw, dh, dw)  # [BLOCK_M, BLOCK_K]
        # weight (F, C, kH, kW) is the matrix (F, R): its transposed tile [BLOCK_K, BLOCK_N].
        b = tl.load(w_ptr + f[None, :] * R + r[:, None], mask=(r[:, None] < R) & (f[None, :] < F), other=0.0)
        acc = tl.dot(a.to(DOT), b.to(DOT), acc, input_precision=PRECISION, out_dtype=ACC)
    if HAS_BIAS:
        acc += tl.load(b_ptr + f, mask=f < F, other=0.0).to(ACC)[None, :]
    # out is NCHW: pixel m = (n, pixel of the image) of filter f sits at (n * F + f) * Hout * Wout + pixel.
    n = m // (Hout * Wout)
    pixel = m % (Hout * Wout)
    out = out_ptr + (n[:, None] * F + f[None, :]) * (Hout * Wout) + pixel[:, None]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(m[:, None] < M) & (f[None, :] < F))


@kernel
def conv2d_grad_weight_kernel(g_ptr, x_ptr, partial_ptr, N, C, H, W, F, Hout, Wout, kH, kW, sh, sw, ph, pw, dh, dw,
                              M_PER_SPLIT, DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # This program's tile of grad_weight as the matrix (F, R): filters f (rows), taps r (columns), summed over
    # its own share of the output pixels m (split-K: F * R is small, M large, and one program per tile would
    # leave most of the GPU idle). Each split writes its partial sums to its own slice of partial_ptr; the
    # launcher adds the slices in a fixed order. No atomics: the result does not depend on which program ran first.
    f = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    r = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(2)
    M = N * Hout * Wout
    R = C * kH * kW
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    m_start = split * M_PER_SPLIT
    for m0 in range(m_start, tl.minimum(m_start + M_PER_SPLIT, M), BLOCK_K):
        m = m0 + tl.arange(0, BLOCK_K)
        n = m // (Hout * Wout)
        pixel = m % (Hout * Wout)
        # grad (N, F, Hout, Wout) is the matrix (M, F) of the forward's out: its transposed tile [BLOCK_M, BLOCK_K].
        g = tl.load(g_ptr + (n[None, :] * F + f[:, None]) * (Hout * Wout) + pixel[None, :],
                    mask=(f[:, None] < F) & (m[None, :] < M), other=0.0)
        a = columns_tile(x_ptr, m, r, M, R, C, H, W, Hout, Wout, kH, kW, sh, sw, ph, pw, dh, dw)  # [BLOCK_K, BLOCK_N]
        acc = tl.dot(g.to(DOT), a.to(DOT), acc, input_precision=PRECISION, out_dtype=ACC)
    out = partial_ptr + (split * F + f[:, None]) * R + r[None, :]
    tl.store(out, acc, mask=(f[:, None] < F) & (r[None, :] < R))


@kernel
def conv2d_grad_input_kernel(g_ptr, w_ptr, gx_ptr, N, C, H, W, F, Hout, Wout, kH, kW, sh, sw, ph, pw, dh, dw,
                             DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # This program's tile of grad_x as the matrix (N * H * W, C): input pixels p (rows), channels c (columns).
    # It sums over q = (f, kh, kw): every filter and tap that reads x[n, c, ih, iw].
    p = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    P = N * H * W
    Q = F * kH * kW
    n = p // (H * W)  # input pixel p = (n, ih, iw)
    ih = (p // W) % H
    iw = p % W
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    for q0 in range(0, Q, BLOCK_K):
        q = q0 + tl.arange(0, BLOCK_K)
        f = q // (kH * kW)  # q = (f, kh, kw)
        kh = (q // kW) % kH
        kw = q % kW
        # The output pixel whose tap (kh, kw) lands on (ih, iw): ih = oh * stride - padding + kh * dilation.
        oh_strided = ih[:, None] + ph - kh[None, :] * dh  # [BLOCK_M, BLOCK_K]
        ow_strided = iw[:, None] + pw - kw[None, :] * dw
        oh = oh_strided // sh
        ow = ow_strided // sw
        # Taps that land between strides reach no output pixel. (`>= 0` first: // and % of a negative number
        # round differently compiled (toward 0) and interpreted (NumPy, toward -inf); the mask drops them.)
        reached = ((oh_strided >= 0) & (oh_strided % sh == 0) & (oh < Hout)
                   & (ow_strided >= 0) & (ow_strided % sw == 0) & (ow < Wout)
                   & (p[:, None] < P) & (q[None, :] < Q))
        g = tl.load(g_ptr + ((n[:, None] * F + f[None, :]) * Hout + oh) * Wout + ow, mask=reached, other=0.0)
        # weight[f, c, kh, kw] as the matrix (Q, C): its tile [BLOCK_K, BLOCK_N].
        b = tl.load(w_ptr + (f[:, None] * C + c[None, :]) * (kH * kW) + (kh * kW + kw)[:, None],
                    mask=(q[:, None] < Q) & (c[None, :] < C), other=0.0)
        acc = tl.dot(g.to(DOT), b.to(DOT), acc, input_precision=PRECISION, out_dtype=ACC)
    out = gx_ptr + ((n[:, None] * C + c[None, :]) * H + ih[:, None]) * W + iw[:, None]
    tl.store(out, acc.to(gx_ptr.dtype.element_ty), mask=(p[:, None] < P) & (c[None, :] < C))


# ---- the launcher ---------------------------------------------------------------------------------------------

class Tiles(NamedTuple):
    """A program's tile: block_m x block_n outputs, block_k of the reduction a step (tl.dot needs 16 or more on a
    GPU), and on a GPU its warps and the depth of its software pipeline (loads in flight, num_stages)."""
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 2


# The interpreter's tiles: small enough that a small test's programs stay cheap in NumPy.
CPU_TILES = Tiles(64, 64, 32)
# A GPU's, one choice for every shape and dtype (tutorial 03 autotunes per shape; a fixed tile keeps the order
# of every sum, so the bits, the same on every run): the fastest of tools/triton_tune.py conv's sweep on the
# 28 x 28 and 14 x 14 layers, a little slower than 64 x 64 tiles on 56 x 56 (docs/benchmarks/triton/conv_tiles_h100.md).
GPU_TILES = Tiles(128, 128, 32, num_warps=8, num_stages=3)


def tiles(t: torch.Tensor) -> Tiles:
    return GPU_TILES if t.is_cuda else CPU_TILES


def _tf32_allowed():
    """Whether torch lets float32 convolutions use TF32: cuDNN's conv setting, or where it is "none" the
    one it inherits, as labops/ops/conv2d_mm.py's _tf32_convolutions (and ATen's allowTF32CuDNN) read it."""
    for setting in (torch.backends.cudnn.conv, torch.backends.cudnn, torch.backends):
        if setting.fp32_precision != "none":
            return setting.fp32_precision == "tf32"
    return False


def _dtypes(t):
    """(DOT, ACC, PRECISION): what tl.dot multiplies, what it accumulates in, and its float32 precision.

    float16 and bfloat16 multiply as themselves into float32; float64 in float64. float32 takes TF32 (tl.dot's
    default: 10-bit mantissas, tensor cores) only on CUDA and only where torch allows it for convolutions, as
    cuDNN would (``_tf32_allowed``); else "ieee", full float32. On the CPU bfloat16 multiplies as float32: the
    interpreter's tl.dot is NumPy's matmul, and NumPy has no bfloat16.
    """
    if t.dtype == torch.float64:
        return tl.float64, tl.float64, "ieee"
    if t.dtype == torch.float32:
        return tl.float32, tl.float32, "tf32" if t.is_cuda and _tf32_allowed() else "ieee"
    if t.dtype == torch.bfloat16 and not t.is_cuda:
        return tl.float32, tl.float32, "ieee"
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}[t.dtype], tl.float32, "ieee"


def _launch(kernel_, grid_rows, grid_cols, a, b, c, out, x_shape, weight_shape, out_hw, stride, padding,
            dilation, splits=1, **extra):
    """A grid of tiles (tiles(a)) over a (grid_rows, grid_cols) matrix, times `splits`; sizes as ints."""
    if out.numel() == 0:
        return out
    (N, C, H, W), (F, _, kH, kW) = x_shape, weight_shape
    DOT, ACC, PRECISION = _dtypes(a)
    t = tiles(a)
    args = (a, b) if c is None else (a, b, c)
    kernel_[(triton.cdiv(grid_rows, t.block_m), triton.cdiv(grid_cols, t.block_n), splits)](
        *args, out, N, C, H, W, F, *out_hw, kH, kW, *stride, *padding, *dilation, **extra,
        DOT=DOT, ACC=ACC, PRECISION=PRECISION, BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k,
        num_warps=t.num_warps, num_stages=t.num_stages)
    return out


def _weight_grad_splits(x, tile_count, M):
    """How many slices of the M output pixels grad_weight's programs share: on a GPU enough for about four
    programs per multiprocessor, each at least 8 steps of BLOCK_K; on the CPU one (the interpreter runs the
    programs one after another: splitting only adds work)."""
    if not x.is_cuda:
        return 1
    programs = 4 * torch.cuda.get_device_properties(x.device).multi_processor_count
    return max(1, min(triton.cdiv(programs, tile_count), M // (8 * tiles(x).block_k)))


# ---- the ops: checks (stated once, for the ops and their fakes), registration, autograd -------------------------

OP = "triton.conv2d"


def _check(x, weight, bias, stride, padding, dilation, grad=None):
    """Every rule of the forward (and, given grad, of the backward ops); returns the output's (Hout, Wout)."""
    check_floating(x, OP, "x")
    check_floating(weight, OP, "weight")
    if x.device.type not in ("cpu", "cuda", "meta"):  # meta: shapes only (fakes)
        raise ValueError(f"labops.{OP}: x must be on the CPU or a CUDA device, got {x.device.type}")
    if x.dim() != 4:
        raise ValueError(f"labops.{OP}: x must be 4-D (N, C, H, W), got {shape_str(x.shape)}")
    if weight.dim() != 4:
        raise ValueError(f"labops.{OP}: weight must be 4-D (out_channels, C, kH, kW), got {shape_str(weight.shape)}")
    if weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(f"labops.{OP}: weight must have x's dtype and device, got {weight.dtype} on {weight.device} "
                         f"for x's {x.dtype} on {x.device}")
    if weight.shape[1] != x.shape[1]:
        raise ValueError(f"labops.{OP}: weight's dim 1 must be x's channels {x.shape[1]} (groups=1), got "
                         f"{shape_str(weight.shape)}")
    if bias is not None:
        check_tensor(bias, OP, "bias")
        if bias.shape != (weight.shape[0],) or bias.dtype != x.dtype or bias.device != x.device:
            raise ValueError(f"labops.{OP}: bias must be ({weight.shape[0]},) of x's dtype and device, got "
                             f"{shape_str(bias.shape)} {bias.dtype} on {bias.device}")
    for name, value, least in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1)):
        pair(value, OP, name, min=least)  # [h, w] ints, each >= least (the op may be called without the face)
    out_hw = [conv_output_size(x.shape[2 + i], weight.shape[2 + i], stride[i], padding[i], dilation[i])
              for i in range(2)]
    if min(out_hw) < 1:
        raise ValueError(f"labops.{OP}: the dilated kernel {shape_str(weight.shape[2:])} (dilation "
                         f"{shape_str(dilation)}) does not fit x's padded image {shape_str(x.shape[2:])} "
                         f"(padding {shape_str(padding)})")
    if grad is not None:
        check_tensor(grad, OP, "grad")
        expected = (x.shape[0], weight.shape[0], *out_hw)
        if grad.shape != expected or grad.dtype != x.dtype or grad.device != x.device:
            raise ValueError(f"labops.{OP}: grad must be the output's {shape_str(expected)} of x's dtype and device, "
                             f"got {shape_str(grad.shape)} {grad.dtype} on {grad.device}")
    return out_hw


@torch.library.custom_op("labops_triton::conv2d", mutates_args=())
def _conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
            padding: list[int], dilation: list[int]) -> torch.Tensor:
    out_hw = _check(x, weight, bias, stride, padding, dilation)
    x, weight = x.contiguous(), weight.contiguous()
    out = x.new_empty(x.shape[0], weight.shape[0], *out_hw)
    M = x.shape[0] * out_hw[0] * out_hw[1]
    return _launch(conv2d_kernel, M, weight.shape[0], x, weight, x if bias is None else bias.contiguous(), out,
                   x.shape, weight.shape, out_hw, stride, padding, dilation, HAS_BIAS=bias is not None)


@_conv2d.register_fake
def _(x, weight, bias, stride, padding, dilation):
    out_hw = _check(x, weight, bias, stride, padding, dilation)
    return x.new_empty(x.shape[0], weight.shape[0], *out_hw)


@torch.library.custom_op("labops_triton::conv2d_grad_input", mutates_args=())
def _conv2d_grad_input(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, stride: list[int],
                       padding: list[int], dilation: list[int]) -> torch.Tensor:
    out_hw = _check(x, weight, None, stride, padding, dilation, grad)
    grad, weight = grad.contiguous(), weight.contiguous()
    grad_x = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # x itself only gives the sizes
    N, C, H, W = x.shape
    return _launch(conv2d_grad_input_kernel, N * H * W, C, grad, weight, None, grad_x, x.shape, weight.shape,
                   out_hw, stride, padding, dilation)


@_conv2d_grad_input.register_fake
def _(grad, x, weight, stride, padding, dilation):
    _check(x, weight, None, stride, padding, dilation, grad)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op("labops_triton::conv2d_grad_weight", mutates_args=())
def _conv2d_grad_weight(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, stride: list[int],
                        padding: list[int], dilation: list[int]) -> torch.Tensor:
    out_hw = _check(x, weight, None, stride, padding, dilation, grad)
    grad, x = grad.contiguous(), x.contiguous()
    F, C, kH, kW = weight.shape
    M, R = x.shape[0] * out_hw[0] * out_hw[1], C * kH * kW
    t = tiles(x)
    splits = _weight_grad_splits(x, triton.cdiv(F, t.block_m) * triton.cdiv(R, t.block_n), M)
    m_per_split = triton.cdiv(triton.cdiv(M, splits), t.block_k) * t.block_k  # whole steps of BLOCK_K each
    splits = triton.cdiv(M, m_per_split) if M else 1  # no split left empty (M = 0: one, of zeros)
    partial = torch.zeros(splits, F, R, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32,
                          device=x.device)  # zeros: with M = 0 the loop never runs, and the tiles must still be 0
    _launch(conv2d_grad_weight_kernel, F, R, grad, x, None, partial, x.shape, weight.shape, out_hw, stride,
            padding, dilation, splits=splits, M_PER_SPLIT=m_per_split)
    return partial.sum(0).to(weight.dtype).view(weight.shape)  # the splits added in one fixed order


@_conv2d_grad_weight.register_fake
def _(grad, x, weight, stride, padding, dilation):
    _check(x, weight, None, stride, padding, dilation, grad)
    return torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)


def _setup_context(ctx, inputs, output):
    x, weight, bias, stride, padding, dilation = inputs
    ctx.save_for_backward(x, weight)
    ctx.window = (stride, padding, dilation)
    ctx.has_bias = bias is not None


def _backward(ctx, grad):
    x, weight = ctx.saved_tensors
    grad_x = grad_weight = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_x = _conv2d_grad_input(grad, x, weight, *ctx.window)
    if ctx.needs_input_grad[1]:
        grad_weight = _conv2d_grad_weight(grad, x, weight, *ctx.window)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        grad_bias = grad.sum((0, 2, 3))  # a plain reduction: torch's is as good as any
    return grad_x, grad_weight, grad_bias, None, None, None


_conv2d.register_autograd(_backward, setup_context=_setup_context)


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1, padding=0,
           dilation=1) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, stride, padding, dilation)`` (groups=1) in Triton, forward and backward.

    Args:
        x: (N, C, H, W), float32, float64, float16 or bfloat16 (the halves accumulate in float32; float32 uses
            TF32 on CUDA where ``torch.backends.cudnn.conv.fp32_precision`` allows it, as cuDNN does), on a
            CUDA device (compiled) or the CPU (Triton's interpreter: slow, for small sizes).
        weight: (out_channels, C, kH, kW) of x's dtype and device.
        bias: (out_channels,) or None.
        stride, padding, dilation: an int or an (h, w) pair; stride and dilation >= 1, padding >= 0.

    Returns:
        (N, out_channels, Hout, Wout), contiguous.
    """
    check_tensor(x, OP, "x")
    check_tensor(weight, OP, "weight")
    if bias is not None:
        check_tensor(bias, OP, "bias")
    window = [pair(value, OP, name, min=least)
              for name, value, least in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1))]
    return _conv2d(x, weight, bias, *window)
