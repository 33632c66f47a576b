#!/usr/bin/env bash
# GPU machine: benchmark this checkout against an older one (its labops/ and csrc/ copied to
# $BEFORE, default .before/) in one run, suite by suite, alternating, then print the comparison.
# The "after" side is the full `labops bench` table (peers included), written to
# $out/after/<suite>.json in the format docs/benchmarks/ keeps.
# Make the old copy with: git archive <rev> labops csrc pyproject.toml | tar -x -C .before
# and pass it to the device machine with carry: [".before"] (it is git-ignored).
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0
cache=${LABOPS_CACHE_DIR:-/tmp/labops-cache}
before=$(realpath "${BEFORE:-.before}")
out=${OUT:-/tmp/out}; mkdir -p "$out/before" "$out/after"
(cd "$before" && LABOPS_CACHE_DIR=$cache-before python3 -m labops build 2>&1 | tail -1) &
LABOPS_CACHE_DIR=$cache python3 -m labops build 2>&1 | tail -1
wait
for suite in ${1:-$(python3 -c "from labops.bench import SUITES; print(*SUITES)")}; do  # every layer's suite
  LABOPS_CACHE_DIR=$cache-before PYTHONPATH="$before" timeout "${SUITE_TIMEOUT:-150}" \
    python3 tools/bench_before_after.py rows --suite "$suite" --json "$out/before/$suite.json"
  LABOPS_CACHE_DIR=$cache PYTHONPATH="$PWD" timeout "${SUITE_TIMEOUT:-150}" \
    python3 -m labops bench --device cuda --suite "$suite" --json "$out/after/$suite.json" 2>&1 | grep -v "^|---"
  echo "[$SECONDS s] $suite done"
done
python3 tools/bench_before_after.py compare "$out/before" "$out/after" | tee "$out/compare.md"
