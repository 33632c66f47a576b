"""Seeded bugs for the CUDA kernel exercises: every reference of ``cuda.SOLUTIONS`` with one classic mistake
planted, by a textual edit of its body or a change of its launch.

Each ``Variant`` names the mistake it plants (a key of ``cuda.MISTAKES[exercise]``), so grading the corpus
tells how well the feedback names mistakes: every variant must fail, and the first mistake the feedback
names must be the planted one. ``grade_corpus()`` grades it through ``run_checks``, the path ``check``
takes; with ``device="cuda"`` (or ``$LABOPS_EXERCISE_DEVICE=cuda``) the kernels run on the GPU, which
gives the CPU/GPU parity table.

An edit is ``(old, new)`` or ``(old, new, count)``: ``old`` must occur exactly once (``count`` times), so an
edit that no longer matches its reference fails loudly instead of planting nothing.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable, NamedTuple

from . import cuda
from ._core import run_checks
from .cuda import KernelSubmission, kernel_submission

__all__ = ["CORPUS", "Row", "Variant", "edit", "grade_corpus", "named_mistake"]


@dataclass(frozen=True)
class Variant:
    """One submission of the corpus: ``planted`` is the mistake key (None for the reference itself)."""

    id: str
    exercise: str
    planted: str | None
    body: str
    launch: Callable

    def submission(self) -> KernelSubmission:
        return kernel_submission(self.body, self.launch)

    @property
    def sentence(self) -> str | None:
        return None if self.planted is None else cuda.MISTAKES[self.exercise][self.planted].sentence


def edit(body: str, *changes) -> str:
    """``body`` with each change ``(old, new[, count])`` made; ``old`` must occur exactly ``count`` times."""
    for change in changes:
        old, new, count = change if len(change) == 3 else (*change, 1)
        found = body.count(old)
        if found != count:
            raise AssertionError(f"edit: {old!r} occurs {found} times in the body, expected {count}")
        body = body.replace(old, new)
    return body


def _variants(exercise: str, table) -> list[Variant]:
    """The reference and one variant per row ``(name, planted key, edits, launch or None)``."""
    ref = cuda.SOLUTIONS[exercise]
    out = [Variant(f"{exercise}/reference", exercise, None, ref.body, ref.launch)]
    for name, planted, changes, launch in table:
        if planted not in cuda.MISTAKES[exercise]:
            raise AssertionError(f"{exercise}/{name}: {planted!r} is not a mistake of {exercise}")
        out.append(Variant(f"{exercise}/{name}", exercise, planted, edit(ref.body, *changes), launch or ref.launch))
    return out


# ---- a. GELU ----

_GELU_GUARD = "if (i < x_numel) {"
_GELU_INDEX = "const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;"
_GELU_CDF = "const float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));"
_GELU_PDF = "const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);"
_GELU_GX = "gx[i] = gy[i] * (cdf + v * pdf);"

GELU = _variants("cuda_gelu", [
    ("no_guard", "guard", [(_GELU_GUARD, "{")], None),
    ("guard_le", "guard", [(_GELU_GUARD, "if (i <= x_numel) {")], None),
    ("load_before_guard", "guard", [("const float v = x[i];\n", ""),
                                    (_GELU_GUARD, "const float v = x[i];\n" + _GELU_GUARD)], None),
    ("grid_rounded_down", "unwritten", [], lambda n: (n // 256, 256)),
    ("grid_for_512", "unwritten", [], lambda n: ((n + 511) // 512, 256)),
    ("grid_for_256_block_128", "unwritten", [], lambda n: ((n + 255) // 256, 128)),
    ("guard_n_minus_one", "unwritten", [(_GELU_GUARD, "if (i < x_numel - 1) {")], None),
    ("grid_float", "launch_rule", [], lambda n: (n / 256, 256)),
    ("block_2048", "launch_rule", [], lambda n: ((n + 2047) // 2048, 2048)),
    ("thread_index_only", "index", [(_GELU_INDEX, "const long long i = threadIdx.x;")], None),
    ("block_plus_thread", "index", [(_GELU_INDEX, "const long long i = blockIdx.x + threadIdx.x;")], None),
    ("grid_dim_for_block_dim", "index",
     [(_GELU_INDEX, "const long long i = (long long)blockIdx.x * gridDim.x + threadIdx.x;")], None),
    ("outputs_swapped", "swapped_outputs", [("y[i] = v * cdf;", "gx[i] = v * cdf;"),
                                            (_GELU_GX, "y[i] = gy[i] * (cdf + v * pdf);")], None),
    ("tanh_cdf", "tanh",
     [(_GELU_CDF, "const float cdf = 0.5f * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));")], None),
    ("tanh_forward", "tanh",
     [("y[i] = v * cdf;", "y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));")], None),
    ("sigmoid_forward", "sigmoid", [("y[i] = v * cdf;", "y[i] = v / (1.0f + expf(-1.702f * v));")], None),
    ("sigmoid_cdf", "sigmoid", [(_GELU_CDF, "const float cdf = 1.0f / (1.0f + expf(-1.702f * v));")], None),
    ("erf_of_x", "erf_argument", [("erff(v * kInvSqrt2)", "erff(v)")], None),
    ("erf_times_sqrt2", "erf_argument", [("erff(v * kInvSqrt2)", "erff(v * 1.41421356f)")], None),
    ("erf_divided_by_constant", "erf_argument", [("erff(v * kInvSqrt2)", "erff(v / kInvSqrt2)")], None),
    ("cdf_not_halved", "cdf", [("0.5f * (1.0f + erff(v * kInvSqrt2))", "(1.0f + erff(v * kInvSqrt2))")], None),
    ("cdf_without_one", "cdf", [("0.5f * (1.0f + erff(v * kInvSqrt2))", "0.5f * erff(v * kInvSqrt2)")], None),
    ("y_is_cdf", "times_x", [("y[i] = v * cdf;", "y[i] = cdf;")], None),
    ("grad_without_x_pdf", "product_rule", [("gy[i] * (cdf + v * pdf)", "gy[i] * cdf")], None),
    ("grad_without_cdf", "product_rule", [("gy[i] * (cdf + v * pdf)", "gy[i] * v * pdf")], None),
    ("grad_without_gy", "chain_rule", [(_GELU_GX, "gx[i] = cdf + v * pdf;")], None),
    ("grad_times_x", "chain_rule", [(_GELU_GX, "gx[i] = x[i] * (cdf + v * pdf);")], None),
    ("pdf_unnormalised", "pdf", [(_GELU_PDF, "const float pdf = expf(-0.5f * v * v);")], None),
    ("pdf_exponent_not_halved", "pdf", [("expf(-0.5f * v * v)", "expf(-v * v)")], None),
    ("pdf_wrong_constant", "pdf", [("const float pdf = kInvSqrt2Pi *", "const float pdf = kInvSqrt2 *")], None),
    ("grid_ceil_float", "launch_rule", [], lambda n: (-(-n // 256) * 1.0, 256)),
])


# ---- b. global average pooling ----

_POOL_STORE = "partial[t] = sum;                              // every thread writes its slot, 0 for an empty slice\n"
_POOL_FIRST_SYNC = _POOL_STORE + "__syncthreads();\n"
_POOL_TREE_SYNC = "  __syncthreads();                             // outside the if: every thread of the block reaches it\n"
_POOL_STEP = "  if (t + half < active) partial[t] += partial[t + half];\n"
_POOL_TREE = ("for (unsigned int active = blockDim.x; active > 1; ) {\n"
              "  const unsigned int half = (active + 1) / 2;\n" + _POOL_STEP + _POOL_TREE_SYNC +
              "  active = half;\n}\n")
_POW2_TREE = ("for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
              "  if (t < s) partial[t] += partial[t + s];\n"
              "  __syncthreads();\n}\n")
_POOL_SLICE = "for (long long k = t; k < size; k += blockDim.x) sum += x[plane * size + k];\n"
_POOL_WRITE = "if (t == 0) y[plane] = partial[0] / (float)size;"


def _pool(threads, shared=None):
    return lambda n, c, h, w: (n * c, threads, threads * 4 if shared is None else shared)


POOL = _variants("cuda_global_avg_pool", [
    ("no_barrier_after_partials", "shared_race", [(_POOL_FIRST_SYNC, _POOL_STORE)], None),
    ("no_barrier_in_tree", "shared_race", [(_POOL_TREE_SYNC, "")], None),
    ("barrier_inside_if", "divergent_barrier",
     [(_POOL_STEP + _POOL_TREE_SYNC, "  if (t + half < active) {\n    partial[t] += partial[t + half];\n"
                                     "    __syncthreads();\n  }\n")], None),
    ("idle_threads_break", "divergent_barrier",
     [("  const unsigned int half = (active + 1) / 2;\n",
       "  const unsigned int half = (active + 1) / 2;\n  if (t >= active) break;     // nothing left to add\n")], None),
    ("barrier_for_thread_0", "divergent_barrier",
     [(_POOL_WRITE, "if (t == 0) {\n  __syncthreads();\n  y[plane] = partial[0] / (float)size;\n}")], None),
    ("partial_only_with_a_slice", "uninitialized", [("partial[t] = sum;", "if (t < size) partial[t] = sum;")], None),
    ("partial_written_in_loop", "uninitialized",
     [(_POOL_SLICE + _POOL_STORE, "for (long long k = t; k < size; k += blockDim.x) {\n"
                                  "  sum += x[plane * size + k];\n  partial[t] = sum;\n}\n")], None),
    ("shared_mem_in_floats", "shared_bounds", [], _pool(128, shared=128)),
    ("shared_mem_half", "shared_bounds", [], _pool(128, shared=256)),
    ("static_array_too_small", "shared_bounds",
     [("extern __shared__ float partial[];", "__shared__ float partial[64];")], _pool(128, shared=0)),
    ("every_thread_writes_y", "output_race", [(_POOL_WRITE, "y[plane] = partial[0] / (float)size;")], None),
    ("first_warp_writes_y", "output_race", [("if (t == 0) y[plane]", "if (t < 32) y[plane]")], None),
    ("power_of_two_tree_96", "power_of_two", [(_POOL_TREE, _POW2_TREE)], _pool(96)),
    ("power_of_two_tree_100", "power_of_two", [(_POOL_TREE, _POW2_TREE)], _pool(100)),
    ("power_of_two_tree_200", "power_of_two", [(_POOL_TREE, _POW2_TREE)], _pool(200)),
    ("half_rounded_down_96", "power_of_two",
     [("  const unsigned int half = (active + 1) / 2;\n" + _POOL_STEP,
       "  const unsigned int half = active / 2;\n  if (t < half) partial[t] += partial[t + half];\n")], _pool(96)),
    ("no_divide", "divisor", [("partial[0] / (float)size", "partial[0]")], None),
    ("divide_by_threads", "divisor", [("partial[0] / (float)size", "partial[0] / blockDim.x")], None),
    ("divide_by_width", "divisor", [("partial[0] / (float)size", "partial[0] / x_dims[3]")], None),
    ("no_slice_loop", "slice", [(_POOL_SLICE, "if (t < size) sum = x[plane * size + t];\n")], None),
    ("slice_step_one", "slice", [("k += blockDim.x) sum +=", "k += 1) sum +=")], None),
    ("slice_assigns", "assign", [("sum += x[plane * size + k]", "sum = x[plane * size + k]")], None),
    ("tree_assigns", "assign", [("partial[t] += partial[t + half]", "partial[t] = partial[t + half]")], None),
    ("plane_stride_w", "plane_offset", [("x[plane * size + k]", "x[plane * x_dims[3] + k]")], None),
    ("plane_stride_h", "plane_offset", [("x[plane * size + k]", "x[plane * x_dims[2] + k]")], None),
    ("slice_le", "loop_bound", [("k < size; k += blockDim.x", "k <= size; k += blockDim.x")], None),
    ("grid_per_image", "launch_rule", [], lambda n, c, h, w: (n, 128, 512)),
    ("block_2d", "launch_rule", [], lambda n, c, h, w: (n * c, (16, 8), 512)),
    ("block_2048", "launch_rule", [], lambda n, c, h, w: (n * c, 2048, 8192)),
    ("shared_mem_64k", "launch_rule", [], lambda n, c, h, w: (n * c, 128, 65536)),
])


# ---- c. softmax ----

_SM_GUARD = "if (row >= rows) return;"
_SM_ROW = "const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;"
_SM_MAX_LOOP = "for (int offset = 16; offset > 0; offset /= 2) m = fmaxf"
_SM_SUM_LOOP = "for (int offset = 16; offset > 0; offset /= 2) s +="
_SM_SUM = "s += expf(x[base + j] - m)"
_SM_OUT = "y[base + j] = expf(x[base + j] - m) * inv"


def _rows(per_block, threads):
    return lambda rows, cols: ((rows + per_block - 1) // per_block, threads)


SOFTMAX = _variants("cuda_softmax", [
    ("no_row_guard", "guard", [(_SM_GUARD, "")], None),
    ("row_guard_gt", "guard", [("row >= rows", "row > rows")], None),
    ("grid_rounded_down", "unwritten", [], lambda rows, cols: (rows // 4, 128)),
    ("grid_for_4_block_64", "unwritten", [], _rows(4, 64)),
    ("grid_for_8_block_128", "unwritten", [], _rows(8, 128)),
    ("grid_for_4_block_32", "unwritten", [], _rows(4, 32)),
    ("one_block", "unwritten", [], lambda rows, cols: (1, 128)),
    ("block_48", "launch_rule", [], _rows(4, 48)),
    ("block_100", "launch_rule", [], _rows(4, 100)),
    ("block_2048", "launch_rule", [], _rows(64, 2048)),
    ("max_offsets_from_8", "shuffle_offsets", [(_SM_MAX_LOOP, _SM_MAX_LOOP.replace("16", "8"))], None),
    ("max_offsets_from_4", "shuffle_offsets", [(_SM_MAX_LOOP, _SM_MAX_LOOP.replace("16", "4"))], None),
    ("max_offsets_stop_at_2", "shuffle_offsets", [(_SM_MAX_LOOP, _SM_MAX_LOOP.replace("> 0", "> 1"))], None),
    ("sum_offsets_from_8", "shuffle_offsets", [(_SM_SUM_LOOP, _SM_SUM_LOOP.replace("16", "8"))], None),
    ("sum_offsets_stop_at_2", "shuffle_offsets", [(_SM_SUM_LOOP, _SM_SUM_LOOP.replace("> 0", "> 1"))], None),
    ("sum_offset_16_only", "shuffle_offsets", [(_SM_SUM_LOOP, _SM_SUM_LOOP.replace("> 0", "> 8"))], None),
    ("no_sum_broadcast", "no_broadcast", [("s = __shfl_sync(0xffffffffu, s, 0);\n", "")], None),
    ("max_by_shuffle_down", "no_broadcast", [("__shfl_xor_sync(0xffffffffu, m, offset)",
                                              "__shfl_down_sync(0xffffffffu, m, offset)")], None),
    ("no_max", "no_max", [(_SM_SUM, "s += expf(x[base + j])"), (_SM_OUT, "y[base + j] = expf(x[base + j]) * inv")],
     None),
    ("max_skipped", "no_max", [("float m = -INFINITY;", "float m = 0.0f;"),
                               ("for (long long j = lane; j < cols; j += 32) m = fmaxf(m, x[base + j]);\n", ""),
                               (_SM_MAX_LOOP + "(m, __shfl_xor_sync(0xffffffffu, m, offset));\n", "")], None),
    ("sum_without_max", "sum_without_max", [(_SM_SUM, "s += expf(x[base + j])")], None),
    ("numerator_without_max", "sum_without_max", [(_SM_OUT, "y[base + j] = expf(x[base + j]) * inv")], None),
    ("not_normalised", "no_normalize", [(_SM_OUT, "y[base + j] = expf(x[base + j] - m)")], None),
    ("times_sum", "no_normalize", [(_SM_OUT, "y[base + j] = expf(x[base + j] - m) * s")], None),
    ("transposed_read", "swapped", [("x[base + j]", "x[j * rows + row]", 3)], None),
    ("sum_lane_step_one", "lane_stride", [("j += 32) s +=", "j += 1) s +=")], None),
    ("write_lane_step_one", "output_race", [("j += 32) y[", "j += 1) y[")], None),
    ("row_per_block", "output_race", [(_SM_ROW, "const long long row = blockIdx.x;")], None),
    ("row_ignores_warps_per_block", "output_race",
     [("blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32", "blockIdx.x + threadIdx.x / 32")], None),
    ("block_2d_for_1d_body", "output_race", [], lambda rows, cols: ((rows + 3) // 4, (32, 4))),
])


# ---- d. SGEMM ----

_GEMM_SYNC_1 = "  __syncthreads();                             // both tiles complete before anyone reads them\n"
_GEMM_SYNC_2 = "  __syncthreads();                             // everyone done with them before the next loads\n"
_GEMM_A = "As[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;"
_GEMM_B = "Bs[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f;"
_GEMM_LOOP = "for (long long t = 0; t < K; t += TILE) {\n"
_GEMM_STORE = "if (row < M && col < N) C[row * N + col] = acc;"


def _tiles(tile, block=None):
    b = block or (tile, tile)
    return lambda m, n, k: (((n + tile - 1) // tile, (m + tile - 1) // tile), b)


SGEMM = _variants("cuda_sgemm", [
    ("no_barrier_after_loads", "shared_race", [(_GEMM_SYNC_1, "")], None),
    ("no_barrier_after_use", "shared_race", [(_GEMM_SYNC_2, "")], None),
    ("no_barriers", "shared_race", [(_GEMM_SYNC_1, ""), (_GEMM_SYNC_2, "")], None),
    ("early_return", "divergent_barrier",
     [("float acc = 0.0f;\n", "if (row >= M || col >= N) return;   // nothing to compute here\nfloat acc = 0.0f;\n")],
     None),
    ("barrier_before_store", "divergent_barrier",
     [(_GEMM_STORE, "if (row < M && col < N) {\n  __syncthreads();                 // the tiles are done\n"
                    "  C[row * N + col] = acc;\n}")], None),
    ("loop_only_inside_c", "divergent_barrier", [("t < K; t += TILE", "t < K && row < M; t += TILE")], None),
    ("load_a_only_inside", "uninitialized", [(_GEMM_A, "if (row < M && t + tx < K) As[ty][tx] = A[row * K + t + tx];")],
     None),
    ("load_b_only_inside", "uninitialized",
     [(_GEMM_B, "if (t + ty < K && col < N) Bs[ty][tx] = B[(t + ty) * N + col];")], None),
    ("tile_32_block_16", "uninitialized", [("constexpr int TILE = 16;", "constexpr int TILE = 32;")], None),
    ("tile_16_block_32", "shared_bounds", [], _tiles(32)),
    ("tile_8_block_16", "shared_bounds", [("constexpr int TILE = 16;", "constexpr int TILE = 8;")], None),
    ("inner_loop_le", "shared_bounds", [("k < TILE; ++k", "k <= TILE; ++k")], None),
    ("a_load_unguarded", "guard", [("(row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f", "A[row * K + t + tx]")],
     None),
    ("b_load_unguarded", "guard",
     [("(t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f", "B[(t + ty) * N + col]")], None),
    ("store_unguarded", "output_race", [(_GEMM_STORE, "C[row * N + col] = acc;")], None),
    ("a_guard_without_k", "guard", [("(row < M && t + tx < K) ?", "(row < M) ?")], None),
    ("b_guard_uses_row", "guard", [("(t + ty < K && col < N) ?", "(row < M && col < N) ?")], None),
    ("tiles_rounded_down", "k_range", [("t < K; t += TILE", "t + TILE <= K; t += TILE")], None),
    ("tiles_stop_a_tile_early", "k_range", [("t < K; t += TILE", "t < K - TILE; t += TILE")], None),
    ("first_tile_skipped", "k_range", [("for (long long t = 0; t < K", "for (long long t = TILE; t < K")], None),
    ("acc_reset_per_tile", "k_range", [(_GEMM_LOOP, _GEMM_LOOP + "  acc = 0.0f;\n")], None),
    ("acc_assigned", "assign", [("acc += As[ty][k] * Bs[k][tx]", "acc = As[ty][k] * Bs[k][tx]")], None),
    ("store_transposed", "transposed", [("C[row * N + col] = acc", "C[col * M + row] = acc")], None),
    ("grid_rounded_down", "unwritten", [], lambda m, n, k: ((n // 16, m // 16), (16, 16))),
    ("grid_rows_rounded_down", "unwritten", [], lambda m, n, k: (((n + 15) // 16, m // 16), (16, 16))),
    ("grid_axes_swapped", "unwritten", [], lambda m, n, k: (((m + 15) // 16, (n + 15) // 16), (16, 16))),
    ("block_16_by_8", "launch_rule", [], _tiles(16, (16, 8))),
    ("block_1d", "launch_rule", [], _tiles(16, 256)),
    ("block_64_by_64", "launch_rule", [], _tiles(64)),
    ("row_without_thread", "output_race",
     [("const long long row = (long long)blockIdx.y * TILE + ty;", "const long long row = (long long)blockIdx.y * TILE;")],
     None),
    ("column_from_ty", "output_race",
     [("const long long col = (long long)blockIdx.x * TILE + tx;", "const long long col = (long long)blockIdx.x * TILE + ty;")],
     None),
])


# ---- e. im2col ----

_I2C_GUARD = "if (k >= cols_numel) return;\n"
_I2C_INDEX = "const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;"
_I2C_INSIDE = "const bool inside = 0 <= iy && iy < H && 0 <= ix && ix < W;"
_I2C_STORE = "cols[k] = inside ? img[(c * H + iy) * W + ix] : 0.0f;"
_I2C_TAP = "const long long iy = oy * sh - ph + i, ix = ox * sw - pw + j;"
_DECODE_OUT = "const long long ox = k % ow, oy = (k / ow) % oh;\n"
_DECODE_IN = "const long long j = (k / (ow * oh)) % kw, i = (k / (ow * oh * kw)) % kh, c = k / (ow * oh * kw * kh);\n"
_DECODE = _DECODE_OUT + _DECODE_IN
_CHANNEL_FASTEST = ("const long long c = k % img_dims[0], ox = (k / img_dims[0]) % ow, oy = (k / (img_dims[0] * ow)) % oh;\n"
                    "const long long j = (k / (img_dims[0] * ow * oh)) % kw, i = (k / (img_dims[0] * ow * oh * kw)) % kh;\n")
_WINDOW_MAJOR = ("const long long j = k % kw, i = (k / kw) % kh, c = (k / (kw * kh)) % img_dims[0];\n"
                 "const long long ox = (k / (kw * kh * img_dims[0])) % ow, oy = k / (kw * kh * img_dims[0] * ow);\n")


def _per_column(threads=256, per=256, float_grid=False):
    def launch(c, h, w, kh, kw, oh, ow):
        n = c * kh * kw * oh * ow
        return (n / per if float_grid else (n + per - 1) // per), threads
    return launch


# Strides, paddings or H and W swapped where the body reads them: im2col and both col2ims read their sizes
# with the same lines.
_SIZE_SWAPS = [
    ("strides_swapped", "swap_hw", [("sh = geom[0], sw = geom[1]", "sh = geom[1], sw = geom[0]")], None),
    ("paddings_swapped", "swap_hw", [("ph = geom[2], pw = geom[3]", "ph = geom[3], pw = geom[2]")], None),
    ("h_and_w_swapped", "swap_hw", [("const long long H = img_dims[1], W = img_dims[2];",
                                     "const long long H = img_dims[2], W = img_dims[1];")], None),
]


def _window_variants(tap_line):
    """The stride, window-start, swap and decode-order variants of a body that decodes k as im2col does."""
    return [
        ("stride_rows_ignored", "stride", [("oy * sh - ph + i", "oy - ph + i")], None),
        ("stride_columns_ignored", "stride", [("ox * sw - pw + j", "ox - pw + j")], None),
        ("stride_ignored", "stride", [("oy * sh - ph + i", "oy - ph + i"), ("ox * sw - pw + j", "ox - pw + j")], None),
        ("padding_added_rows", "window_start", [("oy * sh - ph + i", "oy * sh + ph + i")], None),
        ("padding_added_columns", "window_start", [("ox * sw - pw + j", "ox * sw + pw + j")], None),
        ("padding_scaled_by_stride", "window_start", [("oy * sh - ph + i", "(oy - ph) * sh + i")], None),
        ("padding_ignored", "window_start", [("oy * sh - ph + i", "oy * sh + i"), ("ox * sw - pw + j", "ox * sw + j")],
         None),
        *_SIZE_SWAPS,
        ("taps_swapped", "swap_hw", [(tap_line, tap_line.replace("ph + i", "ph + j").replace("pw + j", "pw + i"))],
         None),
        ("decode_i_j_swapped", "order",
         [(_DECODE_IN, "const long long i = (k / (ow * oh)) % kh, j = (k / (ow * oh * kh)) % kw, "
                       "c = k / (ow * oh * kw * kh);\n")], None),
        ("decode_oy_ox_swapped", "order", [(_DECODE_OUT, "const long long oy = k % oh, ox = (k / oh) % ow;\n")], None),
        ("decode_channel_fastest", "order", [(_DECODE, _CHANNEL_FASTEST)], None),
        ("decode_windows_slowest", "order", [(_DECODE, _WINDOW_MAJOR)], None),
    ]


IM2COL = _variants("cuda_im2col", [
    ("no_guard", "guard", [(_I2C_GUARD, "")], None),
    ("guard_gt", "guard", [("k >= cols_numel", "k > cols_numel")], None),
    ("guard_minus_one", "unwritten", [("k >= cols_numel", "k >= cols_numel - 1")], None),
    ("guard_uses_img_numel", "unwritten", [("k >= cols_numel", "k >= img_numel")], None),
    ("grid_rounded_down", "unwritten", [], lambda c, h, w, kh, kw, oh, ow: (c * kh * kw * oh * ow // 256, 256)),
    ("grid_for_256_block_128", "unwritten", [], _per_column(threads=128)),
    ("grid_for_pixels", "unwritten", [], lambda c, h, w, kh, kw, oh, ow: ((c * oh * ow + 255) // 256, 256)),
    ("grid_float", "launch_rule", [], _per_column(float_grid=True)),
    ("block_2048", "launch_rule", [], _per_column(threads=2048, per=2048)),
    ("no_padding_check", "padding", [(_I2C_STORE, "cols[k] = img[(c * H + iy) * W + ix];")], None),
    ("upper_bounds_only", "padding", [(_I2C_INSIDE, "const bool inside = iy < H && ix < W;")], None),
    ("rows_checked_only", "padding", [(_I2C_INSIDE, "const bool inside = 0 <= iy && iy < H;")], None),
    ("padding_left_unwritten", "padding_unwritten",
     [(_I2C_STORE, "if (inside) cols[k] = img[(c * H + iy) * W + ix];")], None),
    ("index_block_plus_thread", "index", [(_I2C_INDEX, "const long long k = blockIdx.x + threadIdx.x;")], None),
    ("index_thread_only", "index", [(_I2C_INDEX, "const long long k = threadIdx.x;")], None),
    *_window_variants(_I2C_TAP),
])


# ---- f. col2im, gather and scatter ----

_C2I_GUARD = "if (p >= img_numel) return;\n"
_C2I_INDEX = "const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;"
_C2I_ROW_TEST = "if (ty < 0 || ty % sh != 0 || ty / sh >= oh) continue;"
_C2I_COL_TEST = "if (tx < 0 || tx % sw != 0 || tx / sw >= ow) continue;"
_C2I_COLS = "(((c * kh + i) * kw + j) * oh + oy) * ow + ox"


def _per_pixel(threads=256, per=256, float_grid=False, rounded_down=False):
    def launch(c, h, w, kh, kw, oh, ow):
        n = c * h * w
        return (n / per if float_grid else n // per if rounded_down else (n + per - 1) // per), threads
    return launch


COL2IM = _variants("cuda_col2im", [
    ("no_guard", "guard", [(_C2I_GUARD, "")], None),
    ("guard_gt", "guard", [("p >= img_numel", "p > img_numel")], None),
    ("guard_minus_one", "unwritten", [("p >= img_numel", "p >= img_numel - 1")], None),
    ("grid_rounded_down", "unwritten", [], _per_pixel(rounded_down=True)),
    ("grid_for_256_block_64", "unwritten", [], _per_pixel(threads=64)),
    ("grid_float", "launch_rule", [], _per_pixel(float_grid=True)),
    ("block_2048", "launch_rule", [], _per_pixel(threads=2048, per=2048)),
    ("sum_assigned", "assign", [("sum += cols[", "sum = cols[")], None),
    ("sum_reset_per_row", "assign", [("for (long long i = 0; i < kh; ++i) {\n",
                                      "for (long long i = 0; i < kh; ++i) {\n  sum = 0.0f;\n")], None),
    ("no_row_divisibility", "divisibility", [(_C2I_ROW_TEST, "if (ty < 0 || ty / sh >= oh) continue;")], None),
    ("no_column_divisibility", "divisibility", [(_C2I_COL_TEST, "if (tx < 0 || tx / sw >= ow) continue;")], None),
    ("no_divisibility", "divisibility", [(_C2I_ROW_TEST, "if (ty < 0 || ty / sh >= oh) continue;"),
                                         (_C2I_COL_TEST, "if (tx < 0 || tx / sw >= ow) continue;")], None),
    ("no_negative_row_test", "negative", [("ty < 0 || ", "")], None),
    ("no_negative_column_test", "negative", [("tx < 0 || ", "")], None),
    ("no_negative_tests", "negative", [("ty < 0 || ", ""), ("tx < 0 || ", "")], None),
    ("tap_added_rows", "window_start", [("const long long ty = py + ph - i;", "const long long ty = py - ph + i;")],
     None),
    ("tap_added_columns", "window_start", [("const long long tx = px + pw - j;", "const long long tx = px + pw + j;")],
     None),
    ("padding_subtracted", "window_start", [("ty = py + ph - i;", "ty = py - ph - i;")], None),
    ("padding_ignored", "window_start", [("ty = py + ph - i;", "ty = py - i;"), ("tx = px + pw - j;", "tx = px - j;")],
     None),
    ("stride_rows_ignored", "stride", [(_C2I_ROW_TEST + "\n  const long long oy = ty / sh;",
                                        "if (ty < 0 || ty >= oh) continue;\n  const long long oy = ty;")], None),
    ("stride_columns_ignored", "stride", [(_C2I_COL_TEST + "\n    const long long ox = tx / sw;",
                                           "if (tx < 0 || tx >= ow) continue;\n    const long long ox = tx;")], None),
    *_SIZE_SWAPS,
    ("cols_index_i_j_swapped", "order", [(_C2I_COLS, "(((c * kw + j) * kh + i) * oh + oy) * ow + ox")], None),
    ("cols_index_oy_ox_swapped", "order", [(_C2I_COLS, "(((c * kh + i) * kw + j) * ow + ox) * oh + oy")], None),
    ("cols_index_windows_slowest", "order", [(_C2I_COLS, "(((oy * ow + ox) * img_dims[0] + c) * kh + i) * kw + j")],
     None),
    ("pixel_row_not_wrapped", "pixel_decode", [("py = (p / W) % H", "py = p / W")], None),
    ("index_block_plus_thread", "index", [(_C2I_INDEX, "const long long p = blockIdx.x + threadIdx.x;")], None),
    ("index_thread_only", "index", [(_C2I_INDEX, "const long long p = threadIdx.x;")], _per_pixel(threads=64, per=64)),
])

_ATOMIC = "atomicAdd(&img[(c * H + iy) * W + ix], cols[k]);"
_ATOMIC_TEST = "if (0 <= iy && iy < H && 0 <= ix && ix < W)     // a tap in the padding adds nothing\n  "

COL2IM_ATOMIC = _variants("cuda_col2im_atomic", [
    ("plain_add", "plain_add", [(_ATOMIC, "img[(c * H + iy) * W + ix] += cols[k];")], None),
    ("plain_store", "plain_add", [(_ATOMIC, "img[(c * H + iy) * W + ix] = cols[k];")], None),
    ("read_then_write", "plain_add",
     [(_ATOMIC, "{\n    const float old = img[(c * H + iy) * W + ix];\n"
                "    img[(c * H + iy) * W + ix] = old + cols[k];\n  }")], None),
    ("no_guard", "guard", [(_I2C_GUARD, "")], None),
    ("guard_gt", "guard", [("k >= cols_numel", "k > cols_numel")], None),
    ("no_padding_check", "padding", [(_ATOMIC_TEST, "")], None),
    ("upper_bounds_only", "padding", [("0 <= iy && iy < H && 0 <= ix && ix < W", "iy < H && ix < W")], None),
    ("rows_checked_only", "padding", [("0 <= iy && iy < H && 0 <= ix && ix < W", "0 <= iy && iy < H")], None),
    ("grid_rounded_down", "unwritten", [], lambda c, h, w, kh, kw, oh, ow: (c * kh * kw * oh * ow // 256, 256)),
    ("grid_for_256_block_128", "unwritten", [], _per_column(threads=128)),
    ("grid_for_pixels", "unwritten", [], _per_pixel()),
    ("guard_uses_img_numel", "unwritten", [("k >= cols_numel", "k >= img_numel")], None),
    ("guard_minus_one", "unwritten", [("k >= cols_numel", "k >= cols_numel - 1")], None),
    ("grid_float", "launch_rule", [], _per_column(float_grid=True)),
    ("block_2048", "launch_rule", [], _per_column(threads=2048, per=2048)),
    *_window_variants(_I2C_TAP),
])


# ---- g. depthwise weight gradient ----

_DW_SYNC = "__syncthreads();                               // every warp's sum is stored before warp 0 reads them\n"
_DW_STORE = "if (lane == 0) warp_sums[warp] = sum;\n"
_DW_FIRST = "\nfor (int offset = 16; offset > 0; offset /= 2) sum +="
_DW_SECOND = "  for (int offset = 16; offset > 0; offset /= 2) sum +="
_DW_READ = "sum = lane < warps ? warp_sums[lane] : 0.0f;"
_DW_WRITE = "  if (lane == 0) gw[blockIdx.x] = sum;\n}\n"
_DW_INSIDE = "  if (0 <= iy && iy < H && 0 <= ix && ix < W)                     // 0 in the padding\n  "
_DW_TAP = "const long long iy = oy * sh - ph + i, ix = ox * sw - pw + j;"
_DW_DECODE = "const long long c = blockIdx.x / (kh * kw), i = (blockIdx.x / kw) % kh, j = blockIdx.x % kw;"


def _per_weight(threads=128, blocks=None):
    return lambda n, c, h, w, kh, kw, oh, ow: (c * kh * kw if blocks is None else blocks(c, kh, kw), threads)


DEPTHWISE = _variants("cuda_depthwise_weight_grad", [
    ("no_barrier", "shared_race", [(_DW_SYNC, "")], None),
    ("every_lane_stores", "shared_race", [(_DW_STORE, "warp_sums[warp] = sum;\n")], None),
    ("barrier_in_positions_loop", "divergent_barrier",
     [("    sum += gy[((n * C + c) * oh + oy) * ow + ox] * x[((n * C + c) * H + iy) * W + ix];\n",
       "    sum += gy[((n * C + c) * oh + oy) * ow + ox] * x[((n * C + c) * H + iy) * W + ix];\n"
       "  __syncthreads();                             // keep the threads together\n")], None),
    ("barrier_in_warp_0", "divergent_barrier",
     [("if (warp == 0) {\n", "if (warp == 0) {\n  __syncthreads();                             // to be safe\n")],
     None),
    ("idle_threads_return", "divergent_barrier",
     [("float sum = 0.0f;\n", "if (threadIdx.x >= N * oh * ow) return;      // no position for me\nfloat sum = 0.0f;\n")],
     None),
    ("all_lanes_read", "uninitialized", [(_DW_READ, "sum = warp_sums[lane];")], None),
    ("lanes_up_to_warps", "uninitialized", [("lane < warps ?", "lane <= warps ?")], None),
    ("every_lane_writes", "output_race", [("if (lane == 0) gw[blockIdx.x] = sum;", "gw[blockIdx.x] = sum;")], None),
    ("every_warp_writes", "output_race", [(_DW_WRITE, "}\nif (lane == 0) gw[blockIdx.x] = sum;\n")], None),
    ("no_padding_check", "padding", [(_DW_INSIDE, "  ")], None),
    ("lower_bounds_only", "guard", [("0 <= iy && iy < H && 0 <= ix && ix < W", "0 <= iy && 0 <= ix")], None),
    ("positions_le", "guard", [("p < N * oh * ow;", "p <= N * oh * ow;")], None),
    ("first_offsets_from_8", "shuffle_offsets", [(_DW_FIRST, _DW_FIRST.replace("16", "8"))], None),
    ("first_offsets_stop_at_2", "shuffle_offsets", [(_DW_FIRST, _DW_FIRST.replace("> 0", "> 1"))], None),
    ("second_offsets_from_8_block_1024", "shuffle_offsets", [(_DW_SECOND, _DW_SECOND.replace("16", "8"))],
     _per_weight(1024)),
    ("second_offsets_from_4_block_512", "shuffle_offsets", [(_DW_SECOND, _DW_SECOND.replace("16", "4"))],
     _per_weight(512)),
    ("no_second_level", "second_level",
     [(_DW_STORE + _DW_SYNC, ""), ("if (warp == 0) {\n  " + _DW_READ + "\n" + _DW_SECOND +
                                   " __shfl_down_sync(0xffffffffu, sum, offset);\n" + _DW_WRITE,
                                   "if (threadIdx.x == 0) gw[blockIdx.x] = sum;\n")], None),
    ("warp_0_reads_its_own_sum", "second_level", [(_DW_READ, "sum = lane == 0 ? warp_sums[0] : 0.0f;")], None),
    ("positions_assigned", "assign", [("    sum += gy[", "    sum = gy[")], None),
    ("shuffle_assigned", "assign", [(_DW_FIRST + " __shfl_down_sync",
                                     "\nfor (int offset = 16; offset > 0; offset /= 2) sum = __shfl_down_sync")], None),
    ("first_image_only", "no_batch", [("p < N * oh * ow;", "p < oh * ow;")], None),
    ("filter_flipped", "flip", [(_DW_TAP, "const long long iy = oy * sh - ph + (kh - 1 - i), "
                                          "ix = ox * sw - pw + (kw - 1 - j);")], None),
    ("filter_rows_flipped", "flip", [("oy * sh - ph + i", "oy * sh - ph + (kh - 1 - i)")], None),
    ("stride_rows_ignored", "stride", [("oy * sh - ph + i", "oy - ph + i")], None),
    ("stride_ignored", "stride", [("oy * sh - ph + i", "oy - ph + i"), ("ox * sw - pw + j", "ox - pw + j")], None),
    ("padding_added", "window_start", [("oy * sh - ph + i", "oy * sh + ph + i")], None),
    ("padding_scaled_by_stride", "window_start",
     [(_DW_TAP, "const long long iy = (oy - ph) * sh + i, ix = (ox - pw) * sw + j;")], None),
    ("decode_channel_fastest", "order",
     [(_DW_DECODE, "const long long c = blockIdx.x % C, i = (blockIdx.x / C) % kh, j = blockIdx.x / (C * kh);")], None),
    ("decode_i_j_swapped", "order",
     [(_DW_DECODE, "const long long c = blockIdx.x / (kh * kw), j = (blockIdx.x / kh) % kw, i = blockIdx.x % kh;")],
     None),
    ("grid_per_channel", "launch_rule", [], _per_weight(blocks=lambda c, kh, kw: c)),
    ("block_100", "launch_rule", [], _per_weight(100)),
    ("block_2d", "launch_rule", [], _per_weight((32, 4))),
])


CORPUS: list[Variant] = [*GELU, *POOL, *SOFTMAX, *SGEMM, *IM2COL, *COL2IM, *COL2IM_ATOMIC, *DEPTHWISE]


# ---- grading ----

class Row(NamedTuple):
    """One variant graded: ``planted`` and ``named`` are mistake keys (None: the reference / none named)."""

    variant: str
    exercise: str
    planted: str | None
    passed: bool
    named: str | None


def named_mistake(exercise_id: str, messages: list[str], key=cuda.mistake_key) -> str | None:
    """The key of the first mistake the feedback ``messages`` name ("-> sentence"), or None; ``key(exercise_id,
    sentence)`` looks it up (``triton_kernels.mistake_key`` for the Triton exercises)."""
    for message in messages:
        if "\n    -> " in message:
            sentence = message.split("\n    -> ", 1)[1].split("\n", 1)[0]
            return key(exercise_id, sentence) or f"unknown: {sentence}"
    return None


@contextlib.contextmanager
def _device(device):
    if device is None:
        yield
        return
    previous = os.environ.get(cuda.DEVICE_ENV)
    os.environ[cuda.DEVICE_ENV] = str(device)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(cuda.DEVICE_ENV, None)
        else:
            os.environ[cuda.DEVICE_ENV] = previous


def grade(variant: Variant, device=None) -> Row:
    """Grade one variant through ``run_checks``, the path ``check`` takes."""
    with _device(device):
        result = run_checks(cuda.EXERCISES_BY_ID[variant.exercise], variant.submission())
    return Row(variant.id, variant.exercise, variant.planted, result.passed,
               named_mistake(variant.exercise, result.messages))


def grade_corpus(device=None, exercises=None) -> list[Row]:
    """Grade every variant (of ``exercises``, default all) on ``device`` (None: $LABOPS_EXERCISE_DEVICE or
    the CPU; "cuda": the GPU). A row per variant: (variant, exercise, planted, passed, named)."""
    return [grade(v, device) for v in CORPUS if exercises is None or v.exercise in exercises]
