#!/usr/bin/env bash
# Ten thousand clients, five rounds, on this machine (FedAvg of logistic regression
# on synthetic data, 200 clients per process, so 50 client processes and the server on loopback).
# Appends a row per run to runs/scale/10000.csv (resumable: rows already there are skipped) with
# the round times (mean, second, last, last / second) and the server's peak memory per client.
#
#   cargo build --release && scripts/scale-10000.sh [repetitions, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || true
exec python3 bench/scale.py --clients 10000 --per-process 200 --rounds 5 \
    --repeat "${1:-3}" --out runs/scale/10000.csv
