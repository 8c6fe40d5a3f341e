#!/usr/bin/env bash
# Flint's Tsetlin Machine beside the established implementations on binarized MNIST
# (pixel > 75), one after the other in the same run. Not part of CI: it installs the peers from
# PyPI into a virtual environment and takes minutes.
#
#   FLINT_DATA_DIR=../shared/data bash bench/tm-bench.sh        (EPOCHS=10 by default)
#
# Prints per configuration the median training time of epochs 2..N, the accuracy after the last
# epoch, and the speed ratio peer / Flint.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${FLINT_DATA_DIR:?set FLINT_DATA_DIR to the folder holding mnist/}"
export FLINT_DATA_DIR
EPOCHS=${EPOCHS:-10}
VENV=${VENV:-.venv-tm-bench}
OUT=${OUT:-runs/tm-bench}
mkdir -p "$OUT"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q pyTsetlinMachine==0.6.6 green-tsetlin==1.1.0 tmu==0.8.3
# tmu 0.8.3 needs numpy < 2 (it writes ~0 into uint32 arrays); the others accept it. Pin it last,
# as installing the peers can pull numpy 2 in.
"$VENV/bin/pip" install -q "numpy<2"
cargo build -q --release -p flint-common --example tm_mnist

# name | flint arguments (machine clauses T s epochs weighted) | peer | peer config
configs=(
  "mc2000w|multiclass 2000 5000 10 $EPOCHS true|pytsetlinmachine|mc2000w"
  "mc100w|multiclass 100 1000 10 $EPOCHS true|pytsetlinmachine|mc100w"
  "coalesced1000|coalesced 1000 1000 10 $EPOCHS true 60000 false focused|green-tsetlin|coalesced1000"
  "conv100|conv 100 1000 5 $EPOCHS true|tmu|conv100"
)
for c in "${configs[@]}"; do
  IFS='|' read -r name flint peer pconf <<<"$c"
  echo "== $name: flint"
  # shellcheck disable=SC2086
  target/release/examples/tm_mnist $flint | tee "$OUT/$name.flint.txt"
  echo "== $name: $peer"
  "$VENV/bin/python" bench/tm_peers.py "$peer" "$pconf" "$EPOCHS" | tee "$OUT/$name.peer.txt"
done

"$VENV/bin/python" - "$OUT" "${configs[@]}" <<'PY'
import re, statistics, sys
out = sys.argv[1]
def read(path):
    times, acc = [], None
    for line in open(path):
        m = re.match(r"epoch (\d+) train ([\d.]+) s\s+test accuracy ([\d.]+) %", line)
        if m:
            times.append(float(m.group(2)))
            acc = float(m.group(3))
    return statistics.median(times[1:] or times), acc
print(f"{'config':<10} {'flint s/epoch':>14} {'peer s/epoch':>13} {'ratio':>6} {'flint acc':>10} {'peer acc':>9}")
for c in sys.argv[2:]:
    name = c.split("|")[0]
    (ft, fa), (pt, pa) = read(f"{out}/{name}.flint.txt"), read(f"{out}/{name}.peer.txt")
    print(f"{name:<10} {ft:>14.2f} {pt:>13.2f} {pt / ft:>6.2f} {fa:>10.2f} {pa:>9.2f}")
PY
