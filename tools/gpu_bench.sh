#!/usr/bin/env bash
# GPU machine, call 2: every benchmark suite; one JSON each under $OUT (the
# tool returns at most 8 files), the tables on stdout.
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 LABOPS_CACHE_DIR=/tmp/labops-cache
out=${OUT:-/tmp/out}; mkdir -p "$out"
python3 -m labops build 2>&1 | tail -1
for suite in ${1:-$(python3 -c "from labops.bench import SUITES; print(*SUITES)")}; do  # every layer's suite
  python3 -m labops bench --device cuda --suite "$suite" --json "$out/$suite.json" 2>&1 | grep -v "^|---"
done
