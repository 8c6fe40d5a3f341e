#!/usr/bin/env python3
"""Condenses a `flint grid` summary CSV of the Blind FL grid into one table per activation:
rows = before federation, local baseline, blind/blended x aggregation; columns = partitions;
cells = mean accuracy / mean precision over the seeds (clients averaged, as the paper does).

usage: scripts/fcm-pivot.py runs/grid-summary.csv
"""
import csv
import sys
from collections import defaultdict
from statistics import mean

PARTS = ["even", "uneven", "sharp1", "sharp2"]
rows = list(csv.DictReader(open(sys.argv[1])))
cells = defaultdict(list)
central = defaultdict(list)
for r in rows:
    name = r["experiment"]
    parts = name.split("-")
    if r["strategy"] == "central":
        central[parts[-1]].append((float(r["accuracy_after"]), float(r["precision_after"])))
        continue
    part, act = parts[-1], parts[-2]
    acc_b, prec_b = float(r["accuracy_before"]), float(r["precision_before"])
    acc_a, prec_a = float(r["accuracy_after"]), float(r["precision_after"])
    if r["strategy"] == "local":
        cells[(act, "before federation (round-1 local maps)", part)].append((acc_b, prec_b))
        cells[(act, "local, 20 rounds alone", part)].append((acc_a, prec_a))
    else:
        fed, agg = parts[-4], parts[-3]
        cells[(act, f"{fed}, {agg}", part)].append((acc_a, prec_a))


def cell(v):
    return f"{mean(a for a, _ in v):.4f} / {mean(p for _, p in v):.4f}" if v else "-"


for act in ["tanh", "sigmoid"]:
    c = central.get(act, [])
    print(f"\n{act} — central (one map, all data): accuracy / precision {cell(c)} ({len(c)} runs)\n")
    print("| | " + " | ".join(PARTS) + " |")
    print("|---|" + "---|" * len(PARTS))
    labels = ["before federation (round-1 local maps)", "local, 20 rounds alone"] + [
        f"{f}, {a}" for f in ["blind", "blended"] for a in ["mean", "accuracy", "precision"]]
    for label in labels:
        print(f"| {label} | " + " | ".join(cell(cells[(act, label, p)]) for p in PARTS) + " |")
