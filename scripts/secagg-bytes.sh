#!/usr/bin/env bash
# What secure aggregation costs FedAvg on MAGIC (experiments/privacy/fedavg-magic-secagg.toml):
# bytes per client and round at payload, message and socket, and the round's and the sum's
# time, for 10 and 100 clients (and 1,000 with 100 asked per round, and 1,000 all asked, which
# runs SecAgg+ among 40 neighbours each), each without [secagg], with it, and with 10 % of the
# clients gone after their masked input. Resumable: a run whose
# results.json exists is kept. Needs a release build (cargo build --release -p flint); then
# scripts/secagg-table.py prints the table docs/RESULTS.md quotes.
#
#   scripts/secagg-bytes.sh                 SIZES="10 100 1000 1000-all" by default
set -euo pipefail
cd "$(dirname "$0")/.."
flint=target/release/flint
out=runs/secagg
mkdir -p "$out"
sizes=${SIZES:-10 100 1000 1000-all}
for size in $sizes; do
  n=${size%-all}
  sample=()
  if [ "$n" -gt 255 ] && [ "$size" = "$n" ]; then sample=(--set server.clients_per_round=100); fi
  for kind in plain secure dropping; do
    case $kind in
      plain) set=(--set secagg.enabled=false) ;;
      secure) set=() ;;
      dropping) set=(--set churn.masked_dropout=0.1) ;;
    esac
    dir="$out/$size-$kind"
    [ -f "$dir/fedavg-magic-secagg/results.json" ] && continue
    rm -rf "$dir"
    "$flint" run experiments/privacy/fedavg-magic-secagg.toml --runs-dir "$dir" \
      --set client_count="$n" "${sample[@]}" "${set[@]}" > "$dir.log" 2>&1 || {
        echo "$dir failed: see $dir.log" >&2
        exit 1
      }
  done
done
python3 scripts/secagg-table.py "$out"
