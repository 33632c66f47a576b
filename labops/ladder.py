"""The ladder: each layer's forward, from the textbook body (rung 1) to the fastest kernel, named and selectable.

As llm.c's ``dev/cuda/layernorm_forward.cu`` numbers its kernels, labops numbers the kernels of a layer's
forward: rung 1 is the textbook body (the math of ``csrc/<layer>/<layer>.h``, run plainly), each later rung a
faster kernel of the same math. The names are declared once, in C++ (``forward_ladder()`` in
``csrc/<layer>/entry.h``; Note [the ladder] in ``csrc/common/ladder.h``), and read here.

Example:
    >>> import torch, labops
    >>> from labops import ladder
    >>> ladder.rungs("pooling", "cpu")
    ['textbook', 'simd4']
    >>> x = torch.randn(2, 3, 7, 7)
    >>> with ladder.use("pooling", "textbook"):
    ...     y1 = labops.global_avg_pool2d(x)
    >>> ladder.last_rung("pooling")
    1
    >>> y2 = labops.global_avg_pool2d(x)  # nothing forced: the default for float32 on the CPU
    >>> ladder.last_rung("pooling"), ladder.default_rung("pooling", "cpu", x)
    (2, 2)
    >>> torch.allclose(y1, y2)
    True

What forcing means:
  * process-wide (every thread), until the ``with`` block ends; the rung each call runs is read once per
    call, so a call never mixes two rungs;
  * the forward op only: the backward ops have no rungs;
  * never a fallback: a rung that does not exist on the input's device, or cannot take the input (say,
    the CPU's ``simd4`` on float16, or CUDA's ``tiled`` on a 7x7 kernel), makes the call raise ValueError
    naming the layer and the rung;
  * a call that runs no kernel (an empty tensor) checks and records nothing.

Which rung runs when nothing is forced: ``DEFAULTS`` (one table per layer and device, the dtypes and the
condition in words), ``default_rung(layer, device, *inputs)`` (the same table applied to an op's inputs;
tests/test_ladder.py holds the kernels to it) and ``describe(layer, device)`` (both, printed).
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Callable

import torch

__all__ = ["DEFAULTS", "Default", "default_rung", "describe", "forced", "last_rung", "layers", "rung_number",
           "rungs", "about", "use"]

ALL_DTYPES = ("float32", "float64", "float16", "bfloat16")


def _ops():
    """torch.ops.labops, with the compiled library loaded (built the first time)."""
    importlib.import_module("labops.ops")  # loads the library and the fakes
    return torch.ops.labops


def layers() -> list[str]:
    """The layers that have a ladder (their C++ registered one)."""
    return list(_ops()._ladder_layers())


def rungs(layer: str, device: str) -> list[str]:
    """The names of ``layer``'s rungs on ``device`` ("cpu" or "cuda"), rung 1 (the textbook) first.
    Known on every machine: a CPU-only build still names the CUDA rungs."""
    return list(_ops()._ladder(layer, device))


def about(layer: str, device: str) -> list[str]:
    """What each rung of ``rungs(layer, device)`` does, in one line each (from the same C++ declaration)."""
    return list(_ops()._ladder_about(layer, device))


def rung_number(layer: str, rung: int | str) -> int:
    """``rung`` as a number: a number is returned as it is (checked when forced), a name is looked up in
    the layer's CPU and CUDA ladders (it must have one number on both: "textbook" is 1 everywhere)."""
    if isinstance(rung, bool) or not isinstance(rung, (int, str)):
        raise ValueError(f"labops.ladder: a rung is a number (1 = textbook) or a name, got {rung!r}")
    if isinstance(rung, int):
        return rung
    found = {device: names.index(rung) + 1 for device in ("cpu", "cuda")
             if rung in (names := rungs(layer, device))}
    if not found:
        listed = "; ".join(f"{d}: {', '.join(rungs(layer, d))}" for d in ("cpu", "cuda"))
        raise ValueError(f"labops.ladder: layer '{layer}' has no rung named '{rung}' ({listed})")
    if len(set(found.values())) > 1:
        raise ValueError(f"labops.ladder: layer '{layer}' rung '{rung}' has a different number on each device "
                         f"({found}): force it by number")
    return next(iter(found.values()))


