#!/usr/bin/env python3
"""The privacy curve's table (scripts/privacy-curve.sh): per setting, the last round's mean
client accuracy over the seeds (mean ± sample sd), ε at δ, the server's aggregation time per
round, and how many runs' last round was warned to sit near or below the majority class.

    python3 scripts/privacy-table.py runs/privacy
"""
import glob
import json
import os
import statistics
import sys


def runs(folder):
    for path in sorted(glob.glob(os.path.join(folder, "*", "results.json"))):
        with open(path) as f:
            yield json.load(f)


def row(name, results):
    acc = [r["rounds"][-1]["mean"]["accuracy"] for r in results]
    privacy = results[0]["rounds"][-1].get("privacy")
    agg = [x.get("aggregation_seconds") or 0 for r in results for x in r["rounds"][1:]]
    last = [r["rounds"][-1]["round"] for r in results]
    warned = sum(
        any(w["round"] == n and w["kind"] in ("below-majority", "near-chance", "one-class") for w in r.get("warnings", []))
        for r, n in zip(results, last)
    )
    sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
    eps = f"{privacy['epsilon']:.2f}" if privacy else "∞"
    return (
        f"| {name} | {len(acc)} | {100 * statistics.mean(acc):.2f} ± {100 * sd:.2f} | {eps} "
        f"| {1000 * statistics.mean(agg):.2f} | {warned} of {len(acc)} |"
    )


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "runs/privacy"
    print("| setting | seeds | accuracy % (mean ± sd) | ε at δ = 1e-5 | aggregation ms | last round warned near or below the majority |")
    print("|---|---|---|---|---|---|")
    folders = sorted(
        (d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))),
        key=lambda d: (d != "plain", d.split("-")[0], float(d.split("-")[-1]) if "-" in d else 0),
    )
    for d in folders:
        results = list(runs(os.path.join(root, d)))
        if results:
            print(row(d, results))


if __name__ == "__main__":
    main()
