"""The Triton exercises' references, and each classic mistake planted in a copy of one.

``SOLUTIONS[exercise_id]`` is a reference (a kernel a student can learn from); ``CORPUS`` holds the
references and one ``Variant`` per planted mistake (a key of ``triton_kernels.MISTAKES[exercise]``).
Grading the corpus (``grade_corpus``, the path ``check`` takes) tells how well the feedback names mistakes:
every variant fails and names its planted mistake. With ``device="cuda"`` the same kernels run compiled on
the GPU, which gives the parity rows of ``tools/gpu_exercises.py``.

Each variant is the reference's source with a textual edit (``cuda_corpus.edit``), compiled as a kernel of its
own (``planted_kernel``); a change of the launch alone keeps the reference kernel.
"""

from __future__ import annotations

import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Callable

import torch
import triton
import triton.language as tl

from . import cuda_corpus, triton_kernels
from ._core import run_checks
from .cuda_corpus import Row
from .triton_kernels import TritonSubmission, triton_submission

__all__ = ["CORPUS", "FAST", "SOLUTIONS", "Variant", "grade", "grade_corpus"]


# ---- a. GELU ----

@triton.jit
def gelu_kernel(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    # Program pid takes elements pid * BLOCK ... pid * BLOCK + BLOCK - 1; the last block runs past n when n is
    # not a multiple of BLOCK, so every load and store is masked to offs < n.
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    gy = tl.load(gy_ptr + offs, mask=mask)
    cdf = 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))  # Phi(x), the standard normal CDF
    pdf = 0.3989422804014327 * tl.exp(-0.5 * x * x)  # phi(x), its density
    tl.store(y_ptr + offs, x * cdf, mask=mask)
    tl.store(gx_ptr + offs, gy * (cdf + x * pdf), mask=mask)


def gelu_launch(n):
    """1024 elements a program; enough programs to cover n: round up."""
    return (triton.cdiv(n, 1024),), {"BLOCK": 1024}


# ---- b. softmax ----

