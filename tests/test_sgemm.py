"""labops.sgemm: every step of the GEMM ladder against float64 on ragged sizes, on every device."""

import pytest
import torch

from labops import sgemm


@pytest.mark.parametrize("step", list(sgemm.LADDER))
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (37, 50, 21), (130, 9, 257)], ids=str)
def test_every_step_multiplies(device, step, m, k, n):
    g = torch.Generator().manual_seed(m * 1000 + n)
    a = torch.randn(m, k, generator=g, dtype=torch.float64)
    b = torch.randn(k, n, generator=g, dtype=torch.float64)
    c = sgemm.multiply(a.float().to(device), b.float().to(device), step)
    torch.testing.assert_close(c.double().cpu(), a.float().double() @ b.float().double(), rtol=1e-5, atol=1e-5)


def test_bad_arguments_name_the_rule():
    a = torch.randn(4, 3)
    with pytest.raises(ValueError, match="step must be one of naive, tiled, register_blocked"):
        sgemm.multiply(a, a.T.contiguous(), "fast")
    with pytest.raises(ValueError, match=r"A's columns must equal B's rows, got A \(4, 3\) and B \(4, 3\)"):
        sgemm.multiply(a, a)
    with pytest.raises(TypeError, match="B must be a 2-D float32 tensor"):
        sgemm.multiply(a, a.double().T)
