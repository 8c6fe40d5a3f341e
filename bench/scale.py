#!/usr/bin/env python3
"""Scale runs: many synthetic clients in few or many processes, repeated.

Runs `flint run` on a FedAvg experiment over the built-in synthetic data for every
(clients, clients per process, repetition) asked for, and appends one row per run to a CSV:
whether it completed, its wall time, the mean round time (open to close), the mean aggregation
time, and the server's peak resident memory (results.json `server_peak_rss_kb`). Rows already
in the CSV are skipped, so an interrupted sweep goes on where it stopped (`--resume` is the
default; `--fresh` starts the CSV over).

    cargo build --release
    bench/scale.py --clients 1000 --per-process 1,10,100,1000 --repeat 10
    bench/scale.py --clients 100,1000,5000 --per-process 100 --repeat 3 --out scale-sizes.csv
    bench/scale.py --clients 10000 --per-round 100 --per-process 200 --rounds 5 --repeat 1

With --per-round K, each round asks K clients (`server.clients_per_round`) and the others check
in: told when to come back, they hold no connection meanwhile (docs/PROTOCOL.md §Checking in).

A run that does not finish within --timeout seconds is killed and recorded as not completed.
Besides the means, each row has the second and the last round's times (round 1 reports no
evaluations, so the second is the first full round) and the server's peak memory per client.
A CSV written before these columns existed is refused: start it over with --fresh.
"""

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

FIELDS = [
    "clients", "per_round", "per_process", "repetition", "completed", "wall_seconds",
    "round_seconds_mean", "aggregation_ms_mean", "server_peak_rss_mb", "rounds",
    "round_seconds_second", "round_seconds_last", "last_over_second", "server_kb_per_client",
]

EXPERIMENT = """name = "scale"
strategy = "fedavg"
seed = {seed}
rounds = {rounds}
client_count = {clients}

[server]
round_timeout_secs = 600
eval_timeout_secs = {eval_timeout}
{per_round}
[data]
source = "synthetic"
samples = {samples}
features = 4

[logreg]
local_epochs = 2
"""


def ints(text):
    return [int(x) for x in text.split(",") if x]


def done_rows(path):
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {(int(r["clients"]), int(r["per_round"]), int(r["per_process"]),
                 int(r["repetition"]))
                for r in csv.DictReader(f)}


def one_run(flint, clients, per_round, per_process, repetition, rounds, timeout):
    work = tempfile.mkdtemp(prefix="flint-scale-")
    try:
        exp = os.path.join(work, "scale.toml")
        with open(exp, "w") as f:
            # 20 rows per client, whatever the count; the seed moves with the repetition.
            asked = f"clients_per_round = {per_round}\n" if per_round else ""
            # Every client reports on the final model: at 100,000 that takes minutes.
            eval_timeout = max(120, clients // 200)
            f.write(EXPERIMENT.format(seed=repetition, rounds=rounds, clients=clients,
                                      samples=20 * clients, per_round=asked,
                                      eval_timeout=eval_timeout))
        runs = os.path.join(work, "runs")
        start = time.monotonic()
        try:
            proc = subprocess.run(
                [flint, "run", exp, "--clients-per-process", str(per_process),
                 "--runs-dir", runs],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
            ok = proc.returncode == 0
            if not ok:
                sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:])
        except subprocess.TimeoutExpired:
            ok = False
        wall = time.monotonic() - start
        row = {"clients": clients, "per_round": per_round, "per_process": per_process, "repetition": repetition,
               "completed": int(ok), "wall_seconds": f"{wall:.2f}", "rounds": rounds}
        results = os.path.join(runs, "scale", "results.json")
        if ok and os.path.exists(results):
            with open(results) as f:
                r = json.load(f)
            closed = [x for x in r["rounds"] if x["round"] > 0 and x.get("seconds") is not None]
            # Every client a round asked took part (all of them without --per-round).
            complete = all(len(x["participants"]) == (per_round or clients) for x in closed)
            row["completed"] = int(complete and len(closed) == rounds)
            if not closed:
                return row
            row["round_seconds_mean"] = f"{statistics.mean(x['seconds'] for x in closed):.3f}"
            row["aggregation_ms_mean"] = (
                f"{1000 * statistics.mean(x.get('aggregation_seconds') or 0 for x in closed):.2f}")
            rss = r.get("server_peak_rss_kb")
            row["server_peak_rss_mb"] = f"{rss / 1024:.1f}" if rss else ""
            row["server_kb_per_client"] = f"{rss / clients:.1f}" if rss else ""
            # Round 1 has no evaluations to report: the flatness is the last round's time
            # against the second's.
            if len(closed) >= 2:
                second, last = closed[1]["seconds"], closed[-1]["seconds"]
                row["round_seconds_second"] = f"{second:.3f}"
                row["round_seconds_last"] = f"{last:.3f}"
                # A round under the clock's resolution has no ratio.
                row["last_over_second"] = f"{last / second:.2f}" if second > 0 else ""
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", default="1000", help="client counts, comma-separated")
    p.add_argument("--per-process", default="1,10,100,1000",
                   help="clients per process, comma-separated")
    p.add_argument("--per-round", default="0",
                   help="clients each round asks (server.clients_per_round; 0: all), comma-separated")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", default="scale.csv")
    p.add_argument("--flint", default="target/release/flint")
    p.add_argument("--fresh", action="store_true", help="start the CSV over")
    a = p.parse_args()
    if not os.path.exists(a.flint):
        sys.exit(f"scale: {a.flint} not found; run cargo build --release first")
    if a.fresh and os.path.exists(a.out):
        os.remove(a.out)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    # An empty file (a run stopped before its first row) is started over.
    new = not os.path.exists(a.out) or os.path.getsize(a.out) == 0
    if not new:
        with open(a.out) as f:
            if next(csv.reader(f), []) != FIELDS:
                sys.exit(f"scale: {a.out} has other columns (an older scale.py); use --fresh")
    seen = set() if new else done_rows(a.out)
    with open(a.out, "w" if new else "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        runs = [(c, k, per) for c in ints(a.clients) for k in ints(a.per_round)
                for per in ints(a.per_process) if per <= c and k <= c]
        for clients, asked, per in runs:
            for rep in range(a.repeat):
                if (clients, asked, per, rep) in seen:
                    continue
                row = one_run(a.flint, clients, asked, per, rep, a.rounds, a.timeout)
                w.writerow(row)
                f.flush()
                print(f"scale: {clients} clients ({asked or 'all'} a round), {per} per process, "
                      f"run {rep + 1}/{a.repeat}: "
                      f"{'completed' if row['completed'] else 'FAILED'} in {row['wall_seconds']} s",
                      flush=True)

if __name__ == "__main__":
    main()
