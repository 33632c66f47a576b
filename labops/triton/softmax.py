"""Softmax over the last dim in Triton: one row per program, the whole row held on chip.

Triton's tutorial 02-fused-softmax, with its backward. A program loads its row once into a block of
``BLOCK = next_power_of_2(cols)`` lanes (registers and shared memory: "SRAM"), subtracts the row's
max (without it ``exp`` overflows for logits past 88 in float32 and the row becomes NaN), and writes
``exp(x - max) / sum(exp(x - max))``: one read and one write of each element, where the unfused
``x - x.max(); e = exp(...); e / e.sum()`` reads and writes x several times.

The backward uses the saved output ``y``: ``grad_x = y * (g - sum(g * y))``, again one row a program.

Example:
    >>> import torch
    >>> from labops.triton import softmax
    >>> softmax(torch.tensor([[1000.0, 0.0], [0.0, 0.0]]))
    tensor([[1.0000, 0.0000],
            [0.5000, 0.5000]])
"""

import torch
import triton
import triton.language as tl

from .._checks import check_floating, check_tensor
from ._fake import register_contiguous_fake
from ._launch import kernel

__all__ = ["softmax"]

# Triton's largest block (TRITON_MAX_TENSOR_NUMEL in triton/language/core.py): a longer row does not fit
# one program. Rows that long spill registers anyway; labops.softmax's two-pass kernel is the one for them.
MAX_COLS = 1 << 20


# ---- the kernels ----------------------------------------------------------------------------------------------

@kernel
def softmax_kernel(x_ptr, y_ptr, cols, COMPUTE: tl.constexpr, BLOCK: tl.constexpr):
    # Program `row` owns one row. 64-bit row offset: rows * cols may pass 2**31.
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK)
    # BLOCK is a power of two (tl.arange needs one), cols seldom is: the lanes past the row are masked off,
    # and load as -inf so that they neither win the max nor add to the sum (exp(-inf) = 0).
    mask = offsets < cols
    x = tl.load(x_ptr + row * cols + offsets, mask=mask, other=-float("inf")).to(COMPUTE)
    x = x - tl.max(x, axis=0)  # the largest becomes exp(0) = 1: no overflow, and the sum is >= 1
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * cols + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@kernel
def softmax_backward_kernel(grad_ptr, y_ptr, grad_x_ptr, cols, COMPUTE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    # Masked lanes load 0: they add nothing to sum(g * y).
    g = tl.load(grad_ptr + row * cols + offsets, mask=mask, other=0.0).to(COMPUTE)
    y = tl.load(y_ptr + row * cols + offsets, mask=mask, other=0.0).to(COMPUTE)
    grad_x = y * (g - tl.sum(g * y, axis=0))
    tl.store(grad_x_ptr + row * cols + offsets, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)


# ---- the launcher ---------------------------------------------------------------------------------------------

def GPU_WARPS(block):  # noqa: N802  (a setting tools/triton_tune.py replaces)
    """Warps a row-program gets on a GPU: 16 elements a thread (tutorial 02 gives 1024 columns 4 warps, 8
    elements a thread; 2 warps measured faster there in float16 and within 2 % in float32, and 8 warps at 4096
    columns: docs/benchmarks/triton/softmax_warps_h100.md)."""
    return max(1, min(16, block // 512))


def _launch(kernel_, a, b):
    """One program per row of the contiguous (rows, cols) view of a and b (b is None for the forward)."""
    a = a.contiguous()
    out = torch.empty_like(a)
    cols = a.shape[-1]
    rows = a.numel() // cols if cols else 0
    if rows == 0:
        return out
    block = triton.next_power_of_2(cols)
    num_warps = GPU_WARPS(block) if a.is_cuda else 4
    args = (a,) if b is None else (a, b.contiguous())
    kernel_[(rows,)](*args, out, cols, COMPUTE=tl.float64 if a.dtype == torch.float64 else tl.float32,
                     BLOCK=block, num_warps=num_warps)
    return out


# ---- the ops: checks (stated once, for the op and its fake), registration, autograd -----------------------------

def _check(x, y=None):
    """x is the forward's input, or the backward's grad (then y is the saved output)."""
    op, arg = ("triton.softmax_backward", "grad") if y is not None else ("triton.softmax", "x")
    check_floating(x, op, arg)
    if x.device.type not in ("cpu", "cuda", "meta"):  # meta: shapes only (fakes)
        raise ValueError(f"labops.{op}: {arg} must be on the CPU or a CUDA device, got {x.device.type}")
    if x.dim() == 0:
        raise ValueError(f"labops.{op}: {arg} must have at least one dim (softmax runs over the last), got 0-d")
    if x.shape[-1] > MAX_COLS:
        raise ValueError(f"labops.{op}: {arg}'s last dim must be at most {MAX_COLS} (one row is one Triton block), "
                         f"got {x.shape[-1]}")
    if y is not None:
        check_tensor(y, op, "y")
        if y.shape != x.shape or y.dtype != x.dtype or y.device != x.device:
            raise ValueError(f"labops.{op}: y must have grad's shape, dtype and device, got "
                             f"{tuple(y.shape)} {y.dtype} {y.device} for grad's {tuple(x.shape)} {x.dtype} {x.device}")


@torch.library.custom_op("labops_triton::softmax", mutates_args=())
def _softmax(x: torch.Tensor) -> torch.Tensor:
    _check(x)
    return _launch(softmax_kernel, x, None)


register_contiguous_fake(_softmax, _check)


@torch.library.custom_op("labops_triton::softmax_backward", mutates_args=())
def _softmax_backward(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _check(grad, y)
    return _launch(softmax_backward_kernel, grad, y)


register_contiguous_fake(_softmax_backward, _check)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)  # the backward needs y, not x


def _backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return _softmax_backward(grad, y)


_softmax.register_autograd(_backward, setup_context=_setup_context)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """``torch.softmax(x, dim=-1)`` in Triton, forward and backward.

    Args:
        x: floating tensor of one dim or more (float32, float64, float16 or bfloat16; the halves are computed in
            float32), its last dim at most ``MAX_COLS``; on a CUDA device (compiled) or the CPU (interpreted).
            Leading dims are rows: (N, C, L) is N * C rows of L.

    Returns:
        a contiguous tensor of x's shape and dtype whose rows sum to 1.
    """
    _check(x)  # here too: a wrong type must not reach the dispatcher, which names no argument
    return _softmax(x)
