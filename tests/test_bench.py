"""`labops bench` tells noise from a result (issue #31): every timing keeps its samples' spread and count,
a row whose samples are noise is marked and explained under the table, the table prints each row once,
and conv2d_mm's two natives of one (op, shape, dtype) are told apart. Fake clocks and planted samples: no
test here depends on how busy the machine is."""

import json
import pathlib
import statistics
import sys
import types

import pytest
import torch

from labops import bench

ROOT = pathlib.Path(__file__).resolve().parents[1]
REAL_BUSY_CPU = bench.busy_cpu


class FakeClock:
    """A clock that moves only when the timed function runs: each call takes the next planted duration."""

    def __init__(self, durations_ms):
        self.now, self.durations = 0.0, list(durations_ms)

    def __call__(self):
        return self.now

    def step(self):
        self.now += self.durations.pop(0) * 1e-3


def timed(samples_ms, min_samples=None):
    """``time_ms`` of a function whose calls take ``samples_ms`` (after 3 warm-ups and the burst probe,
    all 10 ms: a burst of one call), on the fake clock."""
    clock = FakeClock([10.0] * 4 + list(samples_ms))
    return bench.time_ms(clock.step, "cpu", min_time=0.0, min_samples=min_samples or len(samples_ms), clock=clock)


STEADY = [5.00, 5.02, 4.98, 5.01, 4.99, 5.03, 4.97]
SPREAD = [5.00, 5.10, 9.00, 13.0, 5.05, 17.0, 4.95]
ON_TICK = [8.00, 8.00, 16.00, 8.00, 8.00, 8.01, 7.99]  # the multiples of 8 ms: a steady median, waits


def test_time_ms_reports_the_spread_of_its_samples():
    t = timed([1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5])
    assert t.samples == pytest.approx((1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5))
    assert float(t) == pytest.approx(5.5) and t * 2 == pytest.approx(11.0)  # still the median, as a number
    q1, _, q3 = statistics.quantiles(t.samples, n=4, method="inclusive")
    assert t.spread() == pytest.approx({"n": 9, "burst": 1, "q1_ms": q1, "q3_ms": q3, "min_ms": 1.5, "max_ms": 9.5})
    assert (q1, q3) == pytest.approx((3.5, 7.5))
    assert f"{t:.2f}" == "5.50"


def test_time_ms_divides_a_burst_into_calls():
    # 0.1 ms calls: the probe sizes a burst of 10 calls per sample; each sample is the burst's time / 10.
    clock = FakeClock([0.1] * (4 + 10 * 6))
    t = bench.time_ms(clock.step, "cpu", min_time=0.0, min_samples=6, clock=clock)
    assert t.burst == 10 and len(t.samples) == 6 and float(t) == pytest.approx(0.1)


class DriftingHost:
    """One fake clock for several functions: a call of function `name` takes its base milliseconds times a
    factor that grows by `drift` with every call made so far (a host that slows down), and is logged."""

    def __init__(self, drift=0.0):
        self.now, self.calls, self.drift = 0.0, [], drift

    def __call__(self):
        return self.now

    def function(self, name, base_ms):
        def call():
            self.now += base_ms * (1 + self.drift * len(self.calls)) * 1e-3
            self.calls.append(name)
        return call


def test_time_ms_interleaved_takes_the_samples_in_turn():
    host = DriftingHost()
    a, b = host.function("a", 10.0), host.function("b", 20.0)  # 10 ms and more: bursts of one call
    ta, tb = bench.time_ms_interleaved([a, b], "cpu", samples=3, clock=host)
    assert host.calls == ["a"] * 4 + ["b"] * 4 + ["a", "b"] * 3  # 3 warm-ups and the probe each, then in turn
    assert ta.samples == pytest.approx((10.0,) * 3) and tb.samples == pytest.approx((20.0,) * 3)
    assert ta.burst == tb.burst == 1


