"""GELU in Triton: one fused elementwise kernel for the forward and the backward.

Both forms of GELU are ``x * cdf(x)``: the exact one with the normal CDF
``Phi(x) = (1 + erf(x / sqrt(2))) / 2``, the tanh one with ``(1 + tanh(u)) / 2 = sigmoid(2u)``,
``u = sqrt(2/pi) * (x + 0.044715 x^3)``. Its derivative is ``cdf(x) + x * cdf'(x)``, so one kernel
computes ``cdf`` and stores either ``x * cdf`` (forward) or ``grad * (cdf + x * cdf')`` (backward).

Read like Triton's tutorial 01-vector-add: each program takes one block of elements, and the mask
keeps the last block inside the tensor.

Example:
    >>> import torch
    >>> from labops.triton import gelu
    >>> x = torch.tensor([-1.0, 0.0, 1.0], requires_grad=True)
    >>> y = gelu(x)
    >>> y.sum().backward()
    >>> y.detach(), x.grad
    (tensor([-0.1587,  0.0000,  0.8413]), tensor([-0.0833,  0.5000,  1.0833]))
"""

import torch
import triton
import triton.language as tl

from .._checks import check_choice, check_floating, check_tensor
from ._fake import register_contiguous_fake
from ._launch import kernel

__all__ = ["APPROXIMATIONS", "gelu"]

APPROXIMATIONS = ("none", "tanh")  # F.gelu's; labops.gelu's "sigmoid" form is not written here


# ---- the kernel ---------------------------------------------------------------------------------------------

@kernel
def gelu_kernel(x_ptr, grad_ptr, out_ptr, n,
                TANH: tl.constexpr, BACKWARD: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr):
    # Program pid takes elements [pid * BLOCK, (pid + 1) * BLOCK). The index is 64-bit: a tensor may hold
    # more than 2**31 elements, and pid * BLOCK in int32 would wrap (CUDA_KERNEL_LOOP's lesson again).
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    # n is seldom a multiple of BLOCK: the last block runs past the end. `offsets < n`, not `<= n`: element n
    # is the first one that is not there. Masked-off lanes neither load nor store.
    mask = offsets < n
    # float16 and bfloat16 are computed in float32 (COMPUTE), float64 in float64. (A Python float literal is
    # a float32 constant in Triton, so in float64 the constants below carry float32's 7 digits.)
    x = tl.load(x_ptr + offsets, mask=mask).to(COMPUTE)
    if TANH:
        # (1 + tanh(u)) / 2 written as sigmoid(2u): no tanh needed, and exact where tanh(u) is near -1.
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2/pi) * (x + 0.044715 x^3)
        cdf = 1.0 / (1.0 + tl.exp(-2.0 * u))
    else:
        cdf = 0.5 * (1.0 + tl.math.erf(x * 0.7071067811865476))  # Phi(x), 0.707... = 1/sqrt(2)
    if BACKWARD:
        if TANH:
            # d/dx sigmoid(2u) = 2 s (1 - s) du/dx, du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2): the 3 is the trap.
            pdf = 2.0 * cdf * (1.0 - cdf) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
        else:
            pdf = 0.3989422804014327 * tl.exp(-0.5 * x * x)  # phi(x), 0.398... = 1/sqrt(2 pi)
        grad = tl.load(grad_ptr + offsets, mask=mask).to(COMPUTE)
        out = grad * (cdf + x * pdf)
    else:
        out = x * cdf
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


# ---- the launcher -------------------------------------------------------------------------------------------

# 1024 elements a program (tutorial 01's size): 4 warps of 8 elements a thread on the GPU, and few
# programs for the interpreter, which runs them one after another.
BLOCK = 1024
# On a GPU: elements a program and its warps (tools/triton_tune.py gelu sweeps them; the choice is the
# fastest there, docs/benchmarks/triton/gelu_blocks_h100.md).
GPU_BLOCK, GPU_WARPS = 2048, 4


def _launch(x, grad, approximate):
    """The forward (grad is None) or the backward, into a fresh contiguous tensor."""
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return out
    backward = grad is not None
    block, warps = (GPU_BLOCK, GPU_WARPS) if x.is_cuda else (BLOCK, 4)
    gelu_kernel[(triton.cdiv(n, block),)](
        x, grad.contiguous() if backward else x, out, n,  # the forward never reads grad_ptr: x stands in
        TANH=approximate == "tanh", BACKWARD=backward,
        COMPUTE=tl.float64 if x.dtype == torch.float64 else tl.float32, BLOCK=block, num_warps=warps)
    return out


# ---- the ops: checks (stated once, for the op and its fake), registration, autograd --------------------------

def _check(x, approximate, grad=None):
    op = "triton.gelu_backward" if grad is not None else "triton.gelu"
    check_floating(x, op, "x")
    if x.device.type not in ("cpu", "cuda", "meta"):  # meta: shapes only (fakes)
        raise ValueError(f"labops.{op}: x must be on the CPU or a CUDA device, got {x.device.type}")
    check_choice(approximate, APPROXIMATIONS, op, "approximate")
    if grad is not None:
        check_tensor(grad, op, "grad")
        if grad.shape != x.shape or grad.dtype != x.dtype or grad.device != x.device:
            raise ValueError(f"labops.{op}: grad must have x's shape, dtype and device, got "
                             f"{tuple(grad.shape)} {grad.dtype} {grad.device} for x's "
                             f"{tuple(x.shape)} {x.dtype} {x.device}")


@torch.library.custom_op("labops_triton::gelu", mutates_args=())
def _gelu(x: torch.Tensor, approximate: str) -> torch.Tensor:
    _check(x, approximate)
    return _launch(x, None, approximate)


register_contiguous_fake(_gelu, _check)


@torch.library.custom_op("labops_triton::gelu_backward", mutates_args=())
def _gelu_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str) -> torch.Tensor:
    _check(x, approximate, grad)
    return _launch(x, grad, approximate)


register_contiguous_fake(_gelu_backward, lambda grad, x, approximate: _check(x, approximate, grad))


def _setup_context(ctx, inputs, output):
    x, approximate = inputs
    ctx.save_for_backward(x)  # the backward needs x (cdf and cdf' of x), not the output
    ctx.approximate = approximate


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return _gelu_backward(grad, x, ctx.approximate), None


_gelu.register_autograd(_backward, setup_context=_setup_context)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``F.gelu(x, approximate=approximate)`` in Triton, forward and backward.

    Args:
        x: floating tensor of any shape (float32, float64, float16 or bfloat16; the halves are computed in
            float32), on a CUDA device (compiled) or the CPU (Triton's interpreter).
        approximate: ``"none"`` (``x * Phi(x)``) or ``"tanh"``.

    Returns:
        a contiguous tensor of x's shape and dtype.
    """
    _check(x, approximate)  # here too: a wrong type must not reach the dispatcher, which names no argument
    return _gelu(x, approximate)
