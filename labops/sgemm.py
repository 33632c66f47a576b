"""Your own GEMM: C = A·B in float32 as labops.rtc kernels, from the readable one to a fast one.

Notebook 05 builds convolution as im2col + GEMM and leaves the GEMM to cuBLAS. These kernels open it. Each
step is a CUDA C body that runs on the CPU (rtc's fibers: small sizes, every access checked) and on a GPU
(NVRTC), and each is checked against the first, in the spirit of llm.c's numbered kernels:

1. ``naive``: one thread per element of C, reading a row of A and a column of B from global memory:
   2·K loads per 2·K flops, and the loads of B's column are 4·N bytes apart.
2. ``tiled``: a block of 16 x 16 threads computes a 16 x 16 tile of C. Each step loads a 16 x 16 tile of A
   and one of B into shared memory (one element per thread, coalesced), waits at a barrier, and does its
   16 multiply-adds from shared memory: global loads fall 16-fold. The second barrier stops a fast thread
   from overwriting a tile that others still read.
3. ``register_blocked``: a block of 256 threads computes a 128 x 128 tile of C, each thread 8 rows x 8
   columns of it (the columns 16 apart, so that neighbouring threads touch neighbouring words) held in
   registers. Per step of 8 along K a thread reads 8 values of A and 8 of B from shared
   memory and does 64 multiply-adds: shared-memory traffic per flop falls 8-fold more, and the loop is
   limited by arithmetic, not loads.
4. ``vectorized``: the same, reading shared memory 16 bytes at a time (``float4``): a step of K is 4
   load instructions instead of 16. (A plain ``float4`` pointer is not checked on the CPU: the tiles'
   writes still are.)

Every kernel takes ``A`` (M x K), ``B`` (K x N) and writes ``C`` (M x N), all float32, row-major, any
sizes; ``launch(step, m, n)`` gives its grid and block.

Example::

    >>> A, B = torch.randn(40, 30), torch.randn(30, 20)
    >>> C = multiply(A, B, "tiled")
    >>> bool(torch.allclose(C, A @ B, atol=1e-4))
    True
"""

from __future__ import annotations

import torch

from labops import rtc

__all__ = ["LADDER", "launch", "multiply"]

NAIVE = r"""
const int M = A_dims[0], K = A_dims[1], N = B_dims[1];
const int row = blockIdx.y * blockDim.y + threadIdx.y;
const int col = blockIdx.x * blockDim.x + threadIdx.x;
if (row >= M || col >= N) return;
float acc = 0.0f;
for (int k = 0; k < K; ++k) acc += A[(long long)row * K + k] * B[(long long)k * N + col];
C[(long long)row * N + col] = acc;
"""

TILED = r"""
#define TILE 16
__shared__ float A_tile[TILE][TILE];
__shared__ float B_tile[TILE][TILE];
const int M = A_dims[0], K = A_dims[1], N = B_dims[1];
const int ty = threadIdx.y, tx = threadIdx.x;
const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
float acc = 0.0f;
for (int k0 = 0; k0 < K; k0 += TILE) {
  // each thread loads one element of each tile; outside the matrices it loads 0
  A_tile[ty][tx] = (row < M && k0 + tx < K) ? A[(long long)row * K + k0 + tx] : 0.0f;
  B_tile[ty][tx] = (k0 + ty < K && col < N) ? B[(long long)(k0 + ty) * N + col] : 0.0f;
  __syncthreads();  // the tiles are whole
  for (int k = 0; k < TILE; ++k) acc += A_tile[ty][k] * B_tile[k][tx];
  __syncthreads();  // everyone is done with them before the next load
}
if (row < M && col < N) C[(long long)row * N + col] = acc;
"""

REGISTER_BLOCKED = r"""
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
// A's tile is stored transposed, so that a thread's 8 values of A for one k are contiguous
__shared__ float A_tile[BK][BM];
__shared__ float B_tile[BK][BN];
const int M = A_dims[0], K = A_dims[1], N = B_dims[1];
const int t = threadIdx.x;                                   // 256 threads
// rows sub_row .. sub_row + 7; columns lane_col, lane_col + 16, ...: neighbouring threads read neighbouring
// words of B_tile (no two in a bank) and write neighbouring elements of C
const int sub_row = (t / (BN / TN)) * TM, lane_col = t % (BN / TN);
const int block_row = blockIdx.y * BM, block_col = blockIdx.x * BN;
float acc[TM][TN];
for (int i = 0; i < TM; ++i)
  for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
float a[TM], b[TN];
for (int k0 = 0; k0 < K; k0 += BK) {
  for (int i = t; i < BM * BK; i += 256) {                   // 4 elements of A per thread
    const int r = i / BK, c = i % BK;
    A_tile[c][r] = (block_row + r < M && k0 + c < K) ? A[(long long)(block_row + r) * K + k0 + c] : 0.0f;
  }
  for (int i = t; i < BK * BN; i += 256) {                   // 4 elements of B per thread, coalesced
    const int r = i / BN, c = i % BN;
    B_tile[r][c] = (k0 + r < K && block_col + c < N) ? B[(long long)(k0 + r) * N + block_col + c] : 0.0f;
  }
  __syncthreads();
  for (int k = 0; k < BK; ++k) {
    for (int i = 0; i < TM; ++i) a[i] = A_tile[k][sub_row + i];
    for (int j = 0; j < TN; ++j) b[j] = B_tile[k][lane_col + j * (BN / TN)];
    for (int i = 0; i < TM; ++i)
      for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];  // 64 multiply-adds per 16 shared loads
  }
  __syncthreads();
}
for (int i = 0; i < TM; ++i)
  for (int j = 0; j < TN; ++j) {
    const int row = block_row + sub_row + i, col = block_col + lane_col + j * (BN / TN);
    if (row < M && col < N) C[(long long)row * N + col] = acc[i][j];
  }
"""