@contextlib.contextmanager
def use(layer: str, rung: int | str):
    """Force ``layer``'s forward to run ``rung`` (a number, 1 = textbook, or a name; 0: automatic) inside
    the ``with`` block, then restore what was forced before. Yields the rung's number.

    A rung number past both devices' ladders raises ValueError here; one the input's device lacks, or
    one that cannot take the input, raises ValueError at the call (never a silent fallback)."""
    number = rung_number(layer, rung)
    before = _ops()._ladder_force(layer, number)
    try:
        yield number
    finally:
        _ops()._ladder_force(layer, before)


def forced(layer: str) -> int:
    """The rung forced for ``layer`` now (0: none, the launcher picks)."""
    return int(_ops()._ladder_forced(layer))


def last_rung(layer: str) -> int:
    """The rung ``layer``'s last forward call ran, on any thread (0: none yet). Its name is
    ``rungs(layer, device)[n - 1]`` for the device that call ran on."""
    return int(_ops()._ladder_last(layer))


# ---- which rung runs by default ---------------------------------------------------------------------


@dataclass(frozen=True)
class Default:
    """One line of a default table: ``rung`` (a name) runs for ``dtypes`` when ``when`` (in words) holds.
    ``holds(*inputs)`` is the same condition on the op's inputs; the first line that holds is the default."""

    rung: str
    dtypes: tuple
    when: str
    holds: Callable[..., bool] = lambda *inputs: True


def _contiguous_ptr(x: torch.Tensor) -> int:
    """The address the kernel reads: x's own when contiguous, else a fresh copy's (aligned: we say 256)."""
    return x.data_ptr() if x.is_contiguous() else 256


def _pooling_whole_packs(x):
    pack = 16 // x.element_size()
    return _contiguous_ptr(x) % 16 == 0 and (x.shape[-2] * x.shape[-1]) % pack == 0


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _depthwise_tiled(x, weight, stride, dilation):
    """dispatch_tiled (csrc/depthwise/cuda.cu): 3x3 or 5x5, the same stride 1 or 2 on both axes, dilation 1."""
    kh, kw = weight.shape[2:]
    sh, sw = _pair(stride)
    return kh == kw and kh in (3, 5) and sh == sw and sh in (1, 2) and _pair(dilation) == (1, 1)


