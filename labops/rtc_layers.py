"""Write-up 004's layers written with ``labops.rtc``: softmax, cross-entropy and YOLOv2's reorg as runtime kernels.

Write-up 004 built these layers in MXNet from CUDA source strings compiled when the layer first runs
(``mx.rtc``); here they are ``labops.rtc`` kernels (course notebook 11), each a ``labops.rtc.Kernel``
whose ``.body`` can be printed and which can be launched by hand:

* ``softmax_rows``: the write-up's softmax, one row per thread (a grid-stride loop over rows);
  ``softmax_block_per_row``: one block per row, reduced through warp shuffles (what ``softmax`` launches
  on a GPU); ``softmax_backward_rows``: ``y * (g - sum g y)``, one row per thread;
* ``cross_entropy_rows`` and ``cross_entropy_backward_rows``: the loss of each row, and the write-up's
  "softmax - onehot" backward times each row's incoming gradient;
* ``reorg_darknet`` and ``reorg_darknet_backward``: YOLOv2's reorg in darknet's order, any stride;
  ``reorg_writeup``: the write-up's reorg index as written (stride 2), which is ``pixel_unshuffle``
  and not darknet's order.

From them, three autograd-aware ops (``torch.library.custom_op`` in the ``labops_rtc`` namespace, so also
``torch.ops.labops_rtc.<name>``), registered once, when this module is first imported: ``softmax``,
``cross_entropy`` (one loss per row) and ``reorg``.
"""

from __future__ import annotations

import torch

from labops.rtc import kernel

__all__ = [
    "softmax_rows", "softmax_block_per_row", "softmax_backward_rows", "cross_entropy_rows",
    "cross_entropy_backward_rows", "reorg_darknet", "reorg_darknet_backward", "reorg_writeup",
    "softmax", "cross_entropy", "reorg",
]


# Softmax over the last dim of a (rows, cols) matrix, the write-up's way: the row from the thread index,
# then three walks over the row (max, sum of exponentials, outputs). A grid-stride loop over rows, so any
# grid covers any number of rows. exp/fmax are overloaded for float and double.
softmax_rows = kernel("softmax_rows", ["x"], ["y"], r"""
const long long rows = x_dims[0], cols = x_dims[1];
for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
     i += (long long)blockDim.x * gridDim.x) {
  const x_type* xr = x + i * cols;
  y_type* yr = y + i * cols;
  x_type m = xr[0];
  for (long long j = 1; j < cols; ++j) m = fmax(m, xr[j]);
  x_type sum = 0;
  for (long long j = 0; j < cols; ++j) sum += exp(xr[j] - m);
  for (long long j = 0; j < cols; ++j) yr[j] = exp(xr[j] - m) / sum;
}
""")

# The same softmax with one block per row (GPU only): the block's threads read the row together
# (neighbouring threads, neighbouring addresses), reduce the max and the sum through warp shuffles and a
# 32-slot shared array, then write together. blockDim.x must be a multiple of 32 (at most 1024).
softmax_block_per_row = kernel("softmax_block_per_row", ["x"], ["y"], r"""
const long long rows = x_dims[0], cols = x_dims[1];
__shared__ x_type partial[32];
const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
  const x_type* xr = x + r * cols;
  y_type* yr = y + r * cols;
  x_type m = -INFINITY;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) m = fmax(m, xr[j]);
  for (int o = 16; o > 0; o /= 2) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = partial[0];
  for (unsigned w = 1; w < warps; ++w) m = fmax(m, partial[w]);
  __syncthreads();                       // everyone has read partial[] before it is reused
  x_type sum = 0;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) sum += exp(xr[j] - m);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) partial[warp] = sum;
  __syncthreads();
  sum = 0;
  for (unsigned w = 0; w < warps; ++w) sum += partial[w];
  __syncthreads();
  const x_type inv = 1 / sum;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = exp(xr[j] - m) * inv;
}
""")

