#!/usr/bin/env bash
# Flint's CNN engine (and the crates it was chosen over) beside PyTorch (CPU), one after the other
# in the same run: FLIS's LeNet on MNIST (431,080 parameters, 1.64 MiB as float32), SGD lr 0.01 without
# momentum, batch 32, cross-entropy, one thread each. Not part of CI: it installs torch from PyPI
# into a virtual environment and builds bench/cnn (a standalone cargo project) outside the repo.
#
#   FLINT_DATA_DIR=../shared/data bash bench/cnn-bench.sh        (EPOCHS=2 by default)
#
# Prints per engine the training throughput (median of epochs 2..N when EPOCHS > 2, else the last
# epoch), the test accuracy after the last epoch, the ratio engine / PyTorch and the CPU use of the
# process (100 % = one core). Then, unless REPRO_BATCHES=0, it trains each engine twice with the
# same SEED, dropout 0.5, for REPRO_BATCHES batches, and says whether the final losses are
# bit-identical. Results in runs/cnn-bench/; docs/results/cnn-engine.md has the findings.
#
# An engine too slow for whole epochs can be cut to its first N batches per epoch with
# MAX_BATCHES_<ENGINE>=N (e.g. MAX_BATCHES_BURN_NDARRAY=300); its row then says how many samples
# an epoch had, and its accuracy is after those batches only.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${FLINT_DATA_DIR:?set FLINT_DATA_DIR to the folder holding mnist/}"
export FLINT_DATA_DIR
export EPOCHS=${EPOCHS:-2} SEED=${SEED:-1}
REPRO_BATCHES=${REPRO_BATCHES:-100}
VENV=${VENV:-.venv-cnn-bench}
OUT=${OUT:-runs/cnn-bench}
NICE=${NICE:-nice -n 10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/cnn-target}
# One thread everywhere: rayon (candle's gemm, burn-ndarray), matrixmultiply's own threads
# (burn-ndarray), OpenMP / MKL (torch, which also calls torch.set_num_threads(1)).
export RAYON_NUM_THREADS=1 MATMUL_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$OUT"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  # The CPU-only wheel where its index is reachable, else PyPI's (CUDA) build, run on the CPU.
  "$VENV/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu ||
    "$VENV/bin/pip" install -q torch
fi
# ENGINES picks the engines (default: Flint's own and PyTorch; add candle, burn-ndarray or
# burn-flex for the crates measured before Flint's engine was written).
ENGINES=${ENGINES:-flint torch}
want() { [[ " $ENGINES " == *" $1 "* ]]; }
# Each crate binary with its engine's feature alone (one build with both features would unify
# their dependencies' features and rebuild burn), in separate target folders for the same
# reason. burn-flex: burn's new CPU backend (burn 0.22 deprecates burn-ndarray for it), a
# further ~20 minutes of compiling on 2 cores.
crate_build() { (cd bench/cnn && CARGO_TARGET_DIR=$1 $NICE cargo build -q --release --no-default-features --features "$2" --bin "$3"); }
engines=()
if want flint; then
  # Flint's engine (common/src/model/cnn), built in the repository's own target folder.
  CARGO_TARGET_DIR=target $NICE cargo build -q --release -p flint-common --example cnn_mnist
  engines+=("flint|target/release/examples/cnn_mnist")
fi
if want burn-ndarray; then
  crate_build "$CARGO_TARGET_DIR" burn burn_cnn
  engines+=("burn-ndarray|env BURN_BACKEND=ndarray $CARGO_TARGET_DIR/release/burn_cnn")
fi
if want burn-flex; then
  crate_build "$CARGO_TARGET_DIR" burn-flex burn_cnn
  engines+=("burn-flex|env BURN_BACKEND=flex $CARGO_TARGET_DIR/release/burn_cnn")
fi
if want candle; then
  crate_build "$CARGO_TARGET_DIR-candle" candle candle_cnn
  engines+=("candle|$CARGO_TARGET_DIR-candle/release/candle_cnn")
fi
engines+=("torch|$VENV/bin/python -W ignore bench/cnn/torch_cnn.py")
echo "load before the timed runs: $(uptime)"
for e in "${engines[@]}"; do
  IFS='|' read -r name cmd <<<"$e"
  limit_var=MAX_BATCHES_$(tr 'a-z-' 'A-Z_' <<<"$name")
  echo "== $name (batches per epoch: ${!limit_var:-all})"
  # shellcheck disable=SC2086
  MAX_BATCHES=${!limit_var:-0} $NICE /usr/bin/time -f "cpu %P wall %e s maxrss %M KB" $cmd 2>"$OUT/$name.time" | tee "$OUT/$name.txt"
  tail -1 "$OUT/$name.time" | tee -a "$OUT/$name.txt"
done

"$VENV/bin/python" - "$OUT" "$EPOCHS" "${engines[@]}" <<'PY'
import re, statistics, sys
out, epochs = sys.argv[1], int(sys.argv[2])
rows = {}
for e in sys.argv[3:]:
    name = e.split("|")[0]
    rates, acc, cpu, samples = [], None, "?", 0
    for line in open(f"{out}/{name}.txt"):
        m = re.match(r"epoch (\d+) train ([\d.]+) s\s+([\d.]+) samples/s\s+test accuracy ([\d.]+) %", line)
        if m:
            rates.append(float(m.group(3)))
            samples = round(float(m.group(2)) * float(m.group(3)))
            acc = float(m.group(4))
        m = re.match(r"cpu (\S+)", line)
        if m:
            cpu = m.group(1)
    rate = statistics.median(rates[1:]) if epochs > 2 else rates[-1]
    rows[name] = (rate, acc, cpu, rates, samples)
base = rows["torch"][0]
print(f"\n{'engine':<13} {'samples/s':>10} {'x torch':>8} {'acc % (last)':>13} {'samples/epoch':>14} {'cpu':>6}  per-epoch samples/s")
for name, (rate, acc, cpu, rates, samples) in rows.items():
    print(f"{name:<13} {rate:>10.1f} {rate / base:>8.3f} {acc:>13.2f} {samples:>14} {cpu:>6}  {' '.join(f'{r:.0f}' for r in rates)}")
PY

[ "$REPRO_BATCHES" = 0 ] && exit 0
echo
echo "== reproducibility: SEED=$SEED DROPOUT=0.5 MAX_BATCHES=$REPRO_BATCHES EPOCHS=1, each engine twice"
for e in "${engines[@]}"; do
  IFS='|' read -r name cmd <<<"$e"
  for run in 1 2; do
    # shellcheck disable=SC2086
    EPOCHS=1 DROPOUT=0.5 MAX_BATCHES=$REPRO_BATCHES $NICE $cmd >"$OUT/$name.repro$run.txt"
  done
  a=$(grep -o 'last loss .*' "$OUT/$name.repro1.txt"); b=$(grep -o 'last loss .*' "$OUT/$name.repro2.txt")
  if [ "$a" = "$b" ]; then verdict=identical; else verdict=DIFFERENT; fi
  printf '%-13s run1 %s | run2 %s | %s\n' "$name" "$a" "$b" "$verdict"
done