def test_interleaving_keeps_a_ratio_that_a_drifting_host_bends():
    # b takes twice a's time; the host slows by 5 % a call. Timed in turn, the ratio stays near 2; timed
    # one after the other (time_ms twice), b meets a slower host than a did.
    host = DriftingHost(drift=0.05)
    ta, tb = bench.time_ms_interleaved([host.function("a", 10.0), host.function("b", 20.0)], "cpu", samples=5,
                                       clock=host)
    assert tb / ta == pytest.approx(2.0, rel=0.05)
    host = DriftingHost(drift=0.05)
    ta = bench.time_ms(host.function("a", 10.0), "cpu", min_time=0.0, min_samples=5, clock=host)
    tb = bench.time_ms(host.function("b", 20.0), "cpu", min_time=0.0, min_samples=5, clock=host)
    assert tb / ta > 2.2


def test_a_steady_timing_is_not_noise():
    assert timed(STEADY).noise() == []


def test_a_wide_spread_is_noise():
    (why,) = timed(SPREAD).noise()
    assert "middle half of 7 samples" in why and "% of the median" in why


def test_samples_on_the_scheduler_tick_are_noise_even_when_steady():
    t = timed(ON_TICK)
    assert t.q3 - t.q1 == pytest.approx(0.0, abs=0.02)  # the spread alone would not tell
    assert t.on_tick() == 7
    (why,) = t.noise()
    assert "7 of 7 samples" in why and "scheduler ticks" in why
    # On a GPU the samples are CUDA-event times: no scheduler tick to land on.
    assert bench.Timing(ON_TICK, 1, "cuda").noise() == []


def test_too_few_samples_is_noise():
    (why,) = timed([5.0, 5.0], min_samples=2).noise()
    assert "only 2 samples" in why


def test_busy_cpu():
    assert bench.busy_cpu(load=0.3, cpus=2) is None
    busy = bench.busy_cpu(load=3.1, cpus=2)
    assert "busy" in busy and "3.1" in busy and "2 CPUs" in busy


# ---- run(): the table, each row once, the warning under it ----

def _fake_suite(monkeypatch, rows):
    """A suite ``fake`` whose cases' labops and native callables return planted samples (ms), timed by a
    ``time_ms`` that only reads them; copy bandwidth fixed at 10 GB/s."""
    module = types.ModuleType("labops.bench.fake")

    def cases(device, size=None):
        for op, native_name, lab, nat in rows:
            yield bench.Case(op, "1M", torch.float32, 8 * 2**20, lambda s=lab: s, lambda s=nat: s, native_name)

    module.cases = cases
    monkeypatch.setitem(sys.modules, "labops.bench.fake", module)
    monkeypatch.setattr(bench, "time_ms", lambda fn, device, min_time=0.2: bench.Timing(fn(), 1, device))
    monkeypatch.setattr(bench, "copy_bandwidth", lambda device: 10e9)
    monkeypatch.setattr(bench, "busy_cpu", lambda: None)