# Softmax backward from the output: gx = y * (g - sum_j g_j y_j), one row per thread.
softmax_backward_rows = kernel("softmax_backward_rows", ["g", "y"], ["gx"], r"""
const long long rows = y_dims[0], cols = y_dims[1];
for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
     i += (long long)blockDim.x * gridDim.x) {
  y_type dot = 0;
  for (long long j = 0; j < cols; ++j) dot += g[i * cols + j] * y[i * cols + j];
  for (long long j = 0; j < cols; ++j) gx[i * cols + j] = y[i * cols + j] * (g[i * cols + j] - dot);
}
""")

# Cross-entropy of each row: loss_i = m + log(sum_j exp(x_ij - m)) - x_i,t_i, one row per thread.
cross_entropy_rows = kernel("cross_entropy_rows", ["x", "t"], ["loss"], r"""
const long long rows = x_dims[0], cols = x_dims[1];
for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
     i += (long long)blockDim.x * gridDim.x) {
  const x_type* xr = x + i * cols;
  x_type m = xr[0];
  for (long long j = 1; j < cols; ++j) m = fmax(m, xr[j]);
  x_type sum = 0;
  for (long long j = 0; j < cols; ++j) sum += exp(xr[j] - m);
  loss[i] = m + log(sum) - xr[t[i]];
}
""")

# The write-up's "softmax with label" backward, one element per thread: softmax - onehot, here times the
# incoming gradient of the row's loss (the write-up leaves that factor out, so its kernel is right only
# for a loss that is the plain sum of the rows).
cross_entropy_backward_rows = kernel("cross_entropy_backward_rows", ["y", "t", "g"], ["gx"], r"""
const long long cols = y_dims[1];
for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < y_numel;
     k += (long long)blockDim.x * gridDim.x) {
  const long long i = k / cols, j = k % cols;
  gx[k] = (y[k] - (j == t[i] ? 1 : 0)) * g[i];
}
""")

# Reorg in darknet's order (labops.reference.reorg has darknet's own loop): output element o of image n reads input element
# src(o) of the same image. Stride s = H / H_out. One output element per thread, grid-stride.
_DARKNET_INDEX = r"""
const long long n_img = x_dims[0], c = x_dims[1], h = x_dims[2], w = x_dims[3];
const long long s = x_dims[2] / y_dims[2], c_low = c / (s * s), per_image = c * h * w;
for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n_img * per_image;
     k += (long long)blockDim.x * gridDim.x) {
  const long long n = k / per_image, o = k % per_image;
  // o read as an index of the (C, H, W) result of space-to-depth (dcr order) applied to the input's memory
  // viewed as (C/s^2, H*s, W*s):
  const long long zc = o / (h * w), zh = (o / w) % h, zw = o % w;
  const long long cl = zc % c_low, offset = zc / c_low, dy = offset / s, dx = offset % s;
  const long long src = ((cl * h * s) + zh * s + dy) * (w * s) + zw * s + dx;
  STORE
}
"""
reorg_darknet = kernel("reorg_darknet", ["x"], ["y"],
                       _DARKNET_INDEX.replace("STORE", "y[k] = x[n * per_image + src];"))
# Its backward: the same index, the copy reversed (a permutation: every input element written once).
reorg_darknet_backward = kernel("reorg_darknet_backward", ["gy"], ["gx"],
                                _DARKNET_INDEX.replace("x_dims", "gx_dims").replace("y_dims", "gy_dims")
                                .replace("STORE", "gx[n * per_image + src] = gy[k];"))

# The write-up's reorg forward, its index as written (stride 2 only): one thread per input plane (n, c),
# launched as one block of one thread per plane; output plane 4*plane + 2*dy + dx gets pixel (2h+dy, 2w+dx).
reorg_writeup = kernel("reorg_writeup", ["x"], ["y"], r"""
const long long plane = blockIdx.x;
const long long xh = x_dims[2], xw = x_dims[3], yh = y_dims[2], yw = y_dims[3];
const long long out_plane = yh * yw, in_plane = xh * xw;
for (long long r = 0; r < xh; r += 2)
  for (long long col = 0; col < xw; col += 2) {
    const long long at = plane * in_plane + (r / 2) * yw + col / 2;
    y[at]                 = x[plane * in_plane + r * xw + col];
    y[at + out_plane]     = x[plane * in_plane + r * xw + col + 1];
    y[at + 2 * out_plane] = x[plane * in_plane + (r + 1) * xw + col];
    y[at + 3 * out_plane] = x[plane * in_plane + (r + 1) * xw + col + 1];
  }
""")


