#!/usr/bin/env python3
"""Placement policies against best-fit on many small-cluster traces (issue #11).

Generates traces with tests/fixtures/small-cluster/gen.py (seeds SEED0 to
SEED1-1, five shapes: 4 nodes mixed and multi at load 1.3, 8 nodes mixed
and multi at 1.3, 4 nodes mixed at 1.0), runs `compass simulate` with
best-fit and with each POLICY under the chosen queue, and prints a
Markdown table of the AJCT change against best-fit per shape and overall:
mean, median, worst, and how many traces are more than 1% slower; then,
per policy, the standard deviation of the change over all traces and how
many traces are slower than best-fit at all.

Usage:
    contrib/small-cluster-ensemble.py [--bin target/release/compass]
        [--queue backfill|fifo] [--seeds 101:141] [--out DIR]
        POLICY[:EXTRA ARGS] ...

Each POLICY is a `--policy` value, optionally followed by a colon and
extra `simulate` arguments (`compass:--move-when pays`). Traces are kept
in DIR (default: a temporary directory removed at the end). Progress goes
to stderr, the table to stdout.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "..", "tests", "fixtures", "small-cluster", "gen.py")
# (nodes, jobs, load, mix), as the committed fixtures and the 1.0 row
SHAPES = [
    (4, 300, "1.3", "mixed"),
    (4, 300, "1.3", "multi"),
    (8, 400, "1.3", "mixed"),
    (8, 400, "1.3", "multi"),
    (4, 300, "1.0", "mixed"),
]


def seeds(text):
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST:END (101:141), got {text!r}")
    if not 0 <= a < b:
        raise argparse.ArgumentTypeError(f"expected 0 <= FIRST < END, got {text!r}")
    return range(a, b)


def simulate(binary, trace, nodes, queue, policy, extra):
    cmd = [binary, "simulate", "--trace", trace, "--nodes", str(nodes), "--queue", queue,
           "--policy", policy, "--json", "-q", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {shlex.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)["ajct_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/release/compass")
    ap.add_argument("--queue", default="backfill", choices=["backfill", "fifo"])
    ap.add_argument("--seeds", type=seeds, default=range(101, 141))
    ap.add_argument("--out")
    ap.add_argument("policies", nargs="+", metavar="POLICY[:EXTRA ARGS]")
    args = ap.parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin}: not an executable (build it: cargo build --release -p compass)")
    tmp = None if args.out else tempfile.TemporaryDirectory()
    out = args.out or tmp.name
    os.makedirs(out, exist_ok=True)
    runs = [(p.split(":", 1)[0], shlex.split(p.split(":", 1)[1]) if ":" in p else []) for p in args.policies]

    def one(item):
        (nodes, jobs, load, mix), seed = item
        trace = os.path.join(out, f"n{nodes}-{mix}-{load}-s{seed}.csv")
        if not os.path.exists(trace):
            text = subprocess.run([sys.executable, GEN, str(seed), str(nodes), str(jobs), load, mix],
                                  capture_output=True, text=True, check=True).stdout
            with open(trace, "w") as f:
                f.write(text)
        base = simulate(args.bin, trace, nodes, args.queue, "best-fit", [])
        return [100.0 * (simulate(args.bin, trace, nodes, args.queue, p, e) / base - 1.0) for p, e in runs]

    items = [(s, seed) for s in SHAPES for seed in args.seeds]
    results = []
    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        for k, r in enumerate(pool.map(one, items), 1):
            results.append(r)
            if k % 20 == 0 or k == len(items):
                print(f"{k}/{len(items)} traces", file=sys.stderr)

    def cell(d):
        return (f"{statistics.mean(d):+.2f}% / {statistics.median(d):+.2f}% / {max(d):+.2f}% / "
                f"{sum(x > 1.0 for x in d)} of {len(d)}")

    print(f"AJCT against best-fit, {args.queue}, seeds {args.seeds.start}-{args.seeds.stop - 1}: "
          "mean / median / worst / traces more than 1% slower")
    print()
    print("| shape (nodes, jobs, load, mix) | " + " | ".join(p for p in args.policies) + " |")
    print("|---|" + "---:|" * len(runs))
    for s in SHAPES:
        rows = [r for (shape, _), r in zip(items, results) if shape == s]
        print(f"| {s[0]} nodes, {s[1]} jobs, {s[2]}, {s[3]} | "
              + " | ".join(cell([r[i] for r in rows]) for i in range(len(runs))) + " |")
    print("| all | " + " | ".join(cell([r[i] for r in results]) for i in range(len(runs))) + " |")
    # How far chance reaches: the spread of the per-trace change over all
    # traces, and the traces slower than best-fit at all.
    print()
    for i, p in enumerate(args.policies):
        d = [r[i] for r in results]
        sd = statistics.stdev(d) if len(d) > 1 else 0.0
        print(f"- {p}: standard deviation {sd:.2f} points; slower than best-fit on "
              f"{sum(x > 0.0 for x in d)} of {len(d)}")


if __name__ == "__main__":
    main()
