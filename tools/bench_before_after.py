"""Kernel time of two checkouts of labops on one GPU, in one run: did a change regress?

Usage (on the GPU machine, from the repository root; tools/gpu_before_after.sh runs all three):
    python3 tools/bench_before_after.py rows --suite depthwise --json after/depthwise.json   # this checkout
    PYTHONPATH=OLD python3 tools/bench_before_after.py rows --suite depthwise --json before/depthwise.json
    python3 tools/bench_before_after.py compare before/ after/

`rows` times every case of a benchmark suite as the `labops bench` table does (eager burst and
CUDA-graph replay, labops and native), without the peers, and writes the rows. Running the two
checkouts alternately, suite by suite, on the same machine is what makes their times comparable.
The "after" side may also be a `labops bench --json` file (same row keys, peers ignored), and
rows are matched by (op, shape, dtype, k-th such row), so cases added since the older checkout are left out.
`--device cpu` times eager calls only. `compare` prints, per case, native/labops before and after (graph replay: GPU time only, where the
case can be captured) and labops' after/before time.
"""

import argparse
import importlib
import json
import statistics
from pathlib import Path


def rows(suite, json_path, device):
    import torch

    import labops
    from labops import bench

    module = importlib.import_module(f"labops.bench.{suite}")
    cuda = device == "cuda"
    out = []
    for case in module.cases(device, None):
        out.append({
            "op": case.op, "shape": case.shape, "dtype": str(case.dtype).replace("torch.", ""),
            "labops_ms": bench.time_ms(case.labops, device), "native_ms": bench.time_ms(case.native, device),
            "labops_graph_ms": bench.graph_ms(case.labops) if cuda else None,
            "native_graph_ms": bench.graph_ms(case.native) if cuda else None,
        })
        if cuda:
            torch.cuda.empty_cache()
    Path(json_path).write_text(json.dumps({"labops": labops.__file__, "rows": out}, indent=1))
    print(f"{suite}: {len(out)} rows from {labops.__file__}", flush=True)


def _by_case(rows):
    """Rows keyed by (op, shape, dtype, k): the k-th row of that case (conv2d_mm times one
    case against two natives, F.unfold+matmul and cuDNN, in that order in both checkouts)."""
    keyed, seen = {}, {}
    for row in rows:
        case = (row["op"], row["shape"], row["dtype"])
        seen[case] = seen.get(case, -1) + 1
        keyed[(*case, seen[case])] = row
    return keyed


def compare(before_dir, after_dir):
    print("| op | shape | dtype | native/labops before | after | labops time after/before |")
    print("|---|---|---|---|---|---|")
    changes = []
    for before_file in sorted(Path(before_dir).glob("*.json")):
        after_file = Path(after_dir) / before_file.name
        if not after_file.is_file():
            continue
        after = _by_case(json.loads(after_file.read_text())["rows"])
        for case, b in _by_case(json.loads(before_file.read_text())["rows"]).items():
            a = after.get(case)
            if a is None:  # a case the older checkout timed and this one no longer does
                continue
            graph = bool(b["labops_graph_ms"] and a["labops_graph_ms"] and b["native_graph_ms"])
            lab, nat = ("labops_graph_ms", "native_graph_ms") if graph else ("labops_ms", "native_ms")
            change = a[lab] / b[lab]
            changes.append(change)
            print(f"| {b['op']} | {b['shape']} | {b['dtype']} | {b[nat] / b[lab]:.2f} | {a[nat] / a[lab]:.2f} | "
                  f"{change:.3f}{'' if graph else ' (eager)'} |")
    print(f"\n{len(changes)} rows; labops time after/before: median {statistics.median(changes):.3f}, "
          f"min {min(changes):.3f}, max {max(changes):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("rows")
    one.add_argument("--suite", required=True)
    one.add_argument("--json", required=True)
    one.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    both = sub.add_parser("compare")
    both.add_argument("before")
    both.add_argument("after")
    args = parser.parse_args()
    if args.cmd == "rows":
        rows(args.suite, args.json, args.device)
    else:
        compare(args.before, args.after)