@triton.jit
def softmax_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr):
    # One program per row; the whole row is one block of BLOCK >= n_cols lanes (a power of two), so the lanes
    # past n_cols are masked: loaded as -inf, exp(-inf) = 0 adds nothing to the sum, and never stored.
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)  # stable: exp(x - max) <= 1 never overflows
    e = tl.exp(x)
    tl.store(y_ptr + row * y_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


def softmax_launch(rows, cols):
    """One program per row, the row in one block: the next power of two >= cols."""
    return (rows,), {"BLOCK": triton.next_power_of_2(cols)}


# ---- c. matmul ----

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # Program (pid_m, pid_n) computes the BLOCK_M x BLOCK_N tile of C at rows rm, columns rn: it walks along K
    # one BLOCK_K tile at a time, multiplying a tile of A by a tile of B with tl.dot, summed in float32.
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        # zero outside A and B: a partial tile at an edge (of M, N or K) adds nothing
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_launch(m, n, k):
    """32 x 32 tiles of C, 32 along K: x along M's tiles, y along N's."""
    return (triton.cdiv(m, 32), triton.cdiv(n, 32)), {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}


SOLUTIONS: dict[str, TritonSubmission] = {
    "triton_gelu": triton_submission(gelu_kernel, gelu_launch),
    "triton_softmax": triton_submission(softmax_kernel, softmax_launch),
    "triton_matmul": triton_submission(matmul_kernel, matmul_launch),
}

# Larger tiles for the GPU's timing (tools/gpu_exercises.py); the same kernels.
FAST: dict[str, TritonSubmission] = {
    "triton_gelu": triton_submission(gelu_kernel, lambda n: ((triton.cdiv(n, 4096),), {"BLOCK": 4096})),
    "triton_matmul": triton_submission(matmul_kernel, lambda m, n, k: (
        (triton.cdiv(m, 128), triton.cdiv(n, 128)), {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32})),
}


@dataclass(frozen=True)
class Variant:
    """One submission of the corpus: ``planted`` is the mistake key (None for a reference)."""

    id: str
    exercise: str
    planted: str | None
    kernel: object
    launch: Callable

    def submission(self) -> TritonSubmission:
        return triton_submission(self.kernel, self.launch)

    @property
    def sentence(self) -> str | None:
        return None if self.planted is None else triton_kernels.MISTAKES[self.exercise][self.planted].sentence


def planted_kernel(reference, name: str, *changes):
    """The @triton.jit kernel whose source is ``reference``'s with ``changes`` made (``cuda_corpus.edit``: each
    ``(old, new[, count])``, ``old`` found exactly ``count`` times). Its source is registered with linecache
    under ``<triton_corpus NAME>``, as a notebook cell's is, so Triton can read it (``inspect.getsource``)."""
    source = cuda_corpus.edit(textwrap.dedent(inspect.getsource(reference.fn)), *changes)
    filename = f"<triton_corpus {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"triton": triton, "tl": tl, "torch": torch}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[reference.fn.__name__]


def _variants(exercise, table):
    """The reference and one variant per row ``(name, planted key, edits of the kernel, launch or None)``."""
    ref = SOLUTIONS[exercise]
    out = [Variant(f"{exercise}/reference", exercise, None, ref.kernel, ref.launch)]
    for name, planted, changes, launch in table:
        assert planted in triton_kernels.MISTAKES[exercise], (exercise, planted)
        kernel = planted_kernel(ref.kernel, f"{exercise}/{name}", *changes) if changes else ref.kernel
        out.append(Variant(f"{exercise}/{name}", exercise, planted, kernel, launch or ref.launch))
    return out


_GELU_MASK = "mask = offs < n"
_GELU_CDF = "cdf = 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))"
_GELU_GX = "gy * (cdf + x * pdf)"
_SM_LOAD = "x_ptr + row * x_row_stride + cols, mask=mask, other=-float(\"inf\")"
_SM_STORE = "e / tl.sum(e, axis=0), mask=mask"
_MM_A_MASK = "mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0"
_MM_B_MASK = "mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0"
_MM_STORE = "acc,\n             mask=(rm[:, None] < M) & (rn[None, :] < N)"


def _tiles(block):
    return lambda m, n, k: ((triton.cdiv(m, block), triton.cdiv(n, block)),
                            {"BLOCK_M": block, "BLOCK_N": block, "BLOCK_K": block})


CORPUS: list[Variant] = [
    *_variants("triton_gelu", [
        ("no_mask", "mask", [(", mask=mask", "", 4)], None),
        ("mask_le", "off_by_one", [(_GELU_MASK, "mask = offs <= n")], None),
        ("grid_rounded_down", "unwritten", [], lambda n: ((n // 256,), {"BLOCK": 256})),
        ("no_program_id", "unwritten", [("offs = pid * BLOCK + tl.arange(0, BLOCK)", "offs = tl.arange(0, BLOCK)")],
         lambda n: ((triton.cdiv(n, 256),), {"BLOCK": 256})),
        ("tanh", "tanh", [(_GELU_CDF, "u = 0.7978845608028654 * (x + 0.044715 * x * x * x)\n    "
                                      "cdf = 0.5 * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * u)) - 1.0))")], None),
        ("erf_of_x", "erf_argument", [("tl.erf(x * 0.7071067811865476)", "tl.erf(x)")], None),
        ("grad_without_x_pdf", "product_rule", [(_GELU_GX, "gy * cdf")], None),
        ("grad_without_gy", "chain_rule", [(_GELU_GX, "(cdf + x * pdf)")], None),
        ("outputs_swapped", "swapped_outputs", [("y_ptr + offs, x * cdf", "gx_ptr + offs, x * cdf"),
                                                ("gx_ptr + offs, gy * (cdf", "y_ptr + offs, gy * (cdf")], None),
        ("calls_torch", "not_triton", [("x * cdf, mask=mask", "torch.nn.functional.gelu(x), mask=mask")], None),
        ("grid_float", "launch_rule", [], lambda n: ((n / 256,), {"BLOCK": 256})),
    ]),
    *_variants("triton_softmax", [
        ("no_max", "no_max", [("x = x - tl.max(x, axis=0)", "x = x")], None),
        ("masked_lanes_zero", "zero_lanes", [('other=-float("inf")', "other=0.0")], None),
        ("row_stride", "row_stride", [("row * x_row_stride", "row * n_cols")], None),
        ("no_store_mask", "mask", [(_SM_STORE, "e / tl.sum(e, axis=0)")], None),
        ("no_normalize", "no_normalize", [(_SM_STORE, "e, mask=mask")], None),
        ("block_too_small", "launch_rule", [], lambda rows, cols: ((rows,), {"BLOCK": 8})),
    ]),
    *_variants("triton_matmul", [
        ("k_tail_unmasked", "k_tail", [(_MM_A_MASK, "mask=rm[:, None] < M, other=0.0"),
                                       (_MM_B_MASK, "mask=rn[None, :] < N, other=0.0")], None),
        ("fp16_accumulator", "accumulator_dtype", [("dtype=tl.float32", "dtype=tl.float16"),
                                                   ("acc += tl.dot(a, b)", "acc = tl.dot(a, b, acc, out_dtype=tl.float16)")],
         None),
        ("grid_axes_swapped", "unwritten", [], lambda m, n, k: (
            (triton.cdiv(n, 16), triton.cdiv(m, 16)), {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16})),
        ("acc_reset_each_tile", "k_range", [("acc += tl.dot(a, b)", "acc = tl.dot(a, b)")], None),
        ("store_unmasked", "mask", [(_MM_STORE, "acc")], None),
        ("stored_transposed", "transposed", [("c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn",
                                              "c_ptr + rn[None, :] * M + rm[:, None]")], _tiles(16)),
        ("block_of_8", "launch_rule", [], _tiles(8)),
    ]),
]


def grade(variant: Variant, device=None) -> Row:
    """Grade one variant through ``run_checks``, the path ``check`` takes (``device``: "cuda" compiles it)."""
    with cuda_corpus._device(device):
        result = run_checks(triton_kernels.EXERCISES_BY_ID[variant.exercise], variant.submission())
    return Row(variant.id, variant.exercise, variant.planted, result.passed,
               cuda_corpus.named_mistake(variant.exercise, result.messages, triton_kernels.mistake_key))


def grade_corpus(device=None, exercises=None) -> list[Row]:
    """Grade every variant (of ``exercises``, default all) on ``device``: a Row each."""
    return [grade(v, device) for v in CORPUS if exercises is None or v.exercise in exercises]
