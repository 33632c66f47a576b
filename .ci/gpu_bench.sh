#!/usr/bin/env bash
# GPU machine, call 2: every benchmark suite, one JSON and one table each.
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 LABOPS_CACHE_DIR=/tmp/labops-cache
out=${OUT:-/tmp/out}; mkdir -p "$out"
python3 -m labops build 2>&1 | tail -1
for suite in ${1:-activation upsample depthwise conv2d_mm pooling reorg softmax}; do
  python3 -m labops bench --device cuda --suite "$suite" --json "$out/$suite.json" > "$out/$suite.md" 2>&1
  tail -n +2 "$out/$suite.md" | grep -v "^|---" 
done
