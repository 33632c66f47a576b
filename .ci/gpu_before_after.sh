#!/usr/bin/env bash
# GPU machine: benchmark this checkout against an older one (its labops/ and csrc/ copied to
# $BEFORE, default .before/) in one run, suite by suite, alternating, then print the comparison.
# Make the old copy with: git archive <rev> labops csrc pyproject.toml | tar -x -C .before
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 LABOPS_CACHE_DIR=/tmp/labops-cache
before=$(realpath "${BEFORE:-.before}")
out=${OUT:-/tmp/out}; mkdir -p "$out/before" "$out/after"
(cd "$before" && python3 -m labops build 2>&1 | tail -1) &
python3 -m labops build 2>&1 | tail -1
wait
for suite in ${1:-activation upsample depthwise conv2d_mm pooling reorg softmax}; do
  PYTHONPATH="$before" python3 .ci/bench_before_after.py rows --suite "$suite" --json "$out/before/$suite.json"
  PYTHONPATH="$PWD" python3 .ci/bench_before_after.py rows --suite "$suite" --json "$out/after/$suite.json"
done
python3 .ci/bench_before_after.py compare "$out/before" "$out/after" | tee "$out/compare.md"
