#!/usr/bin/env bash
# GPU machine: Nsight Compute over chosen benchmark cases (see gpu_profile.py).
# Each line of the cases file is "suite|op|shape|dtype"; one ncu report per
# suite lands in $OUT/ncu_<suite>.txt (the tool returns at most 8 files); tools/ncu_summary.py
# prints one line per kernel from it.
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 LABOPS_CACHE_DIR=/tmp/labops-cache
out=${OUT:-/tmp/out}; mkdir -p "$out"
cases=${1:?cases file}
python3 -m labops build 2>&1 | tail -1
for suite in $(cut -d'|' -f1 "$cases" | sort -u); do
  args=()
  while IFS='|' read -r s op shape dtype; do
    [ "$s" = "$suite" ] && args+=("$op" "$shape" "$dtype")
  done < "$cases"
  ncu --clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
      python3 tools/gpu_profile.py "$suite" "${args[@]}" > "$out/ncu_$suite.txt" 2>&1
  echo "$suite: rc $?, $(grep -c '==PROF== Profiling' "$out/ncu_$suite.txt") kernels"
done
