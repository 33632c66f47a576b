"""What torch.compile writes: the kernels Inductor generates for a function, as text to read.

``generated_kernels(fn, *inputs)`` compiles ``fn``, runs it (and, when an input requires grad, its backward)
under ``torch._inductor.utils.run_and_get_code``, which returns the Python modules Inductor generated, one
per graph: the forward, then the backward. From each it keeps the kernels' own source, the strings handed
to ``async_compile.triton(...)`` (on a GPU Inductor writes Triton) or ``async_compile.cpp_pybinding(...)``
(on a CPU it writes C++), and the calls it leaves to a library (``extern_kernels.mm``, a convolution).

Example:
    >>> import torch, torch.nn.functional as F
    >>> from labops.inductor import generated_kernels
    >>> graphs = generated_kernels(F.gelu, torch.randn(64, requires_grad=True))  # doctest: +SKIP
    >>> [(g.graph, [k.name for k in g.kernels]) for g in graphs]  # doctest: +SKIP
    [('forward', ['cpp_fused_gelu_0']), ('backward', ['cpp_fused_gelu_gelu_backward_0'])]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

__all__ = ["GeneratedKernel", "Graph", "generated_kernels"]


@dataclass
class GeneratedKernel:
    name: str
    language: str  # "python" (Triton) or "cpp"
    source: str


@dataclass
class Graph:
    graph: str  # "forward" or "backward"
    kernels: list[GeneratedKernel] = field(default_factory=list)
    library_calls: list[str] = field(default_factory=list)


# A kernel in Inductor's module: async_compile.triton('name', '''source''', ...) or
# name = async_compile.cpp_pybinding([...], r'''source''').
_TRITON = re.compile(r"async_compile\.triton\('(?P<name>\w+)', '''(?P<src>.*?)'''", re.S)
_CPP = re.compile(r"(?P<name>\w+) = async_compile\.cpp_pybinding\(\[.*?\], r'''(?P<src>.*?)'''", re.S)
_LIBRARY = re.compile(r"extern_kernels\.(\w+)|aten\.(convolution\w*)")


def parse_module(module_source: str, graph: str) -> Graph:
    """The kernels and library calls of one module Inductor generated."""
    kernels = [GeneratedKernel(m["name"], "python", m["src"].strip()) for m in _TRITON.finditer(module_source)]
    kernels += [GeneratedKernel(m["name"], "cpp", m["src"].strip()) for m in _CPP.finditer(module_source)]
    calls = sorted({a or b for a, b in _LIBRARY.findall(module_source)})
    return Graph(graph, kernels, calls)


def generated_kernels(fn, *inputs) -> list[Graph]:
    """Compile ``fn`` with torch.compile, run it on ``inputs`` (and its backward, with a random gradient, when
    an input requires grad) and return what Inductor wrote for each graph.

    Args:
        fn: a function of tensors returning one tensor.
        inputs: its arguments (their device picks what Inductor writes: Triton on CUDA, C++ on the CPU).

    Returns:
        one :class:`Graph` per generated module: the forward, then the backward if one ran.
    """
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()  # a fresh compile: code cached from an earlier call would not be returned
    compiled = torch.compile(fn)

    def step():
        out = compiled(*inputs)
        if out.requires_grad:
            out.backward(torch.randn_like(out))

    _, modules = run_and_get_code(step)
    return [parse_module(module, graph) for graph, module in zip(("forward", "backward"), modules)]