# ---- launch helpers: a grid for a grid-stride loop over n items ----

def _grid_for(n: int, threads: int, cap: int = 4096) -> int:
    return max(1, min(cap, (n + threads - 1) // threads))


def _check_matrix(x, op, arg="x"):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"labops_rtc.{op}: {arg} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"labops_rtc.{op}: {arg} must be float32 or float64, got {x.dtype}")
    if x.dim() != 2 or x.shape[1] == 0:
        raise ValueError(f"labops_rtc.{op}: {arg} must be a 2-D (rows, cols) tensor with cols >= 1, "
                         f"got shape {list(x.shape)}")


def _run_softmax(x):
    y = torch.empty_like(x)
    if x.shape[0] == 0:
        return y
    if x.is_cuda:
        softmax_block_per_row(x, y, grid=min(x.shape[0], 65535), block=256 if x.shape[1] > 128 else 128)
    else:
        softmax_rows(x, y, grid=_grid_for(x.shape[0], 64), block=64)
    return y


# ---- autograd-aware ops: a forward kernel, a backward kernel, a few lines of torch.library ----
# Defined once, at import: a notebook cell that re-runs `from labops import rtc_layers` does not register them again.

@torch.library.custom_op("labops_rtc::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D float32/float64 tensor, by runtime kernels.

    CPU: one row per thread (the write-up's kernel); CUDA: one block per row. Backward: ``y * (g - sum g y)``.
    Shapes: x (rows, cols) -> (rows, cols).

    Example::

        >>> y = softmax(torch.randn(4, 10))
        >>> y.shape, torch.allclose(y.sum(1), torch.ones(4))
        (torch.Size([4, 10]), True)
    """
    _check_matrix(x, "softmax")
    return _run_softmax(x.contiguous())


@torch.library.custom_op("labops_rtc::softmax_backward", mutates_args=())
def _softmax_backward(g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    g, y = g.contiguous(), y.contiguous()
    gx = torch.empty_like(y)
    if y.shape[0]:
        softmax_backward_rows(g, y, gx, grid=_grid_for(y.shape[0], 64), block=64)
    return gx


@softmax.register_fake
def _(x):
    _check_matrix(x, "softmax")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@_softmax_backward.register_fake
def _(g, y):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_grad(ctx, g):
    (y,) = ctx.saved_tensors
    return _softmax_backward(g, y)


softmax.register_autograd(_softmax_grad, setup_context=_softmax_setup)


def _check_target(x, t):
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.shape != (x.shape[0],):
        raise ValueError(f"labops_rtc.cross_entropy: target must be an int64 tensor of shape ({x.shape[0]},), "
                         f"got {getattr(t, 'dtype', type(t).__name__)} {list(getattr(t, 'shape', []))}")
    if t.device != x.device:
        raise ValueError(f"labops_rtc.cross_entropy: target must be on the device of logits ({x.device}), "
                         f"got {t.device}")


@torch.library.custom_op("labops_rtc::cross_entropy", mutates_args=())
def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each row (``reduction="none"``) by runtime kernels; take ``.mean()`` yourself.

    Shapes: logits (N, C) float32/float64, target (N,) int64 in [0, C) -> loss (N,). The backward is the
    write-up's "softmax - onehot", times each row's incoming gradient (which carries the 1/N of a mean).

    Example::

        >>> cross_entropy(torch.randn(8, 5), torch.randint(0, 5, (8,))).shape
        torch.Size([8])
    """
    _check_matrix(logits, "cross_entropy", "logits")
    _check_target(logits, target)
    if target.numel() and (int(target.min()) < 0 or int(target.max()) >= logits.shape[1]):
        raise ValueError(f"labops_rtc.cross_entropy: target must hold class indices in [0, {logits.shape[1]}), "
                         f"got values in [{int(target.min())}, {int(target.max())}]")
    logits, target = logits.contiguous(), target.contiguous()
    loss = logits.new_empty(logits.shape[0])
    if logits.shape[0]:
        cross_entropy_rows(logits, target, loss, grid=_grid_for(logits.shape[0], 64), block=64)
    return loss


@torch.library.custom_op("labops_rtc::cross_entropy_backward", mutates_args=())
def _cross_entropy_backward(g: torch.Tensor, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    y = _run_softmax(logits.contiguous())
    gx = torch.empty_like(y)
    if y.numel():
        cross_entropy_backward_rows(y, target.contiguous(), g.contiguous(), gx,
                                    grid=_grid_for(y.numel(), 256), block=256)
    return gx


@cross_entropy.register_fake
def _(logits, target):
    return logits.new_empty(logits.shape[0])


@_cross_entropy_backward.register_fake
def _(g, logits, target):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


def _cross_entropy_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _cross_entropy_grad(ctx, g):
    logits, target = ctx.saved_tensors
    return _cross_entropy_backward(g, logits, target), None


cross_entropy.register_autograd(_cross_entropy_grad, setup_context=_cross_entropy_setup)


def _check_reorg(x, stride, op, arg):
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.float64) or x.dim() != 4:
        raise ValueError(f"labops_rtc.{op}: {arg} must be a 4-D (N, C, H, W) float32/float64 tensor")
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise ValueError(f"labops_rtc.{op}: stride must be an int >= 1, got {stride!r}")


@torch.library.custom_op("labops_rtc::reorg", mutates_args=())
def reorg(x: torch.Tensor, stride: int = 2) -> torch.Tensor:
    """YOLOv2's reorg in darknet's order, by a runtime kernel: ``labops.reorg(x, stride, "darknet")``.

    Shapes: x (N, C, H, W), C divisible by stride^2, H and W by stride -> (N, C*s^2, H/s, W/s).

    Example::

        >>> reorg(torch.randn(1, 8, 4, 6), 2).shape
        torch.Size([1, 32, 2, 3])
    """
    _check_reorg(x, stride, "reorg", "x")
    n, c, h, w = x.shape
    if h % stride or w % stride or c % (stride * stride):
        raise ValueError(f"labops_rtc.reorg: x must have C divisible by stride^2 = {stride * stride} and H, W "
                         f"divisible by stride {stride}, got {list(x.shape)}")
    y = x.new_empty(n, c * stride * stride, h // stride, w // stride)
    if y.numel():
        reorg_darknet(x.contiguous(), y, grid=_grid_for(y.numel(), 256), block=256)
    return y


@torch.library.custom_op("labops_rtc::reorg_backward", mutates_args=())
def _reorg_backward(gy: torch.Tensor, stride: int) -> torch.Tensor:
    n, c, h, w = gy.shape
    gx = gy.new_empty(n, c // (stride * stride), h * stride, w * stride)
    if gx.numel():
        reorg_darknet_backward(gy.contiguous(), gx, grid=_grid_for(gx.numel(), 256), block=256)
    return gx


@reorg.register_fake
def _(x, stride=2):
    n, c, h, w = x.shape
    return x.new_empty(n, c * stride * stride, h // stride, w // stride)


@_reorg_backward.register_fake
def _(gy, stride):
    n, c, h, w = gy.shape
    return gy.new_empty(n, c // (stride * stride), h * stride, w * stride)


def _reorg_setup(ctx, inputs, output):
    ctx.stride = inputs[1]


def _reorg_grad(ctx, gy):
    return _reorg_backward(gy, ctx.stride), None


reorg.register_autograd(_reorg_grad, setup_context=_reorg_setup)
