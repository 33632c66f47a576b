"""Tanh and GELU at 64M float32 elements on a GPU (16M on the CPU)."""

import torch
import torch.nn.functional as F

import labops
from labops.bench import Case, fwd_bwd


# (forward, backward) operations per element, from labops.reference's formulas:
# tanh 1 / 1 - y*y times g; erf-GELU x*(1+erf(x/sqrt2))/2 / cdf + x*pdf times g; and so on.
FLOPS_PER_ELEMENT = {"tanh": (1, 3), "gelu(none)": (5, 10), "gelu(tanh)": (9, 18), "gelu(sigmoid)": (5, 9)}


def doctor_cases(randn, generator):
    """(name, labops op, native PyTorch, float64 inputs): what `labops doctor` compares, forward and backward."""
    natives = {"none": F.gelu, "tanh": lambda t: F.gelu(t, approximate="tanh"),
               "sigmoid": lambda t: t * torch.sigmoid(1.702 * t)}
    cases = [("tanh", labops.tanh, torch.tanh, [randn(101)])]
    for a in labops.GELU_APPROXIMATIONS:
        cases.append((f"gelu({a})", lambda t, a=a: labops.gelu(t, a), natives[a], [randn(101)]))
    return cases


def cases(device, size=None):
    n = size or (64 * 2**20 if device == "cuda" else 16 * 2**20)
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        x = torch.randn(n, device=device, dtype=dtype)
        g = torch.randn(n, device=device, dtype=dtype)
        xg = x.detach().requires_grad_()
        e = x.element_size()
        fwd_bytes, bwd_bytes = 2 * n * e, 3 * n * e  # fwd: read x, write y; bwd: read g and x (or y), write dx
        shape = f"{n // 2**20}M"
        natives = {
            "tanh": (torch.tanh, "torch.tanh"),
            "gelu(none)": (F.gelu, "F.gelu"),
            "gelu(tanh)": (lambda t: F.gelu(t, approximate="tanh"), "F.gelu(tanh)"),
            "gelu(sigmoid)": (lambda t: t * torch.sigmoid(1.702 * t), "x*sigmoid(1.702x)"),
        }
        ours = {
            "tanh": labops.tanh,
            "gelu(none)": labops.gelu,
            "gelu(tanh)": lambda t: labops.gelu(t, "tanh"),
            "gelu(sigmoid)": lambda t: labops.gelu(t, "sigmoid"),
        }
        for op, (native, native_name) in natives.items():
            mine = ours[op]
            fwd_flops, bwd_flops = (n * k for k in FLOPS_PER_ELEMENT[op])
            yield Case(f"{op} fwd", shape, dtype, fwd_bytes, lambda m=mine: m(x), lambda f=native: f(x), native_name,
                       fwd_flops)
            yield Case(f"{op} fwd+bwd", shape, dtype, fwd_bytes + bwd_bytes,
                       fwd_bwd(mine, (xg,), g), fwd_bwd(native, (xg,), g), native_name, fwd_flops + bwd_flops)
