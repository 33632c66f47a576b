import contextlib
import importlib

import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# float32 convolutions at full precision: with TF32 (cuDNN's default) conv2d_mm's tensor_cores rung would
# round float32 to 10 bits of mantissa, past float32's tolerance. The tests that want TF32 turn it on.
torch.backends.cudnn.conv.fp32_precision = "ieee"


@contextlib.contextmanager
def tf32_convolutions():
    """Inside: float32 convolutions may use TF32 (torch's own default, which conftest turns off)."""
    before = torch.backends.cudnn.conv.fp32_precision
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    try:
        yield
    finally:
        torch.backends.cudnn.conv.fp32_precision = before


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


class Seeded:
    """The tests' one random-input factory: float64 draws from a CPU generator seeded with ``seed``
    (the same numbers on every device), cast to ``dtype`` on ``device``.

    Each ``sample_inputs`` builds its tensors from one of these, in a fixed order, so a case is the
    same tensor wherever and whenever it runs. ``generator`` is there for other draws
    (``torch.randint``) that must come from the same sequence.
    """

    def __init__(self, device, dtype=torch.float32, seed=0):
        self.device, self.dtype = device, dtype
        self.generator = torch.Generator().manual_seed(seed)

    def randn(self, *shape, scale=1.0, shift=0.0):
        """Normal values times ``scale`` plus ``shift`` (a shift keeps sums away from cancelling)."""
        return (torch.randn(shape, generator=self.generator, dtype=torch.float64) * scale + shift).to(
            self.device, self.dtype)

    def rand(self, *shape, low=0.0, high=1.0):
        """Uniform values in [low, high)."""
        u = torch.rand(shape, generator=self.generator, dtype=torch.float64)
        return (low + (high - low) * u).to(self.device, self.dtype)


# ---- bad arguments: the helpers of every layer's ARG_RULE_CASES (tests/test_arg_rules.py runs them) ----
# Only their shapes and dtypes matter. They draw from a generator of their own, so that building a layer's
# rows when its test file is imported leaves torch's global generator where that file's tests expect it.
_ARG_GENERATOR = torch.Generator().manual_seed(0)
ONE, ZERO = [1, 1], [0, 0]  # an (h, w) pair for stride, padding or dilation


def t(*shape, dtype=torch.float32):
    """A CPU tensor of `shape` (t(()) is 0-d); integer dtypes hold zeros."""
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
    if dtype.is_floating_point:
        return torch.randn(shape, generator=_ARG_GENERATOR).to(dtype)
    return torch.zeros(shape, dtype=dtype)


def long(*shape, high=3):
    """A CPU int64 tensor of `shape` holding class indices in [0, high)."""
    return torch.randint(0, high, shape, generator=_ARG_GENERATOR)


def layer_attributes(name):
    """{layer: ``name`` of tests/test_<layer>.py} for every layer of labops._layers.LAYERS, in that order: how a
    shared test (tests/test_arg_rules.py, tests/test_autograd_nodes.py, tests/test_cuda_graphs.py) finds each
    layer's rows or samples, which sit beside the layer's other tests. Every layer states it."""
    from labops._layers import LAYERS

    found = {}
    for layer in LAYERS:
        module = importlib.import_module(f"test_{layer}")
        if not hasattr(module, name):
            raise AttributeError(f"tests/test_{layer}.py has no {name}: every layer states it")
        found[layer] = getattr(module, name)
    return found


def samples_for_each(op_samples, choices):
    """A layer's every_op_sample(device) where its op_samples(choice, device) takes one of `choices` (a
    reorg order, an upsampling mode): every op of the layer, in every choice."""

    def every_op_sample(device):
        for choice in choices:
            yield from op_samples(choice, device)

    return every_op_sample


def layer_cases(name):
    """{layer: the list ``name`` of tests/test_<layer>.py} (layer_attributes); a list may be empty."""
    return {layer: list(cases) for layer, cases in layer_attributes(name).items()}


