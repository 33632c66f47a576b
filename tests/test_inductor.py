"""labops.inductor: what torch.compile writes, read back as kernels (notebook 12)."""

import torch
import torch.nn.functional as F

from labops.inductor import generated_kernels, parse_module


def test_gelu_compiles_to_one_fused_kernel_each_way():
    graphs = generated_kernels(F.gelu, torch.randn(300, requires_grad=True))
    assert [g.graph for g in graphs] == ["forward", "backward"]
    for g in graphs:
        assert len(g.kernels) == 1 and g.library_calls == []
        assert g.kernels[0].language == "cpp" and "erf" in g.kernels[0].source
    assert "backward" in graphs[1].kernels[0].name


def test_a_convolution_stays_a_library_call():
    x, w, b = (torch.randn(*s, requires_grad=True) for s in [(2, 8, 6, 6), (4, 8, 3, 3), (4,)])
    forward = generated_kernels(lambda x, w, b: F.gelu(F.conv2d(x, w, b, padding=1)), x, w, b)[0]
    assert "convolution" in forward.library_calls and forward.kernels


def test_a_triton_module_is_read_too():
    module = ("triton_poi_fused_gelu_0 = async_compile.triton('triton_poi_fused_gelu_0', '''\nimport triton\n"
              "@triton.jit\ndef triton_poi_fused_gelu_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n"
              "    pass\n''', device_str='cuda')\nextern_kernels.mm(buf0, buf1, out=buf2)\n")
    g = parse_module(module, "forward")
    assert [(k.name, k.language) for k in g.kernels] == [("triton_poi_fused_gelu_0", "python")]
    assert g.kernels[0].source.startswith("import triton") and g.library_calls == ["mm"]
