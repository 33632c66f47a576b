#!/usr/bin/env bash
# Compile every csrc/cuda/*.cu for sm_90 against a CUDA build of torch, on a
# machine without a GPU, to catch compile errors before spending GPU time.
# Usage: .ci/check_cuda_compiles.sh [file.cu ...]   (TORCH_CUDA_PYTHON picks the venv)
set -euo pipefail
py=${TORCH_CUDA_PYTHON:-/opt/venv-cuda/bin/python}
inc=$("$py" -c "import torch, os; print(os.path.dirname(torch.__file__) + '/include')")
pyinc=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
out=$(mktemp -d)
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(csrc/cuda/*.cu)
for f in "${files[@]}"; do
  echo "== $f"
  nvcc -c "$f" -o "$out/$(basename "$f").o" -std=c++20 -O3 --expt-relaxed-constexpr -arch=sm_90 \
    -Xptxas -warn-spills -I"$inc" -I"$inc/torch/csrc/api/include" -I"$pyinc" -Xcompiler -fPIC
done
rm -rf "$out"
echo "all compiled"
