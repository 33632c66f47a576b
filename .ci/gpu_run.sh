#!/usr/bin/env bash
# One call on the GPU machine: build, doctor, tests (CPU + CUDA), benchmarks.
# Usage: .ci/gpu_run.sh "<pytest args>" "<bench suites, space separated>"
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 LABOPS_CACHE_DIR=/tmp/labops-cache MPLBACKEND=Agg
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
date -u +"date %Y-%m-%d %H:%M UTC"
start=$(date +%s)
python3 -m labops build 2>&1 | tail -5
echo "build took $(( $(date +%s) - start )) s"
python3 -m labops doctor
python3 -m pytest -q -p no:cacheprovider ${1:-tests} 2>&1 | tail -25
for suite in ${2:-}; do
  python3 -m labops bench --device cuda --suite "$suite" --json "$out/$suite.json" 2>&1 | tee "$out/$suite.md"
done
