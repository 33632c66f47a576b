#!/usr/bin/env bash
# GPU machine: the CUDA exercises' corpus graded on the GPU, one process per exercise (NVRTC compiles
# every variant, on the CPU cores), then the references' speed. Writes $OUT/parity_*.json, $OUT/speed.json.
set -uo pipefail
export PYTHONUNBUFFERED=1 LABOPS_CACHE_DIR=/tmp/labops-cache PYTHONPATH=$PWD
out=${OUT:-/tmp/out}; mkdir -p "$out"
for e in $(python3 -c "from labops.exercises import cuda; print(' '.join(cuda.SOLUTIONS))"); do
  timeout "${PARITY_TIMEOUT:-300}" python3 .ci/gpu_exercises.py --skip-speed --exercises "$e" --out "$out/parity_$e.json" \
    > "$out/parity_$e.log" 2>&1 &
done
wait
tail -n 3 "$out"/parity_*.log
python3 - "$out" <<'PY'
import glob, json, sys
rows, first = [], None
for path in sorted(glob.glob(f"{sys.argv[1]}/parity_*.json")):
    d = json.load(open(path)); first = first or d; rows += d["parity"]
if first:
    first["parity"] = rows
    json.dump(first, open(f"{sys.argv[1]}/parity_gpu.json", "w"), indent=1)
    print(f"{len(rows)} variants graded on the GPU")
PY
[ "${SKIP_SPEED:-0}" = 1 ] || timeout "${SPEED_TIMEOUT:-240}" python3 .ci/gpu_exercises.py --skip-parity --out "$out/speed.json" 2>&1 | tail -15
