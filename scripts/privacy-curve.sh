#!/usr/bin/env bash
# Accuracy against ε: no noise, then each [dp] mechanism at each multiplier, each over three
# seeds. Resumable (`flint grid --resume`); needs a release build (cargo build --release -p
# flint). Then scripts/privacy-table.py prints the table docs/results/privacy.md quotes.
#
#   scripts/privacy-curve.sh             FedAvg on MAGIC (experiments/fedavg-magic.toml and its
#                                        [dp] copies in experiments/privacy/), central and local
#   scripts/privacy-curve.sh tpfl-mnist  TPFL on MNIST (experiments/privacy/tpfl-mnist*.toml),
#                                        central per cluster and local
#   scripts/privacy-curve.sh fcm-breast-cancer
#                                        Blind FL on Breast Cancer (the paper's blind, mean, tanh,
#                                        even split and its copies in experiments/privacy/)
#   scripts/privacy-curve.sh fedavg-cnn-mnist
#                                        FedAvg of CNN2 on MNIST (experiments/privacy/
#                                        fedavg-cnn-mnist*.toml), central and local
#   MULTIPLIERS="1 3 10 30" SEEDS=7,1,2 by default; FLINT=target/debug/flint for another build
set -euo pipefail
cd "$(dirname "$0")/.."
flint=${FLINT:-target/release/flint}
seeds=${SEEDS:-7,1,2}
multipliers=${MULTIPLIERS:-1 3 10 30}
case ${1:-fedavg-magic} in
  fedavg-magic)
    plain=experiments/fedavg-magic.toml mechanisms="central local" out=runs/privacy ;;
  tpfl-mnist)
    plain=experiments/privacy/tpfl-mnist.toml mechanisms="central local" out=runs/privacy-tpfl ;;
  fcm-breast-cancer)
    plain=experiments/fcm/breast-cancer/blind-mean-tanh-even.toml mechanisms="central local"
    out=runs/privacy-fcm ;;
  fedavg-cnn-mnist)
    plain=experiments/privacy/fedavg-cnn-mnist.toml mechanisms="central local" out=runs/privacy-cnn ;;
  *) echo "privacy-curve.sh: fedavg-magic, tpfl-mnist, fcm-breast-cancer or fedavg-cnn-mnist, not $1" >&2
     exit 2 ;;
esac
name=${1:-fedavg-magic}
"$flint" grid "$plain" --seeds "$seeds" --runs-dir "$out/plain" --resume
for mechanism in $mechanisms; do
  for z in $multipliers; do
    "$flint" grid "experiments/privacy/$name-$mechanism.toml" --seeds "$seeds" \
      --set dp.noise_multiplier="$z" --runs-dir "$out/$mechanism-$z" --resume
  done
done
python3 scripts/privacy-table.py "$out"
