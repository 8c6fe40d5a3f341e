#!/usr/bin/env python3
"""Extracts a run's behaviour figures from its results.json: per round, the participants, the
aggregation weights, every client's metrics and its payload and paper bytes (server ledger), the
clients' own metrics in their updates, and TPFL's clusters.

tests/behaviour.rs compares a fresh run against the figures recorded here from an earlier commit,
so a refactoring that changes any model, metric or payload byte fails.

    python3 tests/oracles/behaviour-figures.py runs/quickstart/results.json > tests/behaviour/quickstart.json
"""
import json
import sys


def figures(r):
    rounds = []
    for rr in r["rounds"]:
        flows = {c: per[str(rr["round"])] for c, per in r["ledger"]["flows"].items() if str(rr["round"]) in per}
        # This version's typed report (a strategy without details names itself), or an older
        # file's untyped details.
        report = rr.get("report")
        tpfl = (report.get("tpfl") if isinstance(report, dict) else None) or rr.get("details") or {}
        rounds.append({
            "round": rr["round"],
            "participants": rr["participants"],
            "weights": rr["weights"],
            "metrics": rr["metrics"],
            "local": rr.get("local", {}),
            "payload": {
                c: [f["up"]["payload"], f["down"]["payload"], f["up"]["paper"], f["down"]["paper"]]
                for c, f in flows.items()
            },
            "clusters": tpfl.get("clusters") if isinstance(tpfl, dict) else None,
        })
    return {"name": r["name"], "strategy": r["strategy"], "rounds": rounds}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(figures(json.load(f)), indent=1, sort_keys=True))
