"""Reorg (YOLOv2's passthrough layer): Python face of the compiled reorg ops.

The C++ a call reaches: csrc/reorg/entry.h (``ReorgOps``: argument checks,
dtype dispatch), csrc/reorg/reorg.h (the three index maps, one element per
call; their divisions by csrc/common/fast_divider.h), csrc/reorg/cpu.cpp and csrc/reorg/cuda.cu (the launchers); the
gradient: csrc/reorg/register.cpp.
"""

import torch

from .._checks import check_choice, check_tensor
from ..ladder import ALL_DTYPES, Default

__all__ = ["REORG_ORDERS", "reorg"]

REORG_ORDERS = ("darknet", "dcr", "crd")


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


# Fake tensors (torch.compile): no Python fake. The Meta kernels of csrc/reorg/register.cpp run the
# C++ rules and shapes of csrc/reorg/entry.h, so a bad argument raises the same error compiled or not.

# Autograd: a graph node built in csrc/reorg/register.cpp (a permutation's gradient is the inverse
# permutation: reorg and reorg_backward are each other's gradient).


def _packed_tasks(x, stride=2, order="darknet"):
    """Whether CUDA's reorg_kernel takes the forward (tasks_per_thread in csrc/reorg/cuda.cu): stride 2 or 4, one
    task (stride elements) within a 16-byte load, and x aligned to a task: x's own address when contiguous; a
    non-contiguous x is copied into fresh (aligned) memory first."""
    task_bytes = stride * x.element_size()
    address = x.data_ptr() if x.is_contiguous() else 0
    return stride in (2, 4) and task_bytes <= 16 and address % task_bytes == 0


# Which rung the forward runs when none is forced (labops.ladder.DEFAULTS reads this): per device, the first line
# whose dtype and condition hold. tests/test_ladder.py holds the kernels to it.
LADDER_DEFAULTS = {
    "cpu": (
        Default("row_tasks_s2", ALL_DTYPES, "stride 2", lambda x, stride=2, order="darknet": stride == 2),
        Default("row_tasks", ALL_DTYPES, "any other stride"),
    ),
    "cuda": (
        Default("packed_tasks", ALL_DTYPES, "stride 2 or 4; a task (stride elements) fits one 16-byte load (not "
                "float64 at stride 4); x aligned to a task (a non-contiguous x is copied into fresh memory first)",
                _packed_tasks),
        Default("textbook", ALL_DTYPES, "any other stride, float64 at stride 4, or x not aligned to a task"),
    ),
}
