import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def tolerances(dtype):
    """(rtol, atol) for comparing a dtype's result with a float64 oracle."""
    return {
        torch.float64: (1e-10, 1e-12),
        torch.float32: (1e-5, 1e-6),
        torch.float16: (2e-3, 2e-3),
        torch.bfloat16: (1.6e-2, 1e-2),
    }[dtype]