VECTORIZED = r"""
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
// As register_blocked, with 16-byte shared-memory loads: a thread's 8 values of A for one k are two float4,
// its 8 of B two float4 (columns 4 * lane_col .. + 3 and 64 + the same), so a k step is 4 loads, not 16.
__shared__ __align__(16) float A_tile[BK][BM];
__shared__ __align__(16) float B_tile[BK][BN];
const int M = A_dims[0], K = A_dims[1], N = B_dims[1];
const int t = threadIdx.x;
const int sub_row = (t / 16) * TM, col4 = (t % 16) * 4;
const int block_row = blockIdx.y * BM, block_col = blockIdx.x * BN;
float acc[TM][TN];
for (int i = 0; i < TM; ++i)
  for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
for (int k0 = 0; k0 < K; k0 += BK) {
  for (int i = t; i < BM * BK; i += 256) {
    const int r = i / BK, c = i % BK;
    A_tile[c][r] = (block_row + r < M && k0 + c < K) ? A[(long long)(block_row + r) * K + k0 + c] : 0.0f;
  }
  for (int i = t; i < BK * BN; i += 256) {
    const int r = i / BN, c = i % BN;
    B_tile[r][c] = (k0 + r < K && block_col + c < N) ? B[(long long)(k0 + r) * N + block_col + c] : 0.0f;
  }
  __syncthreads();
  for (int k = 0; k < BK; ++k) {
    const float4 a0 = *(const float4*)&A_tile[k][sub_row], a1 = *(const float4*)&A_tile[k][sub_row + 4];
    const float4 b0 = *(const float4*)&B_tile[k][col4], b1 = *(const float4*)&B_tile[k][64 + col4];
    const float a[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    const float b[TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
    for (int i = 0; i < TM; ++i)
      for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
  }
  __syncthreads();
}
for (int i = 0; i < TM; ++i)
  for (int j = 0; j < TN; ++j) {
    const int row = block_row + sub_row + i, col = block_col + (j < 4 ? col4 + j : 64 + col4 + j - 4);
    if (row < M && col < N) C[(long long)row * N + col] = acc[i][j];
  }
"""

LADDER = {
    "naive": rtc.kernel("sgemm_naive", ["A", "B"], ["C"], NAIVE),
    "tiled": rtc.kernel("sgemm_tiled", ["A", "B"], ["C"], TILED),
    "register_blocked": rtc.kernel("sgemm_register_blocked", ["A", "B"], ["C"], REGISTER_BLOCKED),
    "vectorized": rtc.kernel("sgemm_vectorized", ["A", "B"], ["C"], VECTORIZED),
}


def launch(step: str, m: int, n: int) -> dict:
    """The grid and block of ``step`` for an m x n result (keyword arguments of a launch)."""
    if step in ("naive", "tiled"):
        return {"grid": (-(-n // 16), -(-m // 16)), "block": (16, 16)}
    if step in ("register_blocked", "vectorized"):
        return {"grid": (-(-n // 128), -(-m // 128)), "block": 256}
    raise ValueError(f"labops.sgemm: step must be one of {', '.join(LADDER)}, got {step!r}")


def multiply(A: torch.Tensor, B: torch.Tensor, step: str = "tiled", checked: bool = False) -> torch.Tensor:
    """C = A·B with the ``step`` kernel, on A's device (float32, 2-D, A.shape[1] == B.shape[0])."""
    if step not in LADDER:
        raise ValueError(f"labops.sgemm: step must be one of {', '.join(LADDER)}, got {step!r}")
    for name, t in (("A", A), ("B", B)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype != torch.float32:
            raise TypeError(f"labops.sgemm: {name} must be a 2-D float32 tensor")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"labops.sgemm: A's columns must equal B's rows, got A {tuple(A.shape)} and B "
                         f"{tuple(B.shape)}")
    C = torch.empty(A.shape[0], B.shape[1], device=A.device)
    LADDER[step](A.contiguous(), B.contiguous(), C, **launch(step, A.shape[0], B.shape[1]), checked=checked)
    return C
