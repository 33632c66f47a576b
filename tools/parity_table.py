"""The parity table of issue #30: each CUDA kernel exercise's seeded-bug corpus graded on the CPU (here)
and on a GPU (tools/gpu_exercises.py's JSON), side by side.

Usage: python tools/parity_table.py GPU_JSON [--cpu CPU_JSON] [--markdown OUT.md]
(without --cpu the corpus is graded on this machine's CPU now, and saved beside GPU_JSON as *_cpu.json)
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("gpu")
    parser.add_argument("--cpu")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    gpu = json.loads(Path(args.gpu).read_text())
    if args.cpu:
        cpu_rows = json.loads(Path(args.cpu).read_text())["parity"]
    else:
        from labops.exercises import cuda_corpus

        cpu_rows = [r._asdict() for r in cuda_corpus.grade_corpus(device="cpu")]
        Path(args.gpu).with_name(Path(args.gpu).stem + "_cpu.json").write_text(json.dumps({"parity": cpu_rows}, indent=1))
    on_gpu = {r["variant"]: r for r in gpu["parity"]}
    table = defaultdict(lambda: defaultdict(int))
    disagreements = []
    for c in cpu_rows:
        g = on_gpu.get(c["variant"])
        t = table[c["exercise"]]
        t["variants"] += 1
        if g is None:
            disagreements.append((c["variant"], "not graded on the GPU", c, None))
            continue
        is_reference = c["planted"] is None
        t["same verdict"] += c["passed"] == g["passed"]
        t["same mistake"] += c["named"] == g["named"]
        t["cpu named planted"] += c["named"] == c["planted"] and (is_reference or not c["passed"])
        t["gpu named planted"] += g["named"] == g["planted"] and (is_reference or not g["passed"])
        t["bug passed on cpu"] += (not is_reference) and c["passed"]
        t["bug passed on gpu"] += (not is_reference) and g["passed"]
        if c["passed"] != g["passed"] or c["named"] != g["named"]:
            disagreements.append((c["variant"], "cpu/gpu differ", c, g))
    columns = ["variants", "same verdict", "same mistake", "cpu named planted", "gpu named planted",
               "bug passed on cpu", "bug passed on gpu"]
    lines = [f"Graded on the CPU (this machine) and on {gpu['device']} (torch {gpu['torch']}, commit {gpu['commit']}); "
             f"each count includes the reference solution.", "",
             "| exercise | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    total = defaultdict(int)
    for exercise, t in table.items():
        lines.append(f"| {exercise} | " + " | ".join(str(t[c]) for c in columns) + " |")
        for c in columns:
            total[c] += t[c]
    lines.append("| **all** | " + " | ".join(f"**{total[c]}**" for c in columns) + " |")
    agree = total["same verdict"] / max(total["variants"], 1)
    named = total["same mistake"] / max(total["variants"], 1)
    lines += ["", f"CPU verdict = GPU verdict: {100 * agree:.1f} %; same named mistake: {100 * named:.1f} %."]
    for variant, why, c, g in disagreements:
        lines.append(f"- {variant}: {why}: cpu passed={c['passed']} named={c['named']}"
                     + ("" if g is None else f"; gpu passed={g['passed']} named={g['named']}")
                     + f" (planted {c['planted']})")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")


if __name__ == "__main__":
    main()
