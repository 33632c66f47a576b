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
    >>> x = torch.randn(2, 3, 7, 7, generator=torch.Generator().manual_seed(0))
    >>> with ladder.use("pooling", "textbook"):
    ...     y1 = labops.global_avg_pool2d(x)
    >>> ladder.last_rung("pooling")
    1
    >>> y2 = labops.global_avg_pool2d(x)  # nothing forced: the default for float32 on the CPU
    >>> ladder.last_rung("pooling"), ladder.default_rung("pooling", "cpu", x)
    (2, 2)
    >>> torch.allclose(y1, y2, rtol=1e-5, atol=1e-6)  # the same means, added in another order
    True

What forcing means:
  * process-wide (every thread), until the ``with`` block ends; the rung each call runs is read once per
    call, so a call never mixes two rungs;
  * the forward op only: the backward ops have no rungs;
  * never a fallback: a rung that does not exist on the input's device, or cannot take the input (say,
    the CPU's ``simd4`` on float16, or CUDA's ``tiled`` on a 7x7 kernel), makes the call raise ValueError
    naming the layer and the rung;
  * a call that runs no kernel (an empty tensor) checks and records nothing.

Which rung runs when nothing is forced: each layer states it beside its Python face, as the table
``LADDER_DEFAULTS`` of ``labops/ops/<layer>.py`` (per device, the dtypes and the condition in words);
``DEFAULTS`` gathers those tables by ``(layer, device)``; ``default_rung(layer, device, *inputs)`` applies one to
an op's inputs (tests/test_ladder.py holds the kernels to it) and ``describe(layer, device)`` prints the rungs and
the table.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Callable

import torch

__all__ = ["ALL_DTYPES", "DEFAULTS", "Default", "about", "default_rung", "describe", "forced", "kernel_address",
           "last_rung", "layers", "meta_output", "rung_number", "rungs", "use"]

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


def kernel_address(x: torch.Tensor) -> int:
    """The address a kernel reads: x's own when contiguous, else a fresh copy's (aligned: we say 256).
    For the default tables' alignment conditions."""
    return x.data_ptr() if x.is_contiguous() else 256


def meta_output(op: Callable, *inputs) -> torch.Tensor:
    """``op(*inputs)`` on meta tensors: the output's shape from the op's own C++ rules (its Meta kernel),
    no data and no kernel. What a default table reads instead of restating an output-size formula."""
    return op(*(t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs))


def _layer_face(layer: str):
    """The layer's Python face, labops/ops/<layer>.py: where its LADDER_DEFAULTS table lives."""
    return importlib.import_module(f"labops.ops.{layer}")


def __getattr__(name):
    # DEFAULTS is read from the layers' own modules (PEP 562: on first use, since that loads the library).
    if name == "DEFAULTS":
        return {(layer, device): table for layer in layers()
                for device, table in _layer_face(layer).LADDER_DEFAULTS.items()}
    raise AttributeError(f"module 'labops.ladder' has no attribute {name!r}")


def default_rung(layer: str, device: str, *inputs) -> int | None:
    """The rung ``layer``'s forward runs by default on ``device`` for these inputs (the forward op's own
    positional arguments), as the layer's table in ``DEFAULTS`` says; None when the call runs no kernel (an
    empty tensor: the layer's ``ladder_runs_kernel(*inputs)`` where it has one, else ``inputs[0]`` empty)."""
    face = _layer_face(layer)
    runs_kernel = getattr(face, "ladder_runs_kernel", lambda x, *rest: x.numel() > 0)
    if not runs_kernel(*inputs):
        return None
    dtype = str(inputs[0].dtype).removeprefix("torch.")
    names = rungs(layer, device)
    for line in face.LADDER_DEFAULTS[device]:
        if dtype in line.dtypes and line.holds(*inputs):
            return names.index(line.rung) + 1
    raise AssertionError(f"labops.ops.{layer}.LADDER_DEFAULTS[{device!r}] has no line for {dtype}")


def describe(layer: str, device: str) -> str:
    """The ladder of ``layer`` on ``device`` as text: each rung's number, name and what it does, then the
    default table. ``print(ladder.describe("pooling", "cuda"))``."""
    lines = [f"{layer} on {device}: rung, name, what it does"]
    for n, (name, what) in enumerate(zip(rungs(layer, device), about(layer, device)), start=1):
        lines.append(f"  {n} {name:18s} {what}")
    lines.append("by default (the first line that holds):")
    for d in _layer_face(layer).LADDER_DEFAULTS[device]:
        dtypes = "every dtype" if d.dtypes == ALL_DTYPES else ", ".join(d.dtypes)
        lines.append(f"  {d.rung:18s} {dtypes}: {d.when}")
    return "\n".join(lines)
