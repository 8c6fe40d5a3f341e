#!/usr/bin/env bash
# Accuracy against ε for FedAvg on MAGIC (experiments/fedavg-magic.toml and its [dp] copies in
# experiments/privacy/): no noise, then central and local noise at each multiplier, each over
# three seeds. Resumable (`flint grid --resume`); needs a release build (cargo build --release -p
# flint). Then scripts/privacy-table.py prints the table docs/results/privacy.md quotes.
#
#   scripts/privacy-curve.sh                  MULTIPLIERS="1 3 10" SEEDS=7,1,2 by default
set -euo pipefail
cd "$(dirname "$0")/.."
flint=target/release/flint
seeds=${SEEDS:-7,1,2}
multipliers=${MULTIPLIERS:-1 3 10 30}
out=runs/privacy
"$flint" grid experiments/fedavg-magic.toml --seeds "$seeds" --runs-dir "$out/plain" --resume
for mechanism in central local; do
  for z in $multipliers; do
    "$flint" grid "experiments/privacy/fedavg-magic-$mechanism.toml" --seeds "$seeds" \
      --set dp.noise_multiplier="$z" --runs-dir "$out/$mechanism-$z" --resume
  done
done
python3 scripts/privacy-table.py "$out"
