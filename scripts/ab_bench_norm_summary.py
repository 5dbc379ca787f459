#!/usr/bin/env python3
"""The table of scripts/ab-bench-norm.sh: per (dtype, hidden, variant), the range over the runs
of BW/copy and of the median time (ms), old against new, read from OUTDIR/run-K-{old,new}.json
(foldnorm bench-norm --json). Usage: ab_bench_norm_summary.py OUTDIR"""
import glob
import json
import os
import sys

VARIANTS = ["foldnorm::rms_norm", "foldnorm::layer_norm", "foldnorm::add_rms_norm", "aten::add+foldnorm::rms_norm", "copy"]


def collect(outdir, side):
    """{(dtype, rows, hidden, variant): [(bw_vs_copy, median_ms), ...]} over the side's runs."""
    found = {}
    paths = sorted(glob.glob(os.path.join(outdir, f"run-*-{side}.json")))
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        for case in report["cases"]:
            for v in case["variants"]:
                if v["name"] in VARIANTS:
                    key = (case["dtype"], case["rows"], case["hidden"], v["name"])
                    found.setdefault(key, []).append((v["bandwidth_vs_copy"], v["median_ms"]))
    return found, len(paths)


def span(values, fmt):
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: ab_bench_norm_summary.py OUTDIR (a folder of run-K-old.json / run-K-new.json)")
    old, oldRuns = collect(sys.argv[1], "old")
    new, newRuns = collect(sys.argv[1], "new")
    if not old or not new:
        sys.exit(f"ab_bench_norm_summary: no complete old and new runs in {sys.argv[1]}")
    print(f"{oldRuns} old and {newRuns} new runs; ranges over the runs (min-max of each run's median)")
    header = f"{'dtype':9} {'hidden':>6} {'variant':29} {'BW/copy old':>12} {'BW/copy new':>12} {'ms old':>14} {'ms new':>14}"
    print(header)
    print("-" * len(header))
    order = {name: i for i, name in enumerate(VARIANTS)}
    for key in sorted(old, key=lambda k: (k[0], k[1], k[2], order[k[3]])):
        if key not in new:
            continue
        dtype, rows, hidden, variant = key
        o, n = old[key], new[key]
        print(f"{dtype:9} {hidden:>6} {variant:29} {span([b for b, _ in o], '{:.2f}'):>12} "
              f"{span([b for b, _ in n], '{:.2f}'):>12} {span([t for _, t in o], '{:.3f}'):>14} "
              f"{span([t for _, t in n], '{:.3f}'):>14}")


if __name__ == "__main__":
    main()
