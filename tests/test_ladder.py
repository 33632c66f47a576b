"""The ladder (labops/ladder.py; Note [the ladder] in csrc/common/ladder.h): for each layer with one, every rung
of the forward against rung 1 (the textbook) and against the float64 native oracle, on every sample input of
the layer's own tests (odd sizes, strides, padding, dilation, channels_last, sliced and misaligned views);
last_rung names the rung that ran; with nothing forced the rung is the documented default
(ladder.DEFAULTS); a rung that cannot take an input raises ValueError, and forcing restores itself."""

import importlib
import json
import math
import pathlib

import pytest
import torch
from conftest import Seeded, poison_allocator, tolerances

import labops
from labops import bench, ladder, viz

ROOT = pathlib.Path(__file__).resolve().parents[1]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# Each layer with a ladder states its own cases beside its other tests: tests/test_<layer>.py defines
# ladder_cases(device, dtype) -> (name, op, inputs, float64 oracle, products per output) and
# ladder_refusals(device) -> (rung, op, inputs, message) for inputs a forced rung cannot take.
LADDER_LAYERS = sorted(ladder.layers())


def layer_tests(layer):
    return importlib.import_module(f"test_{layer}")


def test_every_layer_with_a_ladder_has_its_defaults_cases_and_bench():
    assert {"depthwise", "pooling"} <= set(LADDER_LAYERS)
    assert sorted(bench.LADDERS) == LADDER_LAYERS
    for layer in LADDER_LAYERS:
        assert hasattr(layer_tests(layer), "ladder_cases") and hasattr(layer_tests(layer), "ladder_refusals"), layer
        assert set(importlib.import_module(f"labops.ops.{layer}").LADDER_DEFAULTS) == {"cpu", "cuda"}, layer


@pytest.mark.parametrize("layer", LADDER_LAYERS)
@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_rungs_are_named_once_in_cpp_and_the_defaults_use_those_names(layer, where):
    names = ladder.rungs(layer, where)  # a CPU-only build names the CUDA rungs too
    assert names[0] == "textbook" and len(names) >= 2 and len(set(names)) == len(names)
    assert len(ladder.about(layer, where)) == len(names) and all(ladder.about(layer, where))
    table = ladder.DEFAULTS[(layer, where)]
    assert {d.rung for d in table} <= set(names)
    for dtype in ladder.ALL_DTYPES:  # every dtype has a default line
        assert any(dtype in d.dtypes for d in table)
    text = ladder.describe(layer, where)
    assert all(name in text for name in names)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layer", LADDER_LAYERS)
def test_every_rung_matches_the_textbook_and_the_oracle(device, layer, dtype):
    """Rung 1 against the float64 oracle, every other rung against rung 1 and the oracle; each forced rung is
    the one last_rung reports. A rung may refuse an input only with ValueError, never when it is that input's
    default, and every rung must run on some input."""
    names = ladder.rungs(layer, device)
    ran = {n: 0 for n in range(1, len(names) + 1)}
    defaults = set()  # the default rungs of this dtype's cases
    for case, op, inputs, expected, terms in layer_tests(layer).ladder_cases(device, dtype):
        if expected.numel() == 0:
            continue
        rtol, atol = tolerances(dtype)
        atol *= math.sqrt(terms)
        default = ladder.default_rung(layer, device, *inputs)
        with ladder.use(layer, "textbook"):
            poison_allocator(device)
            textbook = op(*inputs)
            assert ladder.last_rung(layer) == 1, case
        torch.testing.assert_close(textbook.double(), expected, rtol=rtol, atol=atol, msg=f"textbook: {case}")
        ran[1] += 1
        for rung in range(2, len(names) + 1):
            with ladder.use(layer, rung):
                try:
                    poison_allocator(device)
                    out = op(*inputs)
                except ValueError as exc:
                    assert rung != default, f"{case}: the default rung {rung} refused its input: {exc}"
                    assert f"layer '{layer}' rung {rung} ({names[rung - 1]}) cannot take this input" in str(exc)
                    continue
                assert ladder.last_rung(layer) == rung, case
            what = f"rung {rung} ({names[rung - 1]}): {case}"
            assert out.shape == textbook.shape and out.dtype == dtype and out.stride() == textbook.stride(), what
            torch.testing.assert_close(out.double(), textbook.double(), rtol=rtol, atol=atol, msg=f"{what} vs textbook")
            torch.testing.assert_close(out.double(), expected, rtol=rtol, atol=atol, msg=f"{what} vs oracle")
            ran[rung] += 1
        defaults.add(names[default - 1] if default else None)
    # Every rung runs on some case, but for a rung of the default table that is the default of no case of this
    # dtype: one the table gives other dtypes only (pooling's CPU simd4 adds in the data's own type: float32
    # and float64, never float16), or under a setting that is off (conv2d_mm's tensor_cores takes float32 only
    # as TF32, which conftest turns off).
    in_table = {d.rung for d in ladder.DEFAULTS[(layer, device)]}
    never = [names[n - 1] for n, k in ran.items()
             if not k and not (names[n - 1] in in_table and names[n - 1] not in defaults)]
    assert not never, f"rungs that never ran: {never}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layer", LADDER_LAYERS)
