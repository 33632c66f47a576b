#!/usr/bin/env bash
# GPU machine, call 1: build everything, run every unit test (CPU and CUDA).
# Tests run in $WORKERS processes (pytest-xdist is on that machine; default 8).
# (No Jupyter there: the notebooks' nbval options are dropped with -o addopts.)
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 LABOPS_CACHE_DIR=/tmp/labops-cache MPLBACKEND=Agg
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
start=$(date +%s)
python3 -m labops build 2>&1 | tail -3
echo "build took $(( $(date +%s) - start )) s"
timeout "${TEST_TIMEOUT:-480}" python3 -X faulthandler -m pytest -o addopts="" -q -rfE -p no:cacheprovider \
  --durations=15 -n "${WORKERS:-8}" ${1:-tests} > "$out/pytest.log" 2>&1
echo "pytest rc $?"
grep -E "^(FAILED|ERROR)|passed|failed" "$out/pytest.log" | tail -40
