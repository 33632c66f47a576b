"""The layer contract: what a layer's three functions read and write, drawn from one real call of each.

``layer_contract`` runs ``updateOutput``, ``updateGradInput`` and ``accGradParameters`` of a Torch7-style
module (``labops.torch7`` or any object with those three methods) and draws, for each, the tensors it
read and the tensors it wrote, with the shapes of that call. What a function *read* is not typed in: the
figure calls it again with each candidate (the input, gradOutput, the output saved by updateOutput, each
parameter) replaced by NaN, and draws an arrow from the ones that turned its result into NaN.
"""

from __future__ import annotations

import numpy as np
from labops.viz._draw import _BLOCK_COLOURS, new_figure

_PARAMETERS = (("weight", "gradWeight"), ("bias", "gradBias"))
_READ, _WROTE, _SAVED, _PARAM = _BLOCK_COLOURS[0], _BLOCK_COLOURS[1], _BLOCK_COLOURS[2], _BLOCK_COLOURS[6]


def _copy(t):
    return t.clone() if hasattr(t, "clone") else np.array(t, copy=True)


def _poisoned(t):
    return t * float("nan")


def _has_nan(t) -> bool:
    t = t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
    return bool(np.isnan(t).any())


def _shape(t) -> str:
    shape = tuple(int(s) for s in (t.shape if hasattr(t, "shape") else np.shape(t)))
    return str(shape)


def _parameters(module):
    """(name, gradient name) of each parameter the module has."""
    return [(p, g) for p, g in _PARAMETERS if getattr(module, p, None) is not None]


def _reads(call, module, input, grad_output, candidates):
    """Which of ``candidates`` ("input", "gradOutput", "output" or a parameter's name) ``call`` reads:
    those that, replaced by NaN, make a NaN appear in what it returns."""
    read = []
    for name in candidates:
        args = {"input": input, "gradOutput": grad_output}
        if name in args:
            args[name] = _poisoned(args[name])
            result = call(args["input"], args["gradOutput"])
        else:
            kept = getattr(module, name)
            setattr(module, name, _poisoned(kept))
            try:
                result = call(input, grad_output)
            finally:
                setattr(module, name, kept)
        if any(_has_nan(r) for r in result):
            read.append(name)
    return read


def contract_call(module, input, grad_output, scale=1.0):
    """Run the three functions of ``module`` once and find what each read; returns a dict.

    Keys: ``"output"``, ``"gradInput"``, ``"params"`` ([(name, grad name, accumulated increment)]),
    and ``"reads"``: {function name: [what it read]}. The module's gradient buffers end up accumulated
    by this one call of accGradParameters, as in a real backward.
    """
    params = _parameters(module)
    candidates = ["input", "gradOutput", "output"] + [p for p, _ in params]
    output = module.updateOutput(input)
    module.output = output  # a module whose forward() sets it (the notebook's) gets it here too
    reads = {"updateOutput": _reads(lambda i, g: (module.updateOutput(i),), module, input, grad_output,
                                    ["input"] + [p for p, _ in params])}
    module.output = output = module.updateOutput(input)  # the probes above overwrote it
    grad_input = module.updateGradInput(input, grad_output)
    reads["updateGradInput"] = _reads(lambda i, g: (module.updateGradInput(i, g),), module, input, grad_output,
                                      candidates)
    grad_input = module.updateGradInput(input, grad_output)
    increments = []
    if params:
        before = {g: _copy(getattr(module, g)) for _, g in params}

        def acc(i, g):
            for name, value in before.items():
                setattr(module, name, _copy(value) * 0)
            module.accGradParameters(i, g, scale)
            return tuple(getattr(module, name) for name in before)

        reads["accGradParameters"] = _reads(acc, module, input, grad_output, candidates)
        for name, value in before.items():
            setattr(module, name, _copy(value))
        module.accGradParameters(input, grad_output, scale)
        increments = [(p, g, getattr(module, g) - before[g]) for p, g in params]
    return {"output": output, "gradInput": grad_input, "params": increments, "reads": reads}


def _box(ax, x, y, text, colour, gid, dashed=False, width=None):
    box = dict(boxstyle="round,pad=0.35", facecolor=colour + "33", edgecolor=colour, linewidth=1.4,
               linestyle="--" if dashed else "-")
    t = ax.text(x, y, text, ha="center", va="center", fontsize=8, bbox=box, wrap=False)
    t.set_gid(gid)
    return t