def poison_allocator(device, nbytes=64 * 2**20):
    """Leave NaN in the CUDA caching allocator's free memory, so an output element a kernel forgets to
    write shows up as NaN instead of a lucky zero. Nothing to do on the CPU.

    Pass about the output's size: the allocator serves requests under 1 MiB from a pool of small
    blocks apart from the large ones, and the poison must land in the pool the output comes from.
    """
    if device == "cuda":
        junk = torch.full((nbytes // 4 + 4096,), float("nan"), device=device)
        del junk


def assert_one_graph_for_two_shapes(conv, weight):
    """``conv(x, weight)`` compiled with dynamic=True, run forward and backward on two batch and image sizes
    (no two sizes alike: duck sizing would tie them): the gradients match eager's and one graph serves both.
    What a backward op whose sizes are SymInt[] allows (int[] sizes would pin them and recompile)."""
    import torch._dynamo.testing

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    weight = weight.detach().requires_grad_()
    step = torch.compile(lambda x, w: conv(x, w).square().sum(), backend=counter, dynamic=True, fullgraph=True)
    for shape in ((2, 3, 8, 10), (3, 3, 11, 9)):
        x = torch.randn(*shape, requires_grad=True)
        step(x, weight).backward()
        want = torch.autograd.grad(conv(x, weight).square().sum(), (x, weight))
        torch.testing.assert_close((x.grad, weight.grad), want)
        weight.grad = None
    assert counter.frame_count == 1


def assert_compiled_matches_eager(fn, *inputs, params=(), loss=torch.sum, backend="aot_eager"):
    """``torch.compile(fn, fullgraph=True)`` gives eager's output and eager's gradients.

    Runs the compiled ``fn(*inputs)`` then the eager one, each followed by ``loss(out).backward()``,
    and compares the outputs and the gradients of every input and every tensor of ``params`` (the
    weights of a module ``fn`` calls) that requires grad. ``fullgraph`` makes a graph break an error:
    the ops must trace through their fake kernels.
    """
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    leaves = [t for t in (*inputs, *params) if isinstance(t, torch.Tensor) and t.requires_grad]
    runs = []
    for run in (compiled, fn):
        for t in leaves:
            t.grad = None
        out = run(*inputs)
        loss(out).backward()
        runs.append((out.detach(), [t.grad for t in leaves]))
    (out, grads), (expected, expected_grads) = runs
    torch.testing.assert_close(out, expected)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)


def opcheck_every(samples):
    """``torch.library.opcheck`` on every (op, args) of ``samples``: schema, autograd registration, the
    fake kernel and tracing under AOT autograd with dynamic shapes, each against the eager op.

    Each test file's ``op_samples`` builds them from its ``sample_inputs``, every op of the layer,
    as pytorch/extension-cpp's test/test_extension.py does.
    """
    for op, args in samples:
        torch.library.opcheck(op, args)


def tolerances(dtype):
    """(rtol, atol) for comparing a dtype's result with a float64 oracle."""
    return {
        torch.float64: (1e-10, 1e-12),
        torch.float32: (1e-5, 1e-6),
        torch.float16: (2e-3, 2e-3),
        torch.bfloat16: (1.6e-2, 1e-2),
    }[dtype]


# Tests tagged by the notebook that teaches their layer: `pytest -m nb07` runs notebook 07 under nbval and
# the tests of the bilinear upsampling op. The notebooks themselves get the mark of their number.
NOTEBOOK_OF_TEST_FILE = {
    "test_torch7": "nb01", "test_activation": "nb02", "test_build": "nb02", "test_simt": "nb03",
    "test_pooling": "nb04", "test_batch_norm": "nb04", "test_ladder": "nb04", "test_conv2d_mm": "nb05", "test_depthwise": "nb06", "test_upsample": "nb07",
    "test_softmax": "nb08", "test_reorg": "nb08", "test_capstone": "nb10", "test_rtc": "nb11",
    "test_rtc_layers": "nb11",
    "test_viz_race": "nb03",  # notebook 03b's figure: 03b is part of 03's mark
    "test_bench": "nb09",
    "test_cli": "nb00",  # the `labops` command notebook 00 runs (doctor)
    "test_triton": "nb12", "test_inductor": "nb12",
}


def pytest_configure(config):
    for number in range(13):
        config.addinivalue_line("markers", f"nb{number:02d}: the tests of notebook {number:02d}'s material")


def pytest_collection_modifyitems(items):
    for item in items:
        stem = item.path.stem
        numbered_notebook = stem[:2].isdigit() and "_" in stem[2:4]  # 03_... and 03b_... are both nb03
        mark = NOTEBOOK_OF_TEST_FILE.get(stem) or (f"nb{stem[:2]}" if numbered_notebook else None)
        if mark:
            item.add_marker(getattr(pytest.mark, mark))