def _depthwise_nhwc(x, weight, stride, dilation):
    """Whether the CUDA forward reads a channels_last x in place (DepthwiseLauncher::has_nhwc_kernels)."""
    if not (x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()):
        return False
    pack = min(4, 16 // x.element_size())
    return (weight.shape[0] == x.shape[1] and weight.shape[0] % pack == 0
            and _depthwise_tiled(x, weight, stride, dilation) and x.data_ptr() % (pack * x.element_size()) == 0)


def _depthwise_vector_rows(x, weight, bias=None, stride=1, padding=0, dilation=1):
    """row_vector > 1 (Note [vector row loads]): NCHW as read, 'same' padding in W, even widths, x aligned."""
    if not _depthwise_tiled(x, weight, stride, dilation) or _depthwise_nhwc(x, weight, stride, dilation):
        return False
    kw, pw, (sw, dw) = weight.shape[3], _pair(padding)[1], (_pair(stride)[1], _pair(dilation)[1])
    out_w = (x.shape[3] + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return pw == kw // 2 and x.shape[3] % 2 == 0 and out_w % 2 == 0 and _contiguous_ptr(x) % (2 * x.element_size()) == 0


# (layer, device) -> its default table, first line that holds wins. The rungs are named as the C++
# declares them (tests/test_ladder.py checks every name), and tests/test_ladder.py runs every sample
# input through the op and holds last_rung() to this table.
DEFAULTS = {
    ("pooling", "cpu"): (
        Default("simd4", ("float32", "float64"), "always"),
        Default("textbook", ("float16", "bfloat16"),
                "always: simd4 adds in the data's own type, so not in 2-byte ones"),
    ),
    ("pooling", "cuda"): (
        Default("whole_packs", ALL_DTYPES, "x 16-byte aligned and H*W a multiple of the 16-byte pack "
                "(4 float32, 2 float64, 8 float16 or bfloat16 elements)", _pooling_whole_packs),
        Default("vector_loads", ALL_DTYPES, "x 16-byte aligned, H*W not a multiple of the pack",
                lambda x: _contiguous_ptr(x) % 16 == 0),
        Default("plane_groups", ALL_DTYPES, "x not 16-byte aligned (a contiguous view that starts inside its storage; "
                "a non-contiguous x is copied into fresh, aligned memory first)"),
    ),
    ("depthwise", "cpu"): (
        Default("bordered_simd", ALL_DTYPES, "always (channels_last is computed through NCHW copies)"),
    ),
    ("depthwise", "cuda"): (
        Default("tiled_vector_rows", ALL_DTYPES,
                "3x3 or 5x5 kernel, stride 1 or 2 (both axes), dilation 1; read as NCHW; padding_w = kW // 2; "
                "input and output widths even; x aligned to two elements", _depthwise_vector_rows),
        Default("tiled", ALL_DTYPES, "3x3 or 5x5 kernel, stride 1 or 2 (both axes), dilation 1, otherwise "
                "(channels_last with multiplier 1 and whole packs of channels read in place); tensors under 2^31 "
                "elements",
                lambda x, weight, bias=None, stride=1, padding=0, dilation=1: _depthwise_tiled(x, weight, stride,
                                                                                              dilation)),
        Default("textbook", ALL_DTYPES, "any other kernel size, stride or dilation"),
    ),
}


def default_rung(layer: str, device: str, *inputs, **kwargs) -> int | None:
    """The rung ``layer``'s forward runs by default on ``device`` for these inputs (the op's own arguments:
    ``x`` for pooling; ``x, weight, bias, stride, padding, dilation`` for depthwise), as ``DEFAULTS`` says;
    None when the call runs no kernel (an empty output)."""
    x = inputs[0]
    if layer == "pooling" and x.numel() == 0:
        return None
    if layer == "depthwise":
        weight = inputs[1]
        args = dict(zip(("bias", "stride", "padding", "dilation"), inputs[2:]), **kwargs)
        kh, kw = weight.shape[2:]
        (sh, sw), (ph, pw), (dh, dw) = (_pair(args.get(k, default))
                                        for k, default in (("stride", 1), ("padding", 0), ("dilation", 1)))
        out_h = (x.shape[2] + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        out_w = (x.shape[3] + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if x.shape[0] * weight.shape[0] * out_h * out_w == 0:
            return None
    dtype = str(x.dtype).removeprefix("torch.")
    names = rungs(layer, device)
    for line in DEFAULTS[(layer, device)]:
        if dtype in line.dtypes and line.holds(*inputs, **kwargs):
            return names.index(line.rung) + 1
    raise AssertionError(f"labops.ladder.DEFAULTS[{layer!r}, {device!r}] has no line for {dtype}")


def describe(layer: str, device: str) -> str:
    """The ladder of ``layer`` on ``device`` as text: each rung's number, name and what it does, then the
    default table. ``print(ladder.describe("pooling", "cuda"))``."""
    lines = [f"{layer} on {device}: rung, name, what it does"]
    for n, (name, what) in enumerate(zip(rungs(layer, device), about(layer, device)), start=1):
        lines.append(f"  {n} {name:18s} {what}")
    lines.append("by default (the first line that holds):")
    for d in DEFAULTS[(layer, device)]:
        dtypes = "every dtype" if d.dtypes == ALL_DTYPES else ", ".join(d.dtypes)
        lines.append(f"  {d.rung:18s} {dtypes}: {d.when}")
    return "\n".join(lines)