def test_the_default_rung_is_the_documented_one(device, layer, dtype):
    assert ladder.forced(layer) == 0
    for case, op, inputs, *_ in layer_tests(layer).ladder_cases(device, dtype):
        before = ladder.last_rung(layer)
        op(*inputs)
        want = ladder.default_rung(layer, device, *inputs)
        assert ladder.last_rung(layer) == (before if want is None else want), case


@pytest.mark.parametrize("layer", LADDER_LAYERS)
def test_a_rung_that_cannot_take_an_input_raises(device, layer):
    cases = list(layer_tests(layer).ladder_refusals(device))
    for rung, op, inputs, message in cases:
        last = ladder.last_rung(layer)
        with ladder.use(layer, rung), pytest.raises(ValueError, match=message) as info:
            op(*inputs)
        assert str(info.value).startswith(f"labops.{op.__name__}: layer '{layer}' ")  # the op, the layer, the rung
        assert ladder.last_rung(layer) == last  # a refused call records nothing
        assert ladder.forced(layer) == 0  # and the with block still restored the automatic choice


@pytest.mark.parametrize("rung,message", [
    (9, r"labops.ladder: layer 'pooling' has rungs 1..4 \(0: automatic\), got rung 9"),
    (-1, r"got rung -1"),
    ("nope", r"layer 'pooling' has no rung named 'nope' \(cpu: textbook, simd4; cuda: textbook, plane_groups"),
    (True, r"a rung is a number \(1 = textbook\) or a name, got True"),
    (2.0, r"a rung is a number"),
])
def test_use_refuses_a_rung_that_no_device_has(rung, message):
    with pytest.raises(ValueError, match=message):
        with ladder.use("pooling", rung):
            pass
    assert ladder.forced("pooling") == 0


def test_a_layer_without_a_ladder_is_named():
    with pytest.raises(ValueError, match="no layer 'nope' has a ladder; these do: " + ", ".join(LADDER_LAYERS)):
        ladder.rungs("nope", "cpu")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda', got 'tpu'"):
        ladder.rungs("pooling", "tpu")


def test_use_nests_and_restores_even_on_error():
    assert ladder.rung_number("depthwise", "textbook") == 1 and ladder.rung_number("pooling", "simd4") == 2
    with ladder.use("pooling", 2) as outer:
        assert outer == 2 and ladder.forced("pooling") == 2
        with ladder.use("pooling", "textbook") as inner:
            assert inner == 1 and ladder.forced("pooling") == 1
        assert ladder.forced("pooling") == 2
        with pytest.raises(RuntimeError), ladder.use("pooling", 1):
            raise RuntimeError("a failing body")
        assert ladder.forced("pooling") == 2
    assert ladder.forced("pooling") == 0 and ladder.forced("depthwise") == 0


def test_a_name_with_two_numbers_must_be_forced_by_number(monkeypatch):
    # No layer has one today ("textbook" is 1 everywhere): a stand-in ladder.
    monkeypatch.setattr(ladder, "rungs", lambda layer, device: ["textbook", "fast"] if device == "cpu"
                        else ["textbook", "packed", "fast"])
    with pytest.raises(ValueError, match=r"rung 'fast' has a different number on each device .*force it by number"):
        ladder.rung_number("pooling", "fast")


def test_forcing_changes_the_forward_only(device):
    """The backward ops have no rungs: gradients under a forced forward rung are the default's."""
    make = Seeded(device, torch.float64, seed=3)
    x, w = make.randn(2, 4, 9, 10).requires_grad_(), make.randn(4, 1, 3, 3).requires_grad_()
    grads = []
    for rung in (1, 0):
        with ladder.use("depthwise", rung):
            out = labops.depthwise_conv2d(x, w, None, 1, 1)
            grads.append(torch.autograd.grad(out.square().sum(), (x, w)))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# ---- the benchmark and its figure ----

def test_the_ladder_bench_times_every_rung_beside_native(monkeypatch, tmp_path, capsys):
    import labops.bench.pooling as suite

    monkeypatch.setattr(suite, "SHAPES_CPU", [(2, 8, 7, 7)])
    monkeypatch.setattr(bench, "copy_bandwidth", lambda device, nbytes=0: 1e10)
    path = tmp_path / "ladder.json"
    result = bench.ladder_run("pooling", "cpu", json_path=str(path), min_time=0.0)
    assert json.loads(path.read_text()) == json.loads(json.dumps(result))
    (row,) = result["rows"]
    assert result["rungs"] == ladder.rungs("pooling", "cpu") and row["default_rung"] == 2
    assert [e["rung"] for e in row["rungs"]] == [1, 2]
    assert all(e["ms"] > 0 and e["pct_copy"] > 0 and e["speedup"] > 0 for e in row["rungs"])
    out = capsys.readouterr().out
    assert "| 1 textbook" in out and "| 2 simd4*" in out and "x.mean((-2,-1), keepdim=True)" in out
    fig = viz.ladder_bars(result)
    (ax,) = fig.axes
    assert len(ax.patches) == 2 + 1  # two rungs and native, one case
    assert "pooling" in fig._suptitle.get_text() and "eager" in fig._suptitle.get_text()


