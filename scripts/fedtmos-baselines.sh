#!/usr/bin/env bash
# FedTMOS Table 1's CNN baselines, every cell of experiments/fedtmos-baselines/ (or those named):
# each network trained once (`flint run`, uploads kept), then every server rule replayed on the
# kept uploads. Resumable: a cell whose run finished is not trained again, and a replay already
# written is not run again. Needs a release build (cargo build --release -p flint).
#
#   scripts/fedtmos-baselines.sh [CELL ...]     e.g. mnist-dir0.1-lenet5 mnist-dir0.1-cnn2
#
# Writes runs/fedtmos-baselines/<run>/ and beside it replay-<rule>.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
flint=target/release/flint
out=runs/fedtmos-baselines
cells=("$@")
if [ ${#cells[@]} -eq 0 ]; then
  cells=($(ls experiments/fedtmos-baselines | sed 's/\.toml$//'))
fi
for cell in "${cells[@]}"; do
  file=experiments/fedtmos-baselines/$cell.toml
  name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$file")
  run=$(ls -d "$out"/"$name"* 2>/dev/null | while read -r d; do
    [ -f "$d/results.json" ] && python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(not any(x["round"]==1 and x.get("global_test") for x in r["rounds"]))' "$d/results.json" && echo "$d"
  done | tail -1 || true)
  if [ -z "$run" ]; then
    echo "== $cell: training"
    /usr/bin/time -f "$cell: %e s wall" "$flint" run "$file" --clients-per-process 10 --runs-dir "$out"
    run=$(ls -dt "$out"/"$name"* | head -1)
  fi
  case $cell in
    *-lenet5) rules="fedavg ensemble" ;;
    *-cnn2) rules="fedavg regmean fedfisher ot-fusion" ;;
  esac
  for rule in $rules; do
    [ -s "$run/replay-$rule.txt" ] && continue
    echo "== $cell: $rule"
    "$flint" replay "$run" --set oneshot.rule="$rule" > "$run/replay-$rule.txt"
    cat "$run/replay-$rule.txt"
  done
done
