#!/usr/bin/env bash
# How long autograding a class takes: one complete submission (the solutions of every assignment)
# alone, then N of them with nbgrader's own command, P at a time (README: "A class of 300").
#   bash tools/time_autograde.sh N P
set -euo pipefail
n=${1:-8}; p=${2:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
course=$(mktemp -d)/course
mkdir -p "$course"
cp -r "$here/notebooks/exercises/source" "$here/notebooks/exercises/nbgrader_config.py" "$course/"
cd "$course"
nbgrader=${NBGRADER:-nbgrader}
$nbgrader generate_assignment '*' --force --log-level=ERROR >/dev/null 2>&1
for i in $(seq 0 "$n"); do
    for a in source/*/; do a=$(basename "$a"); mkdir -p "submitted/s$i/$a"; cp "source/$a/$a.ipynb" "submitted/s$i/$a/"; done
done
echo "cores: $(nproc); bubblewrap: $(command -v bwrap || echo none)"
t0=$(date +%s.%N)
$nbgrader autograde '*' --student=s0 --log-level=ERROR >/dev/null 2>&1
t1=$(date +%s.%N)
echo "one complete submission alone: $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
t0=$(date +%s.%N)
seq 1 "$n" | sed 's/^/s/' | xargs -P "$p" -I{} $nbgrader autograde '*' --student={} --log-level=ERROR >/dev/null 2>&1
t1=$(date +%s.%N)
python3 -c "t = $t1 - $t0; print(f'{$n} complete submissions, {$p} at a time: {t:.1f} s, {t / $n:.1f} s each; 300 would take {300 * t / $n / 3600:.2f} h')"
$nbgrader export --log-level=ERROR >/dev/null 2>&1
python3 - <<'PY'
import csv, collections
total = collections.Counter()
for row in csv.DictReader(open("grades.csv")):
    total[row["student_id"]] += float(row["score"])
print("scores:", sorted(set(total.values())), "over", len(total), "students")
PY
