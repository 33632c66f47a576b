"""labops.viz: every figure function returns a Figure with the expected artists, drawn from real data."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from labops import simt, viz  # noqa: E402


def grid_stride_trace(n, grid, block):
    """What a grid-stride launch writes (tests/test_simt.py checks rtc's recorded launches give exactly this)."""
    threads = grid * block
    return simt.Trace(simt.Dim3(grid), simt.Dim3(block),
                      [simt.Access(e, (e % threads) // block, e % block, e // threads) for e in range(n)])


def rendered(fig):
    assert isinstance(fig, Figure)
    fig.canvas.draw()  # every artist must render with Agg
    return fig


def test_thread_map_one_cell_per_element():
    trace = grid_stride_trace(20, 2, 4)
    fig = rendered(viz.thread_map(trace))
    (ax,) = fig.axes
    assert len(ax.patches) == 20
    assert "n = 20" in ax.get_title() and "2 block(s) x 4 threads" in ax.get_title()
    assert ax.get_xlabel() and ax.get_ylabel()
    texts = [t.get_text() for t in ax.texts]
    assert texts[9] == "b0\nt1"  # element 9: block 0, thread 1
    # Rows are one loop trip long (8 = 2 x 4 threads); hatches say the iteration.
    hatches = [p.get_hatch() or "" for p in ax.patches]
    assert hatches[:8] == [""] * 8 and hatches[8:16] == ["//"] * 8 and hatches[16:] == ["\\\\"] * 4
    # Legend: the 2 blocks and the 3 iterations.
    assert len(ax.get_legend().get_patches()) == 5


def test_thread_map_shows_untouched_and_repeated_elements():
    # forgets the loop (only the first 4 of 6 elements), and thread 0 writes element 0 twice
    short = simt.Trace(simt.Dim3(1), simt.Dim3(4), [simt.Access(e, 0, e, 0) for e in range(4)]
                       + [simt.Access(0, 0, 0, 1)])
    fig = rendered(viz.thread_map(short, n=6))
    (ax,) = fig.axes
    texts = [t.get_text() for t in ax.texts]
    assert texts[4:] == ["none", "none"] and texts[0].endswith("x2")
    assert len(ax.patches) == 6


@pytest.mark.parametrize("grid, block, n, labelled", [(2, 8, 50, True), (3, 32, 1000, False),
                                                      (8, 32, 64, False), (1, 4, 3, True)])
def test_thread_map_fits_the_feedback_page(grid, block, n, labelled):
    # nbgrader's feedback page shows it at dpi 90: at most 8 inches (720 pixels) wide, however long the rows
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = rendered(viz.thread_map(grid_stride_trace(n, grid, block), n=n))
    assert fig.get_figwidth() <= 8.0
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # lays the figure out as savefig does
    drawn = fig.get_tightbbox(canvas.get_renderer())  # inches: title, labels, legend
    assert -0.02 <= drawn.x0 and drawn.x1 <= fig.get_figwidth() + 0.02
    assert -0.02 <= drawn.y0 and drawn.y1 <= fig.get_figheight() + 0.02
    (ax,) = fig.axes
    assert len(ax.patches) == n
    assert len(ax.texts) == (n if labelled else 0)  # cells too narrow for a label get none


def test_gelu_forms_lines_and_data():
    fig = rendered(viz.gelu_forms())
    ax_f, ax_d, ax_e = fig.axes
    assert [len(ax.lines) for ax in fig.axes] == [6, 6, 3]
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    from labops import reference

    # Solid lines (compiled op) sit on the reference dots.
    for k, form in enumerate(("none", "tanh", "sigmoid")):
        x, y = ax_f.lines[2 * k].get_data()
        np.testing.assert_allclose(y, reference.gelu_forward_numpy(x, form), rtol=1e-12, atol=1e-14)
        x, dy = ax_d.lines[2 * k].get_data()
        np.testing.assert_allclose(dy, reference.gelu_backward_numpy(np.ones_like(x), x, form), rtol=1e-10,
                                   atol=1e-12)
    # The sigmoid form is the coarser approximation.
    tanh_err = np.abs(ax_e.lines[0].get_ydata()).max()
    sigmoid_err = np.abs(ax_e.lines[1].get_ydata()).max()
    assert 1e-4 < tanh_err < 1e-3 < 1e-2 < sigmoid_err < 3e-2


def bench_result():
    rows = []
    for op, lab, nat in [("tanh fwd", 88.0, 95.0), ("gelu(sigmoid) fwd", 85.0, 29.0), ("gelu(sigmoid) fwd+bwd", 80.0, 24.0)]:
        for dtype in ("float32", "float16"):
            rows.append({"op": op, "shape": "64M", "dtype": dtype, "native_name": "native", "labops_ms": 1.0,
                         "native_ms": lab / nat, "labops_pct_copy": lab, "native_pct_copy": nat,
                         "speedup": lab / nat})
    return {"device": "NVIDIA H100 80GB HBM3", "torch": "2.13.0", "copy_GBps": 3000.0, "date": "2025-06-01",
            "rows": rows}


def test_bench_bars(tmp_path):
    path = tmp_path / "activation.json"
    path.write_text(json.dumps(bench_result()))
    fig = rendered(viz.bench_bars(path))
    (ax,) = fig.axes
    assert len(ax.patches) == 12  # a labops and a native bar per row
    widths = sorted(p.get_width() for p in ax.patches)
    assert widths == sorted([r["labops_pct_copy"] for r in bench_result()["rows"]]
                            + [r["native_pct_copy"] for r in bench_result()["rows"]])
    title = fig.get_suptitle()
    assert "H100" in title and "2025-06-01" in title and "3000 GB/s" in title
    assert "% of copy bandwidth" in ax.get_xlabel()
    assert len(ax.lines) == 1 and ax.lines[0].get_xdata()[0] == 100.0  # the copy-bandwidth line
    assert [t.get_text() for t in ax.texts][2] == "2.93x"  # rows keep their order
    assert "native PyTorch: native" in [t.get_text() for t in ax.get_legend().get_texts()]

    fig16 = rendered(viz.bench_bars(bench_result(), dtype="float16"))
    assert len(fig16.axes[0].patches) == 6
    assert all("float16" in t.get_text() for t in fig16.axes[0].get_yticklabels())


def test_bench_bars_graph_timing():
    result = bench_result()
    for i, r in enumerate(result["rows"]):  # the last row could not be captured
        graph = i < len(result["rows"]) - 1
        r.update(labops_graph_pct_copy=r["labops_pct_copy"] + 5 if graph else None,
                 native_graph_pct_copy=r["native_pct_copy"] + 1 if graph else None,
                 graph_speedup=2.0 if graph else None)
    fig = rendered(viz.bench_bars(result, timing="graph"))
    (ax,) = fig.axes
    widths = [p.get_width() for p in ax.patches]
    assert widths[:5] == [r["labops_pct_copy"] + 5 for r in result["rows"][:5]] and widths[5] == 0.0
    texts = [t.get_text() for t in ax.texts]
    assert texts[0] == "2.00x" and "synchronizes" in texts[-1]
    assert "CUDA graph" in fig.get_suptitle()
    with pytest.raises(ValueError, match="timing"):
        viz.bench_bars(result, timing="fast")


def test_bench_bars_draws_peers():
    """Each peer a row was timed against gets its own bar and its speedup in the row's text;
    a peer that failed to run gets neither."""
    result = bench_result()
    result["rows"][0]["peers"] = {"torch.compile": {"pct_copy": 91.0, "speedup": 0.97, "graph_pct_copy": 93.0,
                                                    "graph_speedup": 0.95}}
    result["rows"][1]["peers"] = {"torch.compile": {"error": "RuntimeError: no"}}
    result["rows"][2]["peers"] = {"cuDNN channels_last": {"pct_copy": 40.0, "speedup": 2.1}}
    fig = rendered(viz.bench_bars(result))
    (ax,) = fig.axes
    assert len(ax.patches) == 12 + 2
    widths = [p.get_width() for p in ax.patches]
    assert 91.0 in widths and 40.0 in widths
    texts = [t.get_text() for t in ax.texts]
    assert texts[0] == "2.93x".replace("2.93", f"{88.0 / 95.0:.2f}") + "\nvs torch.compile 0.97x"
    assert "vs" not in texts[1] and texts[2].endswith("vs cuDNN channels_last 2.10x")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "torch.compile" in legend and "cuDNN channels_last" in legend
    graph = rendered(viz.bench_bars(result, timing="graph")).axes[0]
    assert 93.0 in [p.get_width() for p in graph.patches]


@pytest.mark.parametrize("c,h,w,k,s,p,d", [
    (1, 4, 4, 3, 1, 0, 1), (2, 4, 5, 3, 1, 1, 1), (3, 7, 6, (2, 3), (2, 1), (1, 0), 1), (2, 9, 8, 3, 2, 2, 2),
])
def test_im2col_numpy_equals_unfold(c, h, w, k, s, p, d):
    x = torch.randn(c, h, w, dtype=torch.float64, generator=torch.Generator().manual_seed(c * 100 + h))
    expected = F.unfold(x[None], k, dilation=d, padding=p, stride=s)[0]
    np.testing.assert_array_equal(viz.im2col_numpy(x.numpy(), k, s, p, d), expected.numpy())


def test_im2col_figure():
    x = np.arange(2 * 4 * 4, dtype=np.float64).reshape(2, 4, 4) + 1
    fig = rendered(viz.im2col_figure(x, 3, padding=1, highlight=(1, 2)))
    assert len(fig.axes) == 3  # two channels, then the columns matrix
    assert [len(ax.patches) for ax in fig.axes] == [9, 9, 18]  # the receptive field; the column's 18 rows
    assert "18 x 16" in fig.axes[-1].get_title()
    assert fig.get_suptitle().startswith("im2col: kernel 3x3")
    # The outlined column holds exactly the outlined input values (0 in the padding).
    col = 1 * 4 + 2
    assert all(p.get_x() == col - 0.5 for p in fig.axes[-1].patches)
    field = sorted(x[c, iy - 1, ix - 1] if 1 <= iy <= 4 and 1 <= ix <= 4 else 0.0
                   for c in range(2) for iy, ix in [(int(q.get_y() + 0.5), int(q.get_x() + 0.5))
                                                   for q in fig.axes[c].patches])
    assert field == sorted(viz.im2col_numpy(x, 3, 1, 1)[:, col])

    cols = torch.from_numpy(viz.im2col_numpy(x, 3, 1, 1))
    assert len(rendered(viz.im2col_figure(x, 3, padding=1, columns=cols)).axes) == 3
    with pytest.raises(ValueError, match="highlight must be inside"):
        viz.im2col_figure(x, 3, padding=1, highlight=(4, 0))
    with pytest.raises(ValueError, match="columns must have shape"):
        viz.im2col_figure(x, 3, padding=1, columns=cols[:, :3])
    # Sizes are read by labops._checks.pair, with the ops' own words.
    with pytest.raises(ValueError, match=r"labops\.viz\.im2col_figure: stride must be >= 1, got \[0, 1\]"):
        viz.im2col_figure(x, 3, stride=(0, 1))
    with pytest.raises(TypeError, match="padding must be an int or a pair of ints"):
        viz.im2col_figure(x, 3, padding=1.5)


def test_draw_matrix_and_new_figure():
    fig, axes = viz.new_figure(ncols=2)
    assert len(axes) == 2
    patches = viz.draw_matrix(axes[0], np.eye(3), title="t", xlabel="x", ylabel="y", highlight=[(0, 0), (2, 1)])
    assert len(patches) == 2 and len(axes[0].texts) == 9 and len(axes[0].images) == 1
    rendered(fig)


# ---- upsample ----

def test_upsample_sampling_positions_follow_the_reference():
    from labops import reference

    fig = rendered(viz.upsample_sampling_positions(((4, 8), (8, 3))))
    assert len(fig.axes) == 2
    for ax, (n_in, n_out) in zip(fig.axes, [(4, 8), (8, 3)]):
        assert f"{n_in} -> {n_out}" in ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        assert len(ax.patches) == n_in  # one cell per source pixel
        lines = {line.get_label(): line for line in ax.lines}
        for row, mode in enumerate(reference.COORDINATE_MODES):
            x, y = lines[mode].get_data()
            np.testing.assert_array_equal(x, [reference.source_coordinate(i, n_in, n_out, mode)
                                              for i in range(n_out)])
            assert (y == row).all()
    # 4 -> 8 half_pixel: output 0 points at -0.25 before the clamp (a hollow marker); 8 -> 3 clamps nothing.
    clamped = {line.get_label(): line for line in fig.axes[0].lines}["half_pixel before the clamp at 0"]
    assert clamped.get_xdata().tolist() == [-0.25]
    assert "half_pixel before the clamp at 0" not in [line.get_label() for line in fig.axes[1].lines]
    # asymmetric 4 -> 8 reads 0, 0.5, ..., 3.5; align_corners ends exactly on the last pixel.
    lines = {line.get_label(): line for line in fig.axes[0].lines}
    assert lines["asymmetric"].get_xdata().tolist() == [0.5 * i for i in range(8)]
    assert lines["align_corners"].get_xdata()[-1] == 3.0


def test_upsample_sampling_positions_with_scale_factor():
    # F.interpolate(scale_factor=1.7) on 7 pixels: 11 outputs stepping by 1/1.7, not 7/11.
    fig = rendered(viz.upsample_sampling_positions(((7, 11),), modes=("asymmetric",), scale_factor=1.7))
    (ax,) = fig.axes
    np.testing.assert_allclose(ax.lines[0].get_xdata(), np.arange(11) / 1.7)


@pytest.mark.parametrize("mode", ["half_pixel", "align_corners", "asymmetric"])
def test_upsample_gradient_flow_scatter_and_gather_agree(mode):
    from labops import reference

    h, w, oh, ow, (oy, ox) = 4, 5, 8, 7, (3, 4)
    fig = rendered(viz.upsample_gradient_flow((h, w), (oh, ow), mode, output_pixel=(oy, ox)))
    ax_s, ax_g = fig.axes
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    a_h = reference.interpolation_matrix(h, oh, mode)
    a_w = reference.interpolation_matrix(w, ow, mode)
    # Left: the output pixel's weights over the input = row oy of A_h times row ox of A_w.
    scatter = ax_s.images[0].get_array()
    np.testing.assert_allclose(scatter, np.outer(a_h[oy], a_w[ox]), atol=1e-15)
    assert len(ax_s.patches) == int((np.outer(a_h[oy], a_w[ox]) != 0).sum()) <= 4
    # Right: the outputs that read the default input pixel (the top-left tap), with their weights.
    ih, iw = reference.source_taps(oy, h, oh, mode)[0], reference.source_taps(ox, w, ow, mode)[0]
    gather = ax_g.images[0].get_array()
    np.testing.assert_allclose(gather, np.outer(a_h[:, ih], a_w[:, iw]), atol=1e-15)
    assert len(ax_g.patches) == int((gather != 0).sum())
    assert f"input ({ih}, {iw})" in ax_g.get_title()
    # The same weight seen from both sides: output (oy, ox) reads input (ih, iw) with it.
    assert scatter[ih, iw] == gather[oy, ox] != 0
    # Only nonzero weights are written in the cells.
    assert len(ax_s.texts) == len(ax_s.patches) and len(ax_g.texts) == len(ax_g.patches)


def test_upsample_gradient_flow_bad_pixels():
    with pytest.raises(ValueError, match="output_pixel must be inside"):
        viz.upsample_gradient_flow((4, 4), (8, 8), output_pixel=(8, 0))
    with pytest.raises(ValueError, match="input_pixel must be inside"):
        viz.upsample_gradient_flow((4, 4), (8, 8), input_pixel=(0, 4))
    with pytest.raises(ValueError, match=r"out_hw must have 2 entries \(h, w\), got 3"):
        viz.upsample_gradient_flow((4, 4), (8, 8, 8))


def test_upsample_mode_difference():
    img = np.add.outer(np.arange(6.0), np.zeros(5)) + np.arange(5.0) * 10  # a ramp: 10 per column, 1 per row
    fig = rendered(viz.upsample_mode_difference(img, (12, 10)))
    assert len(fig.axes) == 5  # two outputs, the difference, then the two colour bars
    half, asym, diff = (fig.axes[i].images[0].get_array() for i in (0, 1, 2))
    expected_half = F.interpolate(torch.from_numpy(img)[None, None], size=(12, 10), mode="bilinear")[0, 0]
    np.testing.assert_allclose(half, expected_half.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(diff, half - asym)
    # Inside the image the ramp shows the shift: half_pixel reads a quarter pixel earlier in each direction.
    np.testing.assert_allclose(diff[1:-2, 1:-2], -0.25 * 10 - 0.25 * 1, atol=1e-12)
    assert f"max |d| {np.abs(diff).max():.3f}" in fig.axes[2].get_title()
    with pytest.raises(ValueError, match="one \\(H, W\\) image"):
        viz.upsample_mode_difference(img[None], (12, 10))


def test_reorg_channel_maps():
    from labops.reference import reorg as ref_reorg

    fig = rendered(viz.reorg_channel_maps((1, 4, 4, 4), 2))
    assert len(fig.axes) == 3
    assert [ax.get_title() for ax in fig.axes] == ["order = 'darknet'", "order = 'dcr'", "order = 'crd'"]
    x = np.arange(64).reshape(1, 4, 4, 4)
    for ax, order in zip(fig.axes, ("darknet", "dcr", "crd")):
        assert len(ax.images) == 1 and len(ax.texts) == 16 * 4
        expected = ref_reorg.reorg_forward_numpy(x, 2, order)[0].reshape(16, 4) // 16  # source channel
        np.testing.assert_array_equal(ax.images[0].get_array(), expected)
    assert len(fig.legends[0].get_patches()) == 4
    with pytest.raises(ValueError, match="N = 1"):
        viz.reorg_channel_maps((2, 4, 4, 4))


def test_explore_draws_the_initial_figure_and_redraws_on_a_control(monkeypatch):
    pytest.importorskip("IPython")
    import IPython.display

    from labops import simt, viz

    shown, drawn = [], []

    class Handle:
        def update(self, obj):
            shown.append(obj)

    def fake_display(obj, display_id=False):
        shown.append(obj)
        return Handle() if display_id else None

    monkeypatch.setattr(IPython.display, "display", fake_display)

    def draw(n, blocks):
        drawn.append((n, blocks))
        return viz.thread_map(grid_stride_trace(n, blocks, 4))

    controls = viz.explore(draw, n=(1, 64, 20), blocks=(1, 8, 2))
    assert drawn == [(20, 2)]
    assert isinstance(shown[0], IPython.display.Image) and shown[0].data[:4] == b"\x89PNG"
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        assert controls == {}
        return
    controls["n"].value = 33
    assert drawn[-1] == (33, 2) and isinstance(shown[-1], IPython.display.Image)


def _roofline_data():
    """Two ops a decade of intensity apart, against a copy line and one peak, as roofline() writes them."""
    return {"device": "test", "torch": "x", "date": "2026-01-01", "copy_GBps": 100.0, "peak_TFLOPs": {"float32": 1.0},
            "points": [
                # 1 FLOP/B at 100 GB/s -> memory roof 100 GFLOP/s; achieved 50 GFLOP/s (1e6 FLOPs in 0.02 ms)
                {"impl": "labops", "op": "gelu fwd", "shape": "s", "dtype": "float32", "flops": 1e6, "nbytes": 1e6,
                 "ms": 0.02},
                # 100 FLOP/B -> compute roof 1 TFLOP/s; achieved 0.25 TFLOP/s
                {"impl": "labops", "op": "conv fwd+bwd", "shape": "s", "dtype": "float32", "flops": 1e9,
                 "nbytes": 1e7, "ms": 4.0},
                {"impl": "labops", "op": "reorg fwd", "shape": "s", "dtype": "float32", "flops": 0, "nbytes": 1e6,
                 "ms": 0.02},
                {"impl": "native", "op": "conv fwd+bwd", "shape": "s", "dtype": "float32", "flops": 1e9,
                 "nbytes": 1e7, "ms": 2.0},
            ]}


def test_roofline_places_points_and_names_the_ops_without_arithmetic():
    fig = viz.roofline(_roofline_data(), "float32")
    (ax,) = fig.axes
    drawn = [(line.get_xdata()[0], line.get_ydata()[0]) for line in ax.lines if len(line.get_xdata()) == 1]
    assert sorted(drawn) == [(1.0, pytest.approx(5e10)), (100.0, pytest.approx(2.5e11))]  # native left out
    roof = next(line for line in ax.lines if len(line.get_xdata()) > 1)
    x, y = roof.get_xdata(), roof.get_ydata()
    assert np.allclose(y, np.minimum(1e11 * x, 1e12))  # copy slope, then the flat peak
    assert "reorg" in ax.get_title()
    both = viz.roofline(_roofline_data(), "float32", impls=("labops", "native"))
    assert sum(len(line.get_xdata()) == 1 for line in both.axes[0].lines) == 3


def test_print_roofline_names_the_bound_and_the_share_of_it(capsys):
    from labops import bench

    bench.print_roofline(_roofline_data(), "float32")
    out = capsys.readouterr().out
    assert "ridge at 10.0 FLOPs per byte" in out
    gelu, conv = (line for line in out.splitlines() if line.startswith("labops"))
    assert "memory" in gelu and gelu.rstrip().endswith("50 %")
    assert "compute" in conv and conv.rstrip().endswith("25 %")
    assert "reorg" not in out


def test_the_committed_roofline_covers_every_suite_with_flops():
    data = json.loads((Path(__file__).resolve().parents[1] / "docs" / "roofline_cuda.json").read_text())
    layers = {p["op"].split(" ")[0].split("(")[0] for p in data["points"] if p["impl"] == "labops"}
    assert {"tanh", "gelu", "bilinear", "depthwise3x3", "im2col", "col2im", "conv2d_mm", "global_avg_pool2d",
            "reorg", "softmax", "cross_entropy"} <= layers
    assert all(p["flops"] > 0 for p in data["points"] if not p["op"].startswith(("im2col", "reorg")))
    assert set(data["peak_TFLOPs"]) == {"float32", "tf32", "float16"}


def test_bandwidth_by_size_draws_one_line_per_implementation_and_the_copy():
    rows = [{"n": n, "bytes": 8 * n, "copy": {"graph_GBps": 2.0 * n}, "ours": {"graph_GBps": 1.5 * n},
             "theirs": {"graph_GBps": float(n)}} for n in (2**10, 2**12, 2**14)]
    fig = rendered(viz.bandwidth_by_size({"device": "GPU", "date": "2026-11-26", "dtype": "float32", "rows": rows}))
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines] == ["copy of the same size", "ours", "theirs"]
    assert list(ax.lines[1].get_ydata()) == [1.5 * 2**10, 1.5 * 2**12, 1.5 * 2**14]
    assert ax.get_xscale() == "log" and "GPU, 2026-11-26" in ax.get_title()


def test_the_committed_size_sweep_ran_both_kernels():
    sizes = json.loads((Path(__file__).resolve().parent.parent / "docs" / "elementwise_sizes_gpu.json").read_text())
    kernels = sizes["kernels_at_2^20"]
    assert "elementwise_vec_kernel" in kernels["labops.tanh, vectorized kernel"][0]
    assert "elementwise_kernel" in kernels["labops.tanh, textbook kernel"][0]
    assert "vec" not in kernels["labops.tanh, textbook kernel"][0]


def test_layer_contract_draws_what_each_function_read_and_wrote():
    from labops import torch7

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, dtype=torch.float64, generator=gen)
    lin = torch7.Linear(5, 3, dtype=torch.float64)
    g, g_tanh = torch.randn(4, 3, dtype=torch.float64, generator=gen), torch.randn(4, 5, dtype=torch.float64,
                                                                                     generator=gen)
    fig = rendered(viz.layer_contract((lin, x, g), (torch7.Tanh(), x, g_tanh), scale=0.5))
    ax_lin, ax_tanh = fig.axes
    gids = lambda ax, gid: [t.get_text() for t in ax.texts if t.get_gid() == gid]  # noqa: E731
    assert len(gids(ax_lin, "function")) == len(gids(ax_tanh, "function")) == 3
    # Linear: updateOutput reads input, weight, bias; updateGradInput gradOutput and weight;
    # accGradParameters input and gradOutput, and writes both gradients.
    assert len(gids(ax_lin, "read")) == 3 + 2 + 2 and len(gids(ax_lin, "read-arrow")) == 7
    assert len(gids(ax_lin, "wrote")) == 4 and any(t.startswith("gradWeight (3, 5)") for t in gids(ax_lin, "wrote"))
    # Tanh: its backward reads the output updateOutput saved, not the input; no parameters.
    assert gids(ax_tanh, "read") == ["input (4, 5)", "gradOutput (4, 5)", "output (4, 5)\nsaved by updateOutput"]
    assert len(gids(ax_tanh, "wrote")) == 2
    # the call accumulated, as a backward does: scale times autograd's gradient
    xr, wr, br = x.clone().requires_grad_(), lin.weight.clone().requires_grad_(), lin.bias.clone().requires_grad_()
    gw, _ = torch.autograd.grad(F.linear(xr, wr, br), (wr, br), g)
    assert torch.allclose(lin.gradWeight, 0.5 * gw)


def test_depthwise_scatter_gather_outlines_the_window_and_the_readers():
    fig = rendered(viz.depthwise_scatter_gather(in_hw=(9, 9), kernel=3, stride=2, padding=1, output_pixel=(1, 2),
                                                input_pixel=(3, 3)))
    ax_s, ax_g = fig.axes
    assert len([p for p in ax_s.patches if p.get_gid() == "scatter"]) == 9
    assert [t.get_text() for t in ax_s.texts][:9] == ["1", "2", "1", "2", "1", "2", "1", "2", "1"]  # row 0's counts
    readers = [p for p in ax_g.patches if p.get_gid() == "gather"]
    assert len(readers) == 4  # odd row and column at stride 2: two taps each way
    assert sorted(t.get_text() for t in ax_g.texts) == ["(0,0)", "(0,2)", "(2,0)", "(2,2)"]
    # a corner output: its window is partly padding, so it adds into 4 inputs
    corner = rendered(viz.depthwise_scatter_gather(output_pixel=(0, 0)))
    assert len([p for p in corner.axes[0].patches if p.get_gid() == "scatter"]) == 4


def test_depthwise_tile_span_is_tile_span():
    fig = rendered(viz.depthwise_tile(in_hw=(9, 12), kernel=3, stride=1, padding=1, tile=(4, 2), tile_index=(1, 1)))
    ax_o, ax_i = fig.axes
    (tile,) = [p for p in ax_o.patches if p.get_gid() == "tile"]
    (span,) = [p for p in ax_i.patches if p.get_gid() == "span"]
    assert (tile.get_width(), tile.get_height()) == (2, 4) and (span.get_width(), span.get_height()) == (4, 6)
    assert "24 loads, not 72" in ax_i.get_title()
    numbers = [int(t.get_text()) for t in ax_i.texts if t.get_text()]
    assert len(numbers) == 24 and sum(numbers) == 72 and max(numbers) == 6  # 8 outputs x 9 taps, reused up to 6x
    strided = rendered(viz.depthwise_tile(in_hw=(11, 11), stride=2, tile_index=(0, 0)))
    (span,) = [p for p in strided.axes[1].patches if p.get_gid() == "span"]
    assert (span.get_width(), span.get_height()) == (5, 9)  # tile_span(2, 2, 3) x tile_span(4, 2, 3)


def test_rtc_two_paths_reads_both_generated_sources():
    from labops import rtc, rtc_layers

    k = rtc.kernel("viz_axpb", ["a", "x", "b"], ["y"],
                   "long long i = threadIdx.x;\nif (i < y_numel) y[i] = a[0] * x[i] + b[i];\n")
    fig = rendered(viz.rtc_two_paths(k))
    (ax,) = fig.axes
    gids = lambda gid: [t.get_text() for t in ax.texts if t.get_gid() == gid]  # noqa: E731
    (body,) = gids("body")
    assert "y[i] = a[0] * x[i] + b[i];" in body
    cpu, cuda = gids("source")
    n_cpu, n_cuda = (len(k.source(torch.float32, d).splitlines()) for d in ("cpu", "cuda"))
    assert cpu.startswith(f"{n_cpu} lines of C++") and cuda.startswith(f"{n_cuda} lines of CUDA C++")
    assert '__global__ void viz_axpb(' in cuda and "labops_rtc_launch" in cpu
    assert len(gids("compiler")) == len(gids("runs")) == 2 and len(gids("arrow")) == 6
    assert "no fibers" in gids("runs")[0]
    assert "as fibers" in [t.get_text() for t in rendered(viz.rtc_two_paths(rtc_layers.softmax_block_per_row)).axes[0].texts
                           if t.get_gid() == "runs"][0]


@pytest.mark.parametrize("row_length", [8, 16, 24, 32, 64])
def test_thread_map_labels_are_readable_or_absent(row_length):
    # The docs scale a figure to the page's width: labels under 6 pt (a 32-column map's were 5.4) cannot be read
    trace = grid_stride_trace(70, 2, 4)
    (ax,) = rendered(viz.thread_map(trace, n=70, row_length=row_length, hatch=False)).axes
    sizes = {t.get_fontsize() for t in ax.texts}
    assert not sizes or min(sizes) >= 6.0
    assert bool(sizes) == (row_length <= 24)  # 16 columns (notebook 03's packs) are labelled, 32 are not


def test_explore_without_a_static_copy_draws_inside_the_widget(monkeypatch):
    pytest.importorskip("IPython")
    ipywidgets = pytest.importorskip("ipywidgets")
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, display_id=False: shown.append(obj))

    def draw(n, blocks):
        return viz.thread_map(grid_stride_trace(n, blocks, 4))

    controls = viz.explore(draw, n=(1, 64, 20), blocks=(1, 8, 2), static_copy=False)
    assert len(shown) == 1 and not isinstance(shown[0], IPython.display.Image)  # no PNG output: nothing twice
    bundle = shown[0]._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "Jupyter" in bundle["text/plain"] and "Box(" not in bundle["text/plain"]  # not the widgets' repr
    (image,) = [w for w in shown[0].widget.children if isinstance(w, ipywidgets.Image)]
    before = image.value
    assert before[:4] == b"\x89PNG"
    controls["n"].value = 33
    assert image.value[:4] == b"\x89PNG" and image.value != before


def test_explore_controls_read_as_a_note_without_widgets(monkeypatch):
    pytest.importorskip("IPython")
    pytest.importorskip("ipywidgets")
    import IPython.display

    shown = []
    class Handle:
        def update(self, obj):
            pass

    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, display_id=False: shown.append(obj) or (Handle() if display_id else None))
    viz.explore(lambda n: viz.thread_map(grid_stride_trace(n, 1, 4)), n=(1, 8, 4))
    png, controls = shown
    assert isinstance(png, IPython.display.Image)
    text = controls._repr_mimebundle_()["text/plain"]
    assert "n" in text and "Jupyter" in text and "IntSlider(" not in text