def _arrow(ax, tail, head, colour, gid, dashed=False):
    """An arrow from the right edge of box ``tail`` to the left edge of box ``head`` (both text artists)."""
    arrow = ax.annotate("", xy=(0.0, 0.5), xycoords=head, xytext=(1.0, 0.5), textcoords=tail,
                        arrowprops=dict(arrowstyle="-|>", mutation_scale=12, color=colour, linewidth=1.3,
                                        linestyle="--" if dashed else "-", shrinkA=6, shrinkB=6))
    arrow.set_gid(gid)
    return arrow


def layer_contract(*calls, scale=1.0, names=None):
    """The three functions of each layer in ``calls``, one axes per layer, from one real call of each.

    Each call is ``(module, input, grad_output)``. Per layer, three rows: ``updateOutput``,
    ``updateGradInput``, ``accGradParameters``. A row's function box (gid ``"function"``) has on its left
    a box per tensor it read (gid ``"read"``; dashed: the output that updateOutput saved, purple: a
    parameter), an arrow from each (gid ``"read-arrow"``), and on its right a box per tensor it wrote
    (gid ``"wrote"``) with an arrow to it (gid ``"wrote-arrow"``): output and gradInput, and for
    accGradParameters each parameter's gradient, ``+=`` ``scale`` times this call's gradient. A layer
    without parameters gets a grey accGradParameters box with nothing around it. Every box carries the
    shape of the tensor in this call; what each function read is found by NaN poisoning
    (``contract_call``). ``names``: a title per layer (default: the module's class name).
    """
    if not calls:
        raise ValueError("viz.layer_contract: give at least one (module, input, grad_output)")
    fig, axes = new_figure(ncols=len(calls), width=5.6 * len(calls), height=5.4)
    for k, (ax, (module, input, grad_output)) in enumerate(zip(axes, calls)):
        found = contract_call(module, input, grad_output, scale)
        shapes = {"input": _shape(input), "gradOutput": _shape(grad_output), "output": _shape(found["output"])}
        shapes.update({p: _shape(getattr(module, p)) for p, _ in _parameters(module)})
        rows = [("updateOutput", [("output", _shape(found["output"]))]),
                ("updateGradInput", [("gradInput", _shape(found["gradInput"]))]),
                ("accGradParameters",
                 [(f"{g} {_shape(d)}\n+= scale · ∂E/∂{p}", "") for p, g, d in found["params"]])]
        for row, (function, wrote) in enumerate(rows):
            y = 2 - row
            read = found["reads"].get(function, [])
            grey = function == "accGradParameters" and not wrote
            label = f"{function}" + (f"\n(scale = {scale:g})" if function == "accGradParameters" and wrote else "")
            if grey:
                label = "accGradParameters\nno parameters: nothing to accumulate"
            box = _box(ax, 5.0, y, label, "#888888" if grey else "#444444", "function")
            for j, name in enumerate(read):
                yy = y + (len(read) - 1) * 0.16 - j * 0.32
                saved = name == "output"
                param = name not in ("input", "gradOutput", "output")
                text = f"{name} {shapes[name]}" + ("\nsaved by updateOutput" if saved else "")
                colour = _PARAM if param else (_SAVED if saved else _READ)
                source = _box(ax, 1.3, yy, text, colour, "read", dashed=saved)
                _arrow(ax, source, box, colour, "read-arrow", dashed=saved)
            for j, (name, shape) in enumerate(wrote):
                yy = y + (len(wrote) - 1) * 0.2 - j * 0.4
                _arrow(ax, box, _box(ax, 8.6, yy, f"{name} {shape}".strip(), _WROTE, "wrote"), _WROTE, "wrote-arrow")
        ax.set_xlim(-0.2, 10.2)
        ax.set_ylim(-0.6, 2.6)
        ax.axis("off")
        title = names[k] if names else type(module).__name__
        ax.set_title(f"{title}: input {shapes['input']} -> output {shapes['output']}", fontsize=10)
    fig.text(0.5, 0.01, "left of each function: what it read (found by replacing each tensor by NaN); right: what it "
             "wrote. Shapes are those of this call.", ha="center", va="bottom", fontsize=8, style="italic")
    return fig
