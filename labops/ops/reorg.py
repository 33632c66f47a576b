"""Reorg (YOLOv2's passthrough layer): Python face of csrc/ops/reorg.h."""

import torch

from .._checks import check_choice, check_floating

__all__ = ["REORG_ORDERS", "reorg"]

REORG_ORDERS = ("darknet", "dcr", "crd")


def _check(t, stride, order, op, arg, darknet_channels=None):
    check_floating(t, op, arg)
    check_choice(order, REORG_ORDERS, op, "order")
    if isinstance(stride, bool) or not isinstance(stride, int):
        raise TypeError(f"labops.{op}: stride must be an int, got {type(stride).__name__}")
    if stride < 1:
        raise ValueError(f"labops.{op}: stride must be >= 1, got {stride}")
    if t.dim() != 4:
        raise ValueError(f"labops.{op}: {arg} must be a 4-D (N, C, H, W) tensor, got {t.dim()}-D")


def _check_input_shape(shape, stride, order, op, arg):
    _, c, h, w = shape
    if h % stride != 0 or w % stride != 0:
        raise ValueError(f"labops.{op}: {arg}'s height and width must be divisible by stride {stride}, "
                         f"got {list(shape)}")
    if order == "darknet" and c % (stride * stride) != 0:
        raise ValueError(f"labops.{op}: {arg}'s channels must be divisible by stride^2 = {stride * stride} "
                         f"for order 'darknet', got {list(shape)}")


def _output_shape(shape, s):
    n, c, h, w = shape
    return (n, c * s * s, h // s, w // s)


def _input_shape_of_grad(grad_output, s):
    n, c_out, ho, wo = grad_output.shape
    if c_out % (s * s) != 0:
        raise ValueError(f"labops.reorg_backward: grad_output's channels must be divisible by stride^2 = {s * s}, "
                         f"got {list(grad_output.shape)}")
    return (n, c_out // (s * s), ho * s, wo * s)


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
    _check(x, stride, order, "reorg", "x")
    _check_input_shape(x.shape, stride, order, "reorg", "x")
    return torch.ops.labops.reorg(x, stride, order)


# ---- shapes for torch.compile ----

@torch.library.register_fake("labops::reorg")
def _reorg_fake(x, stride=2, order="darknet"):
    _check(x, stride, order, "reorg", "x")
    _check_input_shape(x.shape, stride, order, "reorg", "x")
    return x.new_empty(_output_shape(x.shape, stride))


@torch.library.register_fake("labops::reorg_backward")
def _reorg_backward_fake(grad_output, stride=2, order="darknet"):
    _check(grad_output, stride, order, "reorg_backward", "grad_output")
    shape = _input_shape_of_grad(grad_output, stride)
    _check_input_shape(shape, stride, order, "reorg_backward", "grad_output")
    return grad_output.new_empty(shape)


# Autograd: a torch::autograd::Function in csrc/autograd.cpp (a permutation's gradient is the inverse
# permutation: reorg and reorg_backward are each other's gradient).
