#!/usr/bin/env bash
# FedTMOS Table 1's CNN baselines, every cell of experiments/fedtmos-baselines/ (or those named):
# each network trained once (`flint run`, uploads kept), then every server rule replayed on the
# kept uploads. Resumable: a cell whose run finished is not trained again, and a replay already
# written is not run again. Needs a release build (cargo build --release -p flint).
#
#   scripts/fedtmos-baselines.sh [CELL ...]     e.g. mnist-dir0.1-lenet5 mnist-dir0.1-cnn2
#   SEEDS="20 24" scripts/fedtmos-baselines.sh mnist-dir0.1-cnn2   (FedTMOS's other two seeds)
#   DENSE=1 scripts/fedtmos-baselines.sh mnist-dir0.1-lenet5      (also DENSE: 9-55 min a cell on 2 cores)
#
# Writes runs/fedtmos-baselines/seed-<seed>/<run>/ and in it replay-<rule>.txt, each replay also
# recorded (replays/) for the accuracy-versus-bytes figure beside FedTMOS's run of the cell:
#   flint grid experiments/fedtmos/mnist-dir0.1.toml experiments/fedtmos-baselines/mnist-dir0.1-*.toml \
#     --runs-dir runs/fedtmos-baselines/seed-0 --resume
set -euo pipefail
cd "$(dirname "$0")/.."
flint=target/release/flint
seeds=${SEEDS:-0}
cells=("$@")
if [ ${#cells[@]} -eq 0 ]; then
  cells=($(ls experiments/fedtmos-baselines | sed 's/\.toml$//'))
fi
for seed in $seeds; do
out=runs/fedtmos-baselines/seed-$seed
for cell in "${cells[@]}"; do
  file=experiments/fedtmos-baselines/$cell.toml
  name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$file")
  run=$(ls -d "$out"/"$name"* 2>/dev/null | while read -r d; do
    [ -f "$d/results.json" ] && python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(not any(x["round"]==1 and x.get("global_test") for x in r["rounds"]))' "$d/results.json" && echo "$d"
  done | tail -1 || true)
  if [ -z "$run" ]; then
    echo "== $cell seed $seed: training"
    /usr/bin/time -f "$cell seed $seed: %e s wall" "$flint" run "$file" --set seed="$seed" \
      --clients-per-process 10 --runs-dir "$out"
    run=$(ls -dt "$out"/"$name"* | head -1)
  fi
  case $cell in
    *-lenet5) rules="fedavg ensemble${DENSE:+ dense}" ;;
    *-cnn2) rules="fedavg regmean fedfisher ot-fusion" ;;
  esac
  for rule in $rules; do
    [ -s "$run/replay-$rule.txt" ] && continue
    echo "== $cell seed $seed: $rule"
    "$flint" replay "$run" --set oneshot.rule="$rule" --record > "$run/replay-$rule.txt"
    cat "$run/replay-$rule.txt"
  done
done
done
