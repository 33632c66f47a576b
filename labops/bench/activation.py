"""Tanh and GELU at 64M float32 elements on a GPU (16M on the CPU)."""

import torch
import torch.nn.functional as F

import labops
from labops.bench import Case, fwd_bwd


# (forward, backward) operations per element, from labops.reference's formulas:
# tanh 1 / 1 - y*y times g; erf-GELU x*(1+erf(x/sqrt2))/2 / cdf + x*pdf times g; and so on.
FLOPS_PER_ELEMENT = {"tanh": (1, 3), "gelu(none)": (5, 10), "gelu(tanh)": (9, 18), "gelu(sigmoid)": (5, 9)}

# op -> (native, its name)
NATIVES = {
    "tanh": (torch.tanh, "torch.tanh"),
    "gelu(none)": (F.gelu, "F.gelu"),
    "gelu(tanh)": (lambda t: F.gelu(t, approximate="tanh"), "F.gelu(tanh)"),
    "gelu(sigmoid)": (lambda t: t * torch.sigmoid(1.702 * t), "x*sigmoid(1.702x)"),
}
# op -> labops
OURS = {
    "tanh": labops.tanh,
    "gelu(none)": labops.gelu,
    "gelu(tanh)": lambda t: labops.gelu(t, "tanh"),
    "gelu(sigmoid)": lambda t: labops.gelu(t, "sigmoid"),
}


def _elements(device, size=None):
    return size or (64 * 2**20 if device == "cuda" else 16 * 2**20)


def _dtypes(device):
    return [torch.float32, torch.float16] if device == "cuda" else [torch.float32]


def doctor_cases(randn, generator):
    """(name, labops op, native PyTorch, float64 inputs): what `labops doctor` compares, forward and backward."""
    natives = {"none": F.gelu, "tanh": lambda t: F.gelu(t, approximate="tanh"),
               "sigmoid": lambda t: t * torch.sigmoid(1.702 * t)}
    cases = [("tanh", labops.tanh, torch.tanh, [randn(101)])]
    for a in labops.GELU_APPROXIMATIONS:
        cases.append((f"gelu({a})", lambda t, a=a: labops.gelu(t, a), natives[a], [randn(101)]))
    return cases


def cases(device, size=None):
    n = _elements(device, size)
    for dtype in _dtypes(device):
        x = torch.randn(n, device=device, dtype=dtype)
        g = torch.randn(n, device=device, dtype=dtype)
        xg = x.detach().requires_grad_()
        e = x.element_size()
        fwd_bytes, bwd_bytes = 2 * n * e, 3 * n * e  # fwd: read x, write y; bwd: read g and x (or y), write dx
        shape = f"{n // 2**20}M"
        for op, (native, native_name) in NATIVES.items():
            mine = OURS[op]
            fwd_flops, bwd_flops = (n * k for k in FLOPS_PER_ELEMENT[op])
            yield Case(f"{op} fwd", shape, dtype, fwd_bytes, lambda m=mine: m(x), lambda f=native: f(x), native_name,
                       fwd_flops)
            yield Case(f"{op} fwd+bwd", shape, dtype, fwd_bytes + bwd_bytes,
                       fwd_bwd(mine, (xg,), g), fwd_bwd(native, (xg,), g), native_name, fwd_flops + bwd_flops)


# The ladder (labops.ladder, `labops bench --ladder activation`): every rung of the forward, tanh and each
# GELU, on the suite's sizes. On the CPU float32 only: float16 has one CPU rung (the textbook); on CUDA both.
def ladder_cases(device):
    n = _elements(device)
    for dtype in _dtypes(device):
        x = torch.randn(n, device=device, dtype=dtype)
        for op, (native, native_name) in NATIVES.items():
            yield Case(f"{op} fwd", f"{n // 2**20}M", dtype, 2 * n * x.element_size(), lambda m=OURS[op]: m(x),
                       lambda f=native: f(x), native_name, n * FLOPS_PER_ELEMENT[op][0])
