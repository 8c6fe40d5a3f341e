#!/usr/bin/env python3
"""Tables of FedTMOS runs for docs/results/fedtmos.md, from their results.json files.

usage: scripts/fedtmos-table.py RUNS_DIR...   (every results.json below them)

Per run: accuracy on the shared test set of the composite (eq. 3 and the code's per-batch clamp),
the ensemble (both readings), the clients' machines alone (mean), the composite on the clients'
own test rows; x, vectors / k; payload bytes up and down per client (the download's FedTMOS
part and its baselines part), the code's convention; server aggregation; local training time;
then mean ± std over seeds per experiment."""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def row(path):
    r = json.loads(path.read_text())
    rr = next((x for x in r["rounds"] if x["round"] == 1), None)
    if rr is None:
        # A run stopped before its round closed: nothing to tabulate.
        print(f"skipping {path}: round 1 never closed", file=sys.stderr)
        return None
    b = rr.get("baselines", {})
    acc = lambda name: b[name]["accuracy"] * 100 if name in b else float("nan")
    alone = [v["accuracy"] * 100 for k, v in b.items() if k.startswith("client-")]
    rep = rr["report"]["fedtmos"]
    n = len(rr["bytes"])
    up = sum(f["up"]["payload"] for f in rr["bytes"].values()) / n
    paper_up = sum(f["up"]["paper"] for f in rr["bytes"].values()) / n
    train = [s for per in r.get("client_train_seconds", {}).values() for s in per.values()]
    return {
        "name": r["name"],
        "seed": r["seed"],
        "clients": n,
        "eq3": rr["global_test"]["accuracy"] * 100,
        "code": acc("composite:per-batch+clamp"),
        "ens": acc("ensemble"),
        "ens_code": acc("ensemble:per-batch+clamp"),
        "alone": statistics.mean(alone) if alone else float("nan"),
        "local": rr["mean"]["accuracy"] * 100,
        "x": rep["scale"],
        "vk": f'{rep["vectors"]} / {rep["clusters"]}',
        "up": up / 1e3,
        "paper_up": paper_up / 1e3,
        "down_fedtmos": rep.get("composite_bytes", 0) / 1e3,
        "down_ens": rep.get("ensemble_bytes", 0) / 1e3,
        "agg_ms": (rr.get("aggregation_seconds") or float("nan")) * 1e3,
        "train_mean": statistics.mean(train) if train else float("nan"),
        "train_max": max(train) if train else float("nan"),
        "wall": r["wall_seconds"],
    }


rows = [row(p) for d in sys.argv[1:] for p in sorted(Path(d).rglob("results.json"))]
rows = [r for r in rows if r is not None]
print("| run | seed | clients | FedTMOS eq. 3 | FedTMOS code | ensemble eq. 3 | ensemble code "
      "| clients alone | local rows | x | vectors / k | up kB | up kB (code conv.) "
      "| down kB FedTMOS + baselines | aggregation ms | training s mean / max | wall s |")
print("|" + "---|" * 17)
for r in rows:
    print(f'| {r["name"]} | {r["seed"]} | {r["clients"]} | {r["eq3"]:.2f} | {r["code"]:.2f} '
          f'| {r["ens"]:.2f} | {r["ens_code"]:.2f} | {r["alone"]:.2f} | {r["local"]:.2f} '
          f'| {r["x"]:.3f} | {r["vk"]} | {r["up"]:.1f} | {r["paper_up"]:.1f} '
          f'| {r["down_fedtmos"]:.1f} + {r["down_ens"]:.1f} | {r["agg_ms"]:.2f} '
          f'| {r["train_mean"]:.0f} / {r["train_max"]:.0f} | {r["wall"]:.0f} |')

groups = defaultdict(list)
for r in rows:
    groups[r["name"].rsplit("-s", 1)[0] if r["name"].rsplit("-s", 1)[-1].isdigit() else r["name"]].append(r)
print()
print("| experiment | seeds | FedTMOS eq. 3 | FedTMOS code | ensemble eq. 3 | ensemble code |")
print("|---|---|---|---|---|---|")
ms = lambda v: f"{statistics.mean(v):.2f} ± {statistics.stdev(v):.2f}" if len(v) > 1 else f"{v[0]:.2f}"
for name, rs in groups.items():
    print(f'| {name} | {",".join(str(r["seed"]) for r in rs)} | {ms([r["eq3"] for r in rs])} '
          f'| {ms([r["code"] for r in rs])} | {ms([r["ens"] for r in rs])} '
          f'| {ms([r["ens_code"] for r in rs])} |')
