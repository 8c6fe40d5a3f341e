#!/usr/bin/env bash
# One Fashion-MNIST Dir(α) cell of the FedTMOS paper's Table 1 on Hsu's split, every side on the
# same rows: Flint's clients and presets, the code's server on Flint's clients, and the published
# pipeline (the code's C clients with its leak epoch, then its server). See bench/README.md.
#
#   bench/fedtmos-hsu-cell.sh FEDTMOS_CHECKOUT ALPHA SEED [OUT]     # e.g. /tmp/fedtmos 0.05 20
#
# Each step is skipped when its output is already in OUT (default runs/hsu/dir<ALPHA>-s<SEED>),
# so a broken-off cell goes on at the step where it stopped (a step broken off starts again).
# The code's clients take 1.5 to 2 hours here.
set -euo pipefail

if [ $# -lt 3 ]; then
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
# Paths given relative to where the script is run, before it moves to the repository root.
checkout=$(realpath "$1") alpha=$2 seed=$3
root=$(realpath "$(dirname "$0")/..")
out=$(realpath -m "${4:-$root/runs/hsu/dir$alpha-s$seed}")
flint=$(realpath -m "${FLINT:-$root/target/release/flint}")
[ -z "${FLINT_DATA_DIR:-}" ] || export FLINT_DATA_DIR=$(realpath "$FLINT_DATA_DIR")
cd "$root"
source_exp=experiments/fedtmos/fmnist-dir$alpha.toml
exp=experiments/fedtmos-code/hsu/fmnist-dir$alpha-s$seed.toml
name=fedtmos-code-hsu-fmnist-dir$alpha-s$seed
[ -f "$source_exp" ] || { echo "no $source_exp: alpha is one of 0.05, 0.1, 0.3" >&2; exit 2; }
[ -x "$flint" ] || { echo "no $flint: cargo build --release -p flint" >&2; exit 2; }
mkdir -p "$out"
step() { echo "$(date +%T) $*"; }

if [ ! -f "$exp" ]; then
    step "writing $exp from flint split"
    {
        echo "# FedTMOS on Fashion-MNIST, Dir($alpha): 10 clients, one round (FedTMOS Table 1)."
        echo "# Flint's Dir($alpha) split by class (Hsu et al.) for seed $seed, as class counts: each client's"
        echo "# training rows per class as \`flint split $source_exp --set seed=$seed --toml\` prints them."
        echo "# Here client k takes the next rows of each class in file order (as the published code"
        echo "# slices), so bench/fedtmos-code-client.py trains the code's clients on exactly Flint's rows."
        echo "# Written by bench/fedtmos-hsu-cell.sh."
        echo "name = \"$name\""
        sed -n '/^strategy = /,/^\[partition\]/p' "$source_exp" \
            | sed -e "s/^seed = .*/seed = $seed/" -e '/^client_count = /d'
        echo 'kind = "explicit"'
        echo
        sed -n '/^\[tm\]/,$p' "$source_exp"
        "$flint" split "$source_exp" --set "seed=$seed" --toml | grep -v '^# '
    } > "$exp.tmp"
    mv "$exp.tmp" "$exp"
fi

run=$out/runs/$name
if [ ! -f "$run/results.json" ]; then
    step "Flint's clients and server"
    "$flint" run "$exp" --set fedtmos.coding=varint --runs-dir "$out/runs" \
        --clients-per-process 10 > "$out/flint-run.log"
fi
for preset in recommended paper-code; do
    [ -s "$out/replay-$preset.log" ] && continue
    step "replay, preset $preset"
    "$flint" replay "$run" --set "fedtmos.preset=$preset" > "$out/replay-$preset.log.tmp"
    mv "$out/replay-$preset.log.tmp" "$out/replay-$preset.log"
done
if [ ! -s "$out/server-flint.log" ]; then
    step "the code's server on Flint's clients"
    python3 -u bench/fedtmos-code-server.py "$checkout" "$exp" "$run" --draws 4 \
        > "$out/server-flint.log.tmp"
    mv "$out/server-flint.log.tmp" "$out/server-flint.log"
fi
if [ ! -f "$out/states.npz" ]; then
    step "the code's clients (the published pipeline)"
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} python3 -u bench/fedtmos-code-client.py "$checkout" "$exp" \
        all --seed "$seed" --updates "$out/updates" --states "$out/states.npz.tmp.npz" \
        > "$out/client.log"
    mv "$out/states.npz.tmp.npz" "$out/states.npz"
fi
if [ ! -s "$out/server-pipeline.log" ]; then
    step "the code's server on the code's clients"
    python3 -u bench/fedtmos-code-server.py "$checkout" "$exp" "$out/states.npz" --draws 2 \
        > "$out/server-pipeline.log.tmp"
    mv "$out/server-pipeline.log.tmp" "$out/server-pipeline.log"
fi
step "done: $out"
grep -h "accuracy\|%" "$out/flint-run.log" "$out"/replay-*.log "$out"/server-*.log | tail -n 40 || true
