"""GELU's three forms, drawn from the compiled op and checked against the NumPy reference."""

from __future__ import annotations

import numpy as np

from labops.viz._draw import new_figure

def gelu_forms(x=None):
    """GELU's three forms (left), their derivatives (middle), and each approximation's error (right).

    Solid lines: the compiled op ``labops.gelu`` and its compiled backward
    (through autograd). Dots: ``labops.reference``'s NumPy formulas at every
    20th point, which should sit on the lines.
    """
    import torch

    from labops import ops, reference

    if x is None:
        x = torch.linspace(-4, 4, 401, dtype=torch.float64)
    forms = ops.GELU_APPROXIMATIONS
    ys, dys = {}, {}
    for form in forms:
        xg = x.detach().clone().requires_grad_()
        y = ops.gelu(xg, form)
        (dy,) = torch.autograd.grad(y, xg, torch.ones_like(y))
        ys[form], dys[form] = y.detach().numpy(), dy.numpy()
    xs = x.detach().numpy()
    every = slice(None, None, 20)
    fig, (ax_f, ax_d, ax_e) = new_figure(ncols=3, width=14.0, height=4.0)
    colours = dict(zip(forms, ["#4e79a7", "#f28e2b", "#59a14f"]))
    for form in forms:
        ax_f.plot(xs, ys[form], color=colours[form], label=f"labops.gelu('{form}')")
        ax_f.plot(xs[every], reference.gelu_forward_numpy(xs[every], form), "o", ms=3, color=colours[form])
        ax_d.plot(xs, dys[form], color=colours[form], label=f"backward ('{form}')")
        ax_d.plot(xs[every], reference.gelu_backward_numpy(np.ones_like(xs[every]), xs[every], form), "o", ms=3,
                  color=colours[form])
    for form in forms[1:]:
        ax_e.plot(xs, ys[form] - ys["none"], color=colours[form], label=f"'{form}' - 'none'")
    ax_e.axhline(0.0, color="grey", linewidth=0.8)
    ax_f.set(title="GELU(x): three forms", xlabel="x", ylabel="GELU(x)")
    ax_d.set(title="d GELU / dx (the compiled backward)", xlabel="x", ylabel="dGELU/dx")
    ax_e.set(title="error of each approximation", xlabel="x", ylabel="approximation - exact")
    for ax in (ax_f, ax_d, ax_e):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig
