#!/usr/bin/env python3
"""Prints the table of scripts/secagg-bytes.sh's runs: per asked client and round (rounds 1..R),
the mean bytes up and down at payload, message and socket, the mean round time and the mean
time the server took to unmask and aggregate, beside the plain run of the same size."""
import json
import sys
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/secagg")


def row(results):
    rounds = [r for r in results["rounds"] if r["round"] > 0]
    # The clients each round asked (under sampling the others only check in).
    cells = [(c, r["bytes"][str(c)]) for r in rounds for c in r["selected"] if str(c) in r["bytes"]]
    mean = lambda d, level: sum(b[d][level] for _, b in cells) / len(cells)
    seconds = sum(r["seconds"] or 0 for r in rounds) / len(rounds)
    agg = sum(r["aggregation_seconds"] or 0 for r in rounds) / len(rounds)
    acc = results["rounds"][-1]["mean"]["accuracy"]
    kept = sum(len(r["participants"]) for r in rounds) / len(rounds)
    return {"up": [mean("up", l) for l in ("payload", "message", "socket")],
            "down": [mean("down", l) for l in ("payload", "message", "socket")],
            "seconds": seconds, "agg": agg, "acc": acc, "summed": kept}


def load(n, kind):
    p = out / f"{n}-{kind}" / "fedavg-magic-secagg" / "results.json"
    return row(json.loads(p.read_text())) if p.exists() else None


print("| clients (asked) | run | up payload / message / socket (B) | × plain (socket) | down payload / message / socket (B) | summed per round | round (s) | unmask + aggregate (s) | accuracy |")
print("|---|---|---|---|---|---|---|---|---|")
for n in ("10", "100", "1000", "1000-all"):
    plain = load(n, "plain")
    for kind in ("plain", "secure", "dropping"):
        r = load(n, kind)
        if r is None:
            continue
        ratio = r["up"][2] / plain["up"][2] if plain else float("nan")
        asked = {"1000": "1000 (100)", "1000-all": "1000 (SecAgg+, 40 neighbours)"}.get(n, n)
        fmt = lambda v: " / ".join(f"{x:,.0f}" for x in v)
        print(f"| {asked} | {kind} | {fmt(r['up'])} | {ratio:.2f} | {fmt(r['down'])} | {r['summed']:.1f} | {r['seconds']:.3f} | {r['agg']:.4f} | {r['acc']:.4f} |")