def _table_rows(out):
    return [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| ! | op")]


def test_a_steady_run_prints_each_row_once_and_no_warning(monkeypatch, capsys, tmp_path):
    _fake_suite(monkeypatch, [("tanh fwd", "torch.tanh", STEADY, [2 * s for s in STEADY]),
                              ("tanh fwd+bwd", "torch.tanh", STEADY, STEADY)])
    header, results = bench.run("cpu", ["fake"], json_path=tmp_path / "fake.json")
    out = capsys.readouterr().out
    assert out.count(header) == 1
    rows = _table_rows(out)
    assert len(rows) == 2 and sum("tanh fwd+bwd" in line for line in out.splitlines()) == 1
    assert rows[0].startswith("|  | tanh fwd | torch.tanh | 1M | float32 | 5 (4.985-5.015) n=7 | 10 (9.97-10.03) n=7")
    assert "2.00x (1.99-2.01)" in rows[0]
    assert "WARNING" not in out and "!" not in "".join(rows)
    assert results[0].speedup_range == pytest.approx([9.97 / 5.015, 10.03 / 4.985])
    data = json.loads((tmp_path / "fake.json").read_text())
    assert data["rows"][0]["labops_spread"]["n"] == 7 and data["rows"][0]["noise"] == []


def test_a_noisy_row_is_marked_and_explained(monkeypatch, capsys):
    _fake_suite(monkeypatch, [("tanh fwd", "torch.tanh", STEADY, STEADY),
                              ("gelu fwd", "F.gelu", ON_TICK, SPREAD)])
    monkeypatch.setattr(bench, "busy_cpu", lambda: REAL_BUSY_CPU(load=3.0, cpus=2))
    bench.run("cpu", ["fake"], progress=True)
    captured = capsys.readouterr()
    out = captured.out
    rows = _table_rows(out)
    assert len(rows) == 2 and rows[0].startswith("|  | tanh fwd") and rows[1].startswith("| ! | gelu fwd")
    warning = out[out.index("WARNING"):]
    assert "1 of 2 rows are noise" in warning
    assert "! gelu fwd vs F.gelu" in warning and "labops: 7 of 7 samples" in warning and "F.gelu: the middle half" in warning
    assert "tanh fwd" not in warning
    assert "CPU is busy: load average 3.0 on 2 CPUs" in warning
    assert "rerun on an idle machine" in warning and "--size" in warning and "--min-time" in warning
    # Progress lines go to stderr, one per row; stdout still has the table once.
    assert len(captured.err.strip().splitlines()) == 2 and "(noise)" in captured.err.splitlines()[1]


def test_conv2d_mm_rows_name_their_native(monkeypatch, capsys):
    from labops.bench import conv2d_mm

    cases = list(conv2d_mm.cases("cpu", 1))
    keys = [(c.op, c.shape, c.dtype) for c in cases]
    assert len(set(keys)) < len(keys), "the suite compares one conv2d_mm case with two natives"
    assert len({(c.op, c.native_name, c.shape, c.dtype) for c in cases}) == len(cases)
    monkeypatch.setattr(bench, "time_ms", lambda fn, device, min_time=0.2: bench.Timing(STEADY, 1, device))
    monkeypatch.setattr(bench, "copy_bandwidth", lambda device: 10e9)
    monkeypatch.setattr(bench, "busy_cpu", lambda: None)
    bench.run("cpu", ["conv2d_mm"], size=1)
    rows = _table_rows(capsys.readouterr().out)
    labels = [tuple(cell.strip() for cell in line.split("|")[2:5]) for line in rows]  # op, vs, shape
    assert len(rows) == len(cases) and len(set(labels)) == len(labels)
    assert ("conv2d_mm fwd", "F.unfold+matmul", "1x128x28x28 -> 128 k3 p1") in labels
    assert ("conv2d_mm fwd", "F.conv2d", "1x128x28x28 -> 128 k3 p1") in labels


def test_committed_tables_still_print(capsys, tmp_path):
    """Tables written before the spread existed print as before; a new one adds its spread and noise."""
    from labops import viz

    old = viz.load_bench(ROOT / "docs" / "benchmarks" / "conv2d_mm.json")
    bench.print_rows(old, dtype="float32", op="conv2d_mm fwd")
    out = capsys.readouterr().out
    assert "vs F.conv2d (cuDNN)" in out and "quartiles" not in out and "noise" not in out
    row = dict(old["rows"][0], labops_ms=5.0, labops_spread=timed(STEADY).spread(), native_spread=timed(SPREAD).spread(),
               speedup_range=[0.5, 2.0], noise=["F.unfold: the middle half of 7 samples spans ..."])
    bench.print_rows(dict(old, rows=[row]))
    out = capsys.readouterr().out
    assert "labops 5 (4.985-5.015) n=7" in out and "speedup 0.50-2.00x" in out and "! noise: F.unfold" in out


def test_bench_bars_label_noisy_rows():
    import matplotlib

    matplotlib.use("Agg")
    from labops import viz

    old = viz.load_bench(ROOT / "docs" / "benchmarks" / "activation.json")
    rows = [dict(old["rows"][0], noise=["labops: 7 of 7 samples last a whole number of 4 ms scheduler ticks"]),
            old["rows"][1]]
    fig = viz.bench_bars(dict(old, rows=rows))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0].endswith("(! noise)") and "noise" not in labels[1]
    import matplotlib.pyplot as plt

    plt.close(fig)
