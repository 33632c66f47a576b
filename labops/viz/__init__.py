"""The course's figures, each drawn from real data and returned as a matplotlib Figure.

Every function takes data (a ``labops.simt`` trace, tensors, a benchmark
result), draws it, and returns a ``matplotlib.figure.Figure``. Nothing here
calls ``plt.show()`` or touches pyplot's global state: a notebook shows the
returned figure by making it the cell's last expression, a script saves it
with ``fig.savefig(...)``.

One module per topic, every name re-exported here (``viz.thread_map``):

- ``_draw``: the kit (``new_figure``, ``draw_matrix``, ``explore``, shared colours)
- ``threads``: the grid-stride loop (``thread_map``)
- ``activation``: GELU (``gelu_forms``)
- ``bench``: benchmark results (``load_bench``, ``bench_bars``, ``roofline``, ``bandwidth_by_size``)
- ``conv``: im2col (``im2col_numpy``, ``im2col_figure``)
- ``upsample``: bilinear upsampling (``upsample_sampling_positions``, ``upsample_gradient_flow``,
  ``upsample_mode_difference``)
- ``reorg``: the reorg orders (``reorg_channel_maps``)
- ``race``: a data race ``labops.rtc`` caught (``race_figure``)
- ``contract``: the layer contract's three functions, from one call (``layer_contract``, ``contract_call``)
- ``depthwise``: depthwise backward as scatter or gather, a tiled thread's input span
  (``depthwise_scatter_gather``, ``depthwise_tile``)
- ``rtc_kernel``: one ``labops.rtc`` body, its CPU and CUDA sources (``rtc_two_paths``)
- ``ladder``: every rung of a layer's forward beside native PyTorch, from ``labops bench --ladder``
  (``ladder_bars``)

Adding a figure for a new layer: write a function in that layer's module
(a new ``labops/viz/<layer>.py`` if it has none), build the axes with
``new_figure``, draw small arrays with ``draw_matrix`` (numbers in cells,
some cells outlined), give every axes a title and axis labels, return the
Figure, import it here and add its name to ``__all__``, and count its artists
in tests/test_viz.py.
"""

from labops.viz._draw import draw_matrix, explore, new_figure
from labops.viz.activation import gelu_forms
from labops.viz.bench import bandwidth_by_size, bench_bars, load_bench, roofline
from labops.viz.contract import contract_call, layer_contract
from labops.viz.conv import im2col_figure, im2col_numpy
from labops.viz.depthwise import depthwise_scatter_gather, depthwise_tile
from labops.viz.ladder import ladder_bars
from labops.viz.race import race_figure
from labops.viz.reorg import reorg_channel_maps
from labops.viz.rtc_kernel import rtc_two_paths
from labops.viz.threads import thread_map
from labops.viz.upsample import upsample_gradient_flow, upsample_mode_difference, upsample_sampling_positions

__all__ = [
    "bandwidth_by_size",
    "bench_bars",
    "contract_call",
    "depthwise_scatter_gather",
    "depthwise_tile",
    "draw_matrix",
    "explore",
    "gelu_forms",
    "im2col_figure",
    "im2col_numpy",
    "ladder_bars",
    "layer_contract",
    "load_bench",
    "new_figure",
    "race_figure",
    "thread_map",
    "upsample_gradient_flow",
    "upsample_mode_difference",
    "upsample_sampling_positions",
    "roofline",
    "reorg_channel_maps",
    "rtc_two_paths",
]
