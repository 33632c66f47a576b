"""The Triton exercises' references, and each classic mistake planted in a copy of one.

``SOLUTIONS[exercise_id]`` is a reference (a kernel a student can learn from); ``CORPUS`` holds the
references and one ``Variant`` per planted mistake (a key of ``triton_kernels.MISTAKES[exercise]``).
Grading the corpus (``grade_corpus``, the path ``check`` takes) tells how well the feedback names mistakes:
every variant fails and names its planted mistake. With ``device="cuda"`` the same kernels run compiled on
the GPU, which gives the parity rows of ``tools/gpu_exercises.py``.

A Triton kernel must live in a Python file (``@triton.jit`` reads its source), so every variant is a kernel
of its own here, written as the reference with one change (marked ``# planted``).
"""

from __future__ import annotations

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


@triton.jit
def _gelu_no_mask(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # planted: no mask
    gy = tl.load(gy_ptr + offs)
    cdf = 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, x * cdf)
    tl.store(gx_ptr + offs, gy * (cdf + x * 0.3989422804014327 * tl.exp(-0.5 * x * x)))


@triton.jit
def _gelu_mask_le(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs <= n  # planted: off by one
    x = tl.load(x_ptr + offs, mask=mask)
    gy = tl.load(gy_ptr + offs, mask=mask)
    cdf = 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, x * cdf, mask=mask)
    tl.store(gx_ptr + offs, gy * (cdf + x * 0.3989422804014327 * tl.exp(-0.5 * x * x)), mask=mask)


@triton.jit
def _gelu_no_pid(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)  # planted: every program takes the first block
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    gy = tl.load(gy_ptr + offs, mask=mask)
    cdf = 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, x * cdf, mask=mask)
    tl.store(gx_ptr + offs, gy * (cdf + x * 0.3989422804014327 * tl.exp(-0.5 * x * x)), mask=mask)


@triton.jit
def _gelu_tanh(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    gy = tl.load(gy_ptr + offs, mask=mask)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    cdf = 0.5 * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * u)) - 1.0))  # planted: tanh(u), the approximation
    tl.store(y_ptr + offs, x * cdf, mask=mask)
    tl.store(gx_ptr + offs, gy * (cdf + x * 0.3989422804014327 * tl.exp(-0.5 * x * x)), mask=mask)


@triton.jit
def _gelu_calls_torch(x_ptr, gy_ptr, y_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, torch.nn.functional.gelu(x), mask=mask)  # planted: not Triton
    tl.store(gx_ptr + offs, tl.load(gy_ptr + offs, mask=mask), mask=mask)


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


@triton.jit
def _softmax_no_max(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x)  # planted: the max is not subtracted
    tl.store(y_ptr + row * y_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def _softmax_zero_other(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)  # planted: masked lanes are 0
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * y_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def _softmax_row_stride(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))  # planted: n_cols for the stride
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * y_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def _softmax_no_store_mask(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * y_row_stride + cols, e / tl.sum(e, axis=0))  # planted: no mask


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


@triton.jit
def _matmul_k_unmasked(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                       stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):  # planted: the loads mask M and N, not K
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak, mask=rm[:, None] < M, other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn, mask=rn[None, :] < N, other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _matmul_fp16_acc(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                     stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)  # planted: the inputs' dtype
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, out_dtype=tl.float16)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _matmul_acc_reset(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                      stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b)  # planted: = for +=
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _matmul_store_unmasked(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                           stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc)  # planted: no mask


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


def _variants(exercise, reference, table):
    ref = SOLUTIONS[exercise]
    out = [Variant(f"{exercise}/reference", exercise, None, ref.kernel, ref.launch)]
    for name, planted, kernel, launch in table:
        assert planted in triton_kernels.MISTAKES[exercise], (exercise, planted)
        out.append(Variant(f"{exercise}/{name}", exercise, planted, kernel or reference, launch or ref.launch))
    return out


CORPUS: list[Variant] = [
    *_variants("triton_gelu", gelu_kernel, [
        ("no_mask", "mask", _gelu_no_mask, None),
        ("mask_le", "off_by_one", _gelu_mask_le, None),
        ("grid_rounded_down", "unwritten", None, lambda n: ((n // 256,), {"BLOCK": 256})),
        ("no_program_id", "unwritten", _gelu_no_pid, lambda n: ((triton.cdiv(n, 256),), {"BLOCK": 256})),
        ("tanh", "tanh", _gelu_tanh, None),
        ("calls_torch", "not_triton", _gelu_calls_torch, None),
        ("grid_float", "launch_rule", None, lambda n: ((n / 256,), {"BLOCK": 256})),
    ]),
    *_variants("triton_softmax", softmax_kernel, [
        ("no_max", "no_max", _softmax_no_max, None),
        ("masked_lanes_zero", "zero_lanes", _softmax_zero_other, None),
        ("row_stride", "row_stride", _softmax_row_stride, None),
        ("no_store_mask", "mask", _softmax_no_store_mask, None),
        ("block_too_small", "launch_rule", None, lambda rows, cols: ((rows,), {"BLOCK": 8})),
    ]),
    *_variants("triton_matmul", matmul_kernel, [
        ("k_tail_unmasked", "k_tail", _matmul_k_unmasked, None),
        ("fp16_accumulator", "accumulator_dtype", _matmul_fp16_acc, None),
        ("grid_axes_swapped", "unwritten", None, lambda m, n, k: (
            (triton.cdiv(n, 16), triton.cdiv(m, 16)), {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16})),
        ("acc_reset_each_tile", "k_range", _matmul_acc_reset, None),
        ("store_unmasked", "mask", _matmul_store_unmasked, None),
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
