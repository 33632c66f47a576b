#!/usr/bin/env bash
# GPU machine, one call: build, the rtc tests, the measurements the course's claims rest on
# (tools/gpu_course_claims.py) and the roofline of every suite. Results land in $OUT:
# elementwise_sizes.json, cudnn_kernels.json, roofline_cuda.json, and the logs.
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 MPLBACKEND=Agg LABOPS_CACHE_DIR=${LABOPS_CACHE_DIR:-/tmp/labops-cache}
out=${OUT:-/tmp/out}; mkdir -p "$out"
step() { echo "[$SECONDS s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python3 -m labops build 2>&1 | tail -1; step built
timeout 240 python3 -m pytest -o addopts="" -q -p no:cacheprovider -n 8 ${TESTS:-tests/test_rtc.py tests/test_rtc_layers.py tests/test_rtc_block.py tests/test_simt.py} \
  > "$out/pytest.log" 2>&1; echo "pytest rc $?"; tail -3 "$out/pytest.log"; step tested
timeout 300 python3 tools/gpu_course_claims.py "$out" > "$out/claims.log" 2>&1; echo "claims rc $?"; tail -40 "$out/claims.log"; step claims
timeout "${ROOFLINE_TIMEOUT:-400}" python3 -m labops bench --device cuda --roofline --json "$out/roofline_cuda.json" \
  > "$out/roofline.log" 2>&1; echo "roofline rc $?"; head -2 "$out/roofline.log"; step roofline
