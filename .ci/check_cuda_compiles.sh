#!/usr/bin/env bash
# Compile every csrc/*/cuda.cu for sm_90a (H100, H200: what labops builds there) on a machine without a
# GPU or a CUDA toolkit, to catch compile errors (and register spills: -warn-spills) before spending GPU time.
# Usage: bash .ci/check_cuda_compiles.sh [file.cu ...]
#   extra nvcc flags: $NVCC_EXTRA (e.g. "-Xptxas -v" for registers per kernel)
#   nvcc: $NVCC, else NVIDIA's pip wheels when $CUDA_WHEELS_DIR is given, else nvcc on PATH, else the
#         wheels (nvcc, nvvm, crt, runtime, cccl, and the headers of cuBLAS, cuSPARSE and cuSOLVER that
#         ATen/cuda/CUDABlas.h includes; downloaded once into $CUDA_WHEELS_DIR, default /tmp/cuda-wheels).
#   torch headers: those of the GPU machines' torch (2.11, the wheel .ci/torch_headers.sh
#         downloads into $TORCH_HEADERS_DIR): the CPU wheel CI installs lacks some CUDA headers.
set -euo pipefail
source "$(dirname "$0")/torch_headers.sh"
inc=$(torch_headers "${TORCH_VERSION:-2.11.0}")
cuda_inc=()
nvcc=${NVCC:-}
[ -n "$nvcc" ] || [ -n "${CUDA_WHEELS_DIR:-}" ] || nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ]; then
  wheels=${CUDA_WHEELS_DIR:-/tmp/cuda-wheels}
  if [ ! -x "$wheels/nvidia/cu13/bin/nvcc" ] || [ ! -f "$wheels/nvidia/cu13/include/cusparse.h" ]; then
    mkdir -p "$wheels"
    python3 -m pip download --no-deps -d "$wheels" nvidia-cuda-nvcc nvidia-nvvm nvidia-cuda-crt \
      nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cublas nvidia-cusparse nvidia-cusolver >/dev/null
    for w in "$wheels"/*.whl; do (cd "$wheels" && unzip -q -o "$w" 'nvidia/cu13/bin/*' 'nvidia/cu13/nvvm/*' \
      'nvidia/cu13/include/*' 'nvidia/cu13/lib/*' -x 'nvidia/cu13/lib/libcublas*' 'nvidia/cu13/lib/libcus*' \
      2>/dev/null || true; rm -f "$w"); done  # unzip exits 11 for a wheel without one of the folders
    chmod +x "$wheels"/nvidia/cu13/bin/* "$wheels"/nvidia/cu13/nvvm/bin/*
  fi
  nvcc=$wheels/nvidia/cu13/bin/nvcc
  cuda_inc=(-I"$wheels/nvidia/cu13/include" -I"$wheels/nvidia/cu13/include/cccl")
fi
pyinc=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
out=$(mktemp -d)
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(csrc/*/cuda.cu)
for f in "${files[@]}"; do
  echo "== $f"
  obj="$out/$(basename "$(dirname "$f")")_$(basename "$f").o"  # every layer's file is called cuda.cu
  "$nvcc" -c "$f" -o "$obj" -std=c++20 -O3 --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -DLABOPS_SM90A=1 -DLABOPS_WITH_CUDA \
    -Xptxas -warn-spills ${NVCC_EXTRA:-} "${cuda_inc[@]}" -I"$inc" -I"$inc/torch/csrc/api/include" -I"$pyinc" -Xcompiler -fPIC \
    2>&1 | grep -v "Warning: The .* is deprecated" || true
  [ -f "$obj" ] || { echo "FAILED: $f"; rm -rf "$out"; exit 1; }
done
rm -rf "$out"
echo "all compiled"
