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


# Tests tagged by the notebook that teaches their layer: `pytest -m nb07` runs notebook 07 under nbval and
# the tests of the bilinear upsampling op. The notebooks themselves get the mark of their number.
NOTEBOOK_OF_TEST_FILE = {
    "test_legacy": "nb01", "test_activation": "nb02", "test_build": "nb02", "test_simt": "nb03",
    "test_pooling": "nb04", "test_conv2d_mm": "nb05", "test_depthwise": "nb06", "test_upsample": "nb07",
    "test_softmax": "nb08", "test_reorg": "nb08", "test_capstone": "nb10", "test_rtc": "nb11",
}


def pytest_configure(config):
    for number in range(12):
        config.addinivalue_line("markers", f"nb{number:02d}: the tests of notebook {number:02d}'s material")


def pytest_collection_modifyitems(items):
    for item in items:
        stem = item.path.stem
        numbered_notebook = stem[:2].isdigit() and stem[2:3] == "_"
        mark = NOTEBOOK_OF_TEST_FILE.get(stem) or (f"nb{stem[:2]}" if numbered_notebook else None)
        if mark:
            item.add_marker(getattr(pytest.mark, mark))