def test_the_ladder_bench_reports_a_rung_that_cannot_take_a_case(monkeypatch, capsys):
    import labops.bench.pooling as suite

    def half_case(device):
        x = torch.randn(2, 8, 7, 7).half()
        yield bench.Case("global_avg_pool2d fwd", "2x8x7x7", x.dtype, 1000, lambda: labops.global_avg_pool2d(x),
                         lambda: x.mean((-2, -1), keepdim=True), "x.mean")

    monkeypatch.setattr(suite, "ladder_cases", half_case)
    monkeypatch.setattr(bench, "copy_bandwidth", lambda device, nbytes=0: 1e10)
    result = bench.ladder_run("pooling", "cpu", min_time=0.0)
    textbook, simd4 = result["rows"][0]["rungs"]
    assert "ms" in textbook and "cannot take this input" in simd4["error"] and "ms" not in simd4
    assert result["rows"][0]["default_rung"] == 1
    assert "n/a" in capsys.readouterr().out
    fig = viz.ladder_bars(result)
    assert any(t.get_text().strip() == "n/a" for t in fig.axes[0].texts)


@pytest.mark.parametrize("layer", LADDER_LAYERS)
def test_the_committed_cpu_ladders_cover_every_rung(layer):
    path = ROOT / "docs" / "benchmarks" / "ladder" / f"cpu_{layer}.json"
    result = viz.load_bench(path)
    assert result["kind"] == "ladder" and result["layer"] == layer and result["rungs"] == ladder.rungs(layer, "cpu")
    for row in result["rows"]:
        assert [e["name"] for e in row["rungs"]] == result["rungs"]
        assert all("ms" in e for e in row["rungs"]) and row["native_ms"] > 0
    fig = viz.ladder_bars(path)
    assert len(fig.axes[0].patches) == len(result["rows"]) * (len(result["rungs"]) + 1)


def test_the_cli_takes_a_ladder():
    with pytest.raises(SystemExit):
        bench.main(["--ladder", "no_such_layer", "--device", "cpu"])


@pytest.mark.parametrize("layer", LADDER_LAYERS)
def test_the_layer_page_names_every_rung_and_the_command(layer):
    text = (ROOT / "docs" / "layers" / f"{layer}.md").read_text()
    section = text.split("## The ladder", 1)[1].split("\n## ", 1)[0]
    for where in ("cpu", "cuda"):
        for number, name in enumerate(ladder.rungs(layer, where), start=1):
            assert f"| {where.upper()} | {number} | `{name}` |" in section, (where, number, name)
        assert f"python -m labops bench --ladder {layer} --device {where}" in section


def test_a_compute_bound_ladder_is_measured_against_the_matmul_peak(monkeypatch):
    import labops.bench.pooling as suite

    monkeypatch.setattr(suite, "SHAPES_CPU", [(2, 8, 7, 7)])
    monkeypatch.setattr(suite, "LADDER_ROOF", "flops", raising=False)
    monkeypatch.setattr(bench, "matmul_peaks", lambda device: {"float32": 1e9})
    result = bench.ladder_run("pooling", "cpu", print_table=False, min_time=0.0)
    assert result["roof"] == "flops" and result["peak_TFLOPs"] == {"float32": 1e-3}
    (row,) = result["rows"]
    for e in row["rungs"]:  # % of 1 GFLOP/s: the case's flops over its time
        assert e["pct_copy"] == pytest.approx(100 * row["flops"] / (e["ms"] * 1e-3) / 1e9)
    assert "% peak" in bench.format_ladder(result)
    fig = viz.ladder_bars(result)
    assert "matmul peak" in fig.axes[0].get_xlabel() and "float32 peak 0 TFLOP/s" in fig._suptitle.get_text()


@pytest.mark.parametrize("layer", LADDER_LAYERS)
def test_the_summary_a_notebook_prints_names_every_rung_of_the_committed_runs(layer):
    for where in ("cpu", "cuda"):
        path = ROOT / "docs" / "benchmarks" / "ladder" / f"{where}_{layer}.json"
        result = viz.load_bench(path)
        lines = bench.ladder_summary(path).splitlines()
        assert len(lines) == 1 + len(result["rows"])
        for line, row in zip(lines[1:], result["rows"]):
            assert all(f"{name}{'*' if n == row['default_rung'] else ''} " in line
                       for n, name in enumerate(result["rungs"], start=1)), line
