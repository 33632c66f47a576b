"""Reorg (YOLOv2's passthrough layer): Python face of the compiled reorg ops.

The C++ a call reaches: csrc/reorg/entry.h (``ReorgOps``: argument checks,
dtype dispatch), csrc/reorg/reorg.h (the three index maps, one element per
call; their divisions by csrc/common/fast_divider.h), csrc/reorg/cpu.cpp and csrc/reorg/cuda.cu (the launchers); the
gradient: csrc/reorg/register.cpp.
"""

import torch

from .._checks import check_choice, check_enum, check_floating, check_tensor, shape_str

__all__ = ["REORG_ORDERS", "reorg"]

REORG_ORDERS = ("darknet", "dcr", "crd")

_INT64_MAX = 2**63 - 1

# The ops' OpOverloads, looked up once: `torch.ops.labops.reorg(...)` would walk three attributes
# and resolve the overload on every call, a measurable share of a tiny call's host time
# (tools/host_time.py).
_reorg = torch.ops.labops.reorg.default


def reorg(x: torch.Tensor, stride: int = 2, order: str = "darknet") -> torch.Tensor:
    """Move each stride x stride block of pixels into channels: (N, C, H, W) -> (N, C*s*s, H/s, W/s).

    order:
        ``"crd"``: ``y[n, c*s*s + dy*s + dx, h, w] = x[n, c, h*s+dy, w*s+dx]`` (``F.pixel_unshuffle``);
        ``"dcr"``: ``y[n, (dy*s+dx)*C + c, h, w] = x[n, c, h*s+dy, w*s+dx]``
        (``tf.nn.space_to_depth``, ONNX SpaceToDepth);
        ``"darknet"``: what darknet's ``reorg_cpu(..., forward=0)`` computes in YOLOv2:
        ``dcr(x.reshape(N, C/s^2, H*s, W*s)).reshape(N, C*s^2, H/s, W/s)``, a reinterpretation of
        memory that is not space-to-depth, but the one pretrained YOLOv2 weights expect. Needs C
        divisible by s^2.

    Args:
        x: (N, C, H, W), H and W divisible by stride.
        stride: s >= 1.
        order: ``"darknet"``, ``"dcr"`` or ``"crd"`` (one of ``REORG_ORDERS``).

    Returns:
        (N, C*s*s, H/s, W/s), x's dtype.

    Example:
        >>> import labops
        >>> x = torch.arange(16.0).reshape(1, 4, 2, 2)
        >>> labops.reorg(x, 2, "crd").shape
        torch.Size([1, 16, 1, 1])
        >>> torch.equal(labops.reorg(x, 2, "crd"), torch.nn.functional.pixel_unshuffle(x, 2))
        True
    """
    check_tensor(x, "reorg", "x")
    if type(stride) is not int and (isinstance(stride, bool) or not isinstance(stride, int)):
        raise TypeError(f"labops.reorg: stride must be an int, got {type(stride).__name__}")
    check_choice(order, REORG_ORDERS, "reorg", "order")
    return _reorg(x, stride, order)


# ---- the rules of csrc/reorg/entry.h, in its words, for the fakes (torch.compile) ----

def _check_stride(stride, op):
    if stride < 1:
        raise ValueError(f"labops.{op}: stride must be >= 1, got {stride}")
    if stride * stride > _INT64_MAX:
        raise ValueError(f"labops.{op}: stride is too large, got {stride}")


def _check_input_shape(op, t, arg, stride, order, c, h, w):
    """ReorgOps::check on the input geometry (c, h, w); `t` is the tensor the message shows."""
    _check_stride(stride, op)
    if h % stride != 0 or w % stride != 0:
        raise ValueError(f"labops.{op}: {arg}'s height and width must be divisible by stride {stride}, "
                         f"got {shape_str(t.shape)}")
    if order == "darknet" and c % (stride * stride) != 0:
        raise ValueError(f"labops.{op}: {arg}'s channels must be divisible by stride^2 = {stride * stride} "
                         f"for order 'darknet', got {shape_str(t.shape)}")


@torch.library.register_fake("labops::reorg")
def _reorg_fake(x, stride=2, order="darknet"):
    check_floating(x, "reorg", "x")
    check_enum(order, REORG_ORDERS, "reorg", "order")
    if x.dim() != 4:
        raise ValueError(f"labops.reorg: x must be a 4-D (N, C, H, W) tensor, got {x.dim()}-D")
    n, c, h, w = x.shape
    _check_input_shape("reorg", x, "x", stride, order, c, h, w)
    return x.new_empty((n, c * stride * stride, h // stride, w // stride))


@torch.library.register_fake("labops::reorg_backward")
def _reorg_backward_fake(grad_output, stride=2, order="darknet"):
    op = "reorg_backward"
    check_floating(grad_output, op, "grad_output")
    check_enum(order, REORG_ORDERS, op, "order")
    if grad_output.dim() != 4:
        raise ValueError(f"labops.reorg_backward: grad_output must be a 4-D tensor, got {grad_output.dim()}-D")
    _check_stride(stride, op)
    n, c_out, h_out, w_out = grad_output.shape
    if c_out % (stride * stride) != 0:
        raise ValueError(f"labops.reorg_backward: grad_output's channels must be divisible by stride^2 = "
                         f"{stride * stride}, got {shape_str(grad_output.shape)}")
    shape = (n, c_out // (stride * stride), h_out * stride, w_out * stride)
    _check_input_shape(op, grad_output, "grad_output", stride, order, *shape[1:])
    return grad_output.new_empty(shape)


# Autograd: a graph node built in csrc/reorg/register.cpp (a permutation's gradient is the inverse
# permutation: reorg and reorg_backward are each other's gradient).
