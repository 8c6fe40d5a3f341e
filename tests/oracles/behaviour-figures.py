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


def with_closing(flow, closing):
    """A round's flow with a client's closing (its last report) added, as the last round held
    it before closings were booked apart."""
    if closing is None:
        return flow
    return {d: {k: flow[d][k] + closing[d][k] for k in ("payload", "paper")} for d in ("up", "down")}


def figures(r):
    rounds = []
    last = r["rounds"][-1]["round"] if r["rounds"] else 0
    closings = r["ledger"].get("closing", {})
    for rr in r["rounds"]:
        flows = {c: per[str(rr["round"])] for c, per in r["ledger"]["flows"].items() if str(rr["round"]) in per}
        if rr["round"] == last:
            flows = {c: with_closing(f, closings.get(c)) for c, f in flows.items()}
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
