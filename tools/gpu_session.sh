#!/usr/bin/env bash
# GPU machine, one call that verifies and measures a change (what a 30-minute device budget affords):
# builds this checkout and the older one in $BEFORE (default .before/, pass it with carry: [".before"])
# in parallel, runs the tests, times host time per eager call, then benchmarks the suites before and
# after, alternating (tools/gpu_before_after.sh). Everything lands in one tarball, $OUT/session.tgz
# (the device tool returns few files): pytest.log, host_time_cuda.json, before/, after/ (labops bench
# tables with peers, ready for docs/benchmarks/) and compare.md.
# With LADDERS="pooling depthwise", it also times each named layer's ladder (labops bench --ladder) into
# ladder/cuda_<layer>.json, after the tests and before the host time.
# Usage: TESTS="tests/test_depthwise.py" SUITES="depthwise pooling" bash tools/gpu_session.sh
# Make the old copy with: git archive <rev> labops csrc pyproject.toml | tar -x -C .before
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 MPLBACKEND=Agg LABOPS_CACHE_DIR=${LABOPS_CACHE_DIR:-/tmp/labops-cache}
res=$(mktemp -d); out=${OUT:-/tmp/out}; mkdir -p "$out"
budget=${BUDGET_S:-560}  # stop starting suites after this many seconds (the tests count too)
step() { echo "[$SECONDS s] $*"; }
if [ -d "${BEFORE:-.before}" ]; then
  (cd "${BEFORE:-.before}" && LABOPS_CACHE_DIR=$LABOPS_CACHE_DIR-before python3 -m labops build 2>&1 | tail -1) &
fi
python3 -m labops build 2>&1 | tail -1
wait; step built
# The whole tests/ folder outgrew 190 s with 14 workers on the H100 host (session 11: 1147 of about 1220 done).
timeout "${TEST_TIMEOUT:-420}" python3 -X faulthandler -m pytest -o addopts="" -q -rfE -p no:cacheprovider \
  -n "${WORKERS:-12}" ${TESTS:-tests} > "$res/pytest.log" 2>&1
echo "pytest rc $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$res/pytest.log" | tail -15; step tested
if [ -n "${LADDERS:-}" ]; then
  mkdir -p "$res/ladder"
  for layer in $LADDERS; do
    timeout 200 python3 -m labops bench --ladder "$layer" --device cuda --json "$res/ladder/cuda_$layer.json" \
      > "$res/ladder/cuda_$layer.log" 2>&1 || echo "ladder $layer failed: $(tail -3 "$res/ladder/cuda_$layer.log")"
  done
  step ladders
fi
if [ -z "${NO_HOST_TIME:-}" ]; then
  PYTHONPATH=$PWD timeout 150 python3 tools/host_time.py --device cuda --calls 500 --repeats 5 \
    --json "$res/host_time_cuda.json" > "$res/host_time.log" 2>&1
  grep -v Warn "$res/host_time.log" | tail -40; step host_time
fi
if [ -n "${SUITES:-}" ] && [ -d "${BEFORE:-.before}" ]; then
  OUT=$res timeout $((budget - SECONDS)) bash tools/gpu_before_after.sh "$SUITES" > "$res/before_after.log" 2>&1
  grep -v "^|---" "$res/before_after.log" | grep -E "^\| |rows;" | grep -v "^| op" | tail -60; step benchmarked
fi
tar -czf "$out/session.tgz" -C "$res" .
step done
