#!/usr/bin/env bash
# GPU machine: every variant of the CUDA exercises' corpus graded on the GPU, each in a process of its own
# with a time limit (a kernel that hangs the GPU costs that process, and is recorded as a hang), 12 at a
# time (NVRTC compiles on the host's cores); then the Triton corpus compiled on the GPU; then the references'
# speed, the Triton ones' included.
# Writes $OUT/parity_gpu.json, $OUT/parity_triton_gpu.json, $OUT/speed.json and $OUT/exercises.log.
set -uo pipefail
# One torch thread per worker: a dozen workers each spinning 16 OpenMP threads over the float64 oracles
# made some variants take minutes (seen 2026-11-26: 11 "hangs" that took 1 s each with 2 threads).
export PYTHONUNBUFFERED=1 LABOPS_CACHE_DIR=/tmp/labops-cache PYTHONPATH=$PWD OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
out=${OUT:-/tmp/out}; mkdir -p "$out"
work=$(mktemp -d)
python3 -c "from labops.exercises import cuda_corpus; print('\n'.join(v.id for v in cuda_corpus.CORPUS))" \
  | grep -E "${ONLY:-.}" > "$work/ids"
export VARIANT_TIMEOUT=${VARIANT_TIMEOUT:-90}
start=$(date +%s)
xargs -P "${JOBS:-12}" -I{} sh -c 'timeout "${VARIANT_TIMEOUT:-90}" python3 tools/gpu_exercises.py --out /dev/null --variant "$1" > "$2/$(echo "$1" | tr / _).out" 2>&1; echo "rc $?" >> "$2/$(echo "$1" | tr / _).out"' _ {} "$work" < "$work/ids"
echo "corpus graded on the GPU in $(( $(date +%s) - start )) s"
python3 - "$work" "$out" <<'PY'
import glob, json, subprocess, sys
import torch
work, out = sys.argv[1:]
from labops.exercises import cuda_corpus
by_id = {v.id: v for v in cuda_corpus.CORPUS}
rows = []
for path in sorted(glob.glob(f"{work}/*.out")):
    text = open(path).read()
    line = next((l for l in text.splitlines() if l.startswith("ROW ")), None)
    if line:
        rows.append(json.loads(line[4:]))
        continue
    vid = path.split("/")[-1][:-4]
    v = next(v for k, v in by_id.items() if k.replace("/", "_") == vid)
    rc = text.strip().splitlines()[-1] if text.strip() else "?"
    rows.append({"variant": v.id, "exercise": v.exercise, "planted": v.planted, "passed": False,
                 "named": "hang" if rc == "rc 124" else f"crash ({rc})", "tail": text[-600:]})
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": commit, "parity": rows},
          open(f"{out}/parity_gpu.json", "w"), indent=1)
wrong = [r for r in rows if r["named"] != r["planted"]]
print(f"{len(rows)} variants; {len(wrong)} named another mistake than the planted one:")
for r in wrong:
    print("  ", {k: r[k] for k in ("variant", "planted", "passed", "named")}, r.get("tail", "")[-1200:])
PY
cat "$work"/*.out > "$out/exercises.log"
# The Triton corpus compiled on the GPU (one process: Triton compiles each kernel once, in seconds).
timeout "${TRITON_TIMEOUT:-600}" python3 tools/gpu_exercises.py --skip-parity --skip-speed --triton-parity \
  --out "$out/parity_triton_gpu.json" 2>&1 | tail -25
[ "${SKIP_SPEED:-0}" = 1 ] || timeout "${SPEED_TIMEOUT:-240}" python3 tools/gpu_exercises.py --skip-parity --out "$out/speed.json" 2>&1 | tail -15
