#!/usr/bin/env python3
"""What a run's wire carries, against its content (docs/results/engine.md
§"Near the entropy" and docs/results/fedtmos.md §Bytes). Standard library only: the kept
updates (`server.keep_updates = true`) are read with a minimal protobuf parser.

  python3 scripts/wire-bytes.py levels RUN [RUN ...]   bytes per client-round, rounds 2..R
  python3 scripts/wire-bytes.py weights RUN [RUN ...]  TPFL: weight-vector bytes and entropy
  python3 scripts/wire-bytes.py include RUN [RUN ...]  FedTMOS: bits per include bit
  python3 scripts/wire-bytes.py simulate RUN           TPFL: code lengths of model variants

RUN is a run directory (holding rounds.csv) or its parent (the one run inside it).
"""
import collections
import csv
import glob
import math
import os
import sys


def run_dir(path):
    if os.path.exists(os.path.join(path, "rounds.csv")):
        return path
    inner = [d for d in glob.glob(os.path.join(path, "*")) if os.path.exists(os.path.join(d, "rounds.csv"))]
    if len(inner) != 1:
        sys.exit(f"{path}: not a run directory (no rounds.csv), nor the parent of exactly one")
    return inner[0]


def varint(b, i):
    r = s = 0
    while True:
        x = b[i]
        i += 1
        r |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return r, i


def fields(b):
    """Field number → list of values (ints for varints, bytes for length-delimited)."""
    out, i = collections.defaultdict(list), 0
    while i < len(b):
        key, i = varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        else:
            sys.exit(f"unexpected wire type {wire}")
        out[number].append(v)
    return out


def zigzag_values(b):
    vals, i = [], 0
    while i < len(b):
        u, i = varint(b, i)
        vals.append((u >> 1) ^ -(u & 1))
    return vals


def entropy(counts):
    n = sum(counts.values())
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def updates(run):
    files = sorted(glob.glob(os.path.join(run, "updates", "*.pb")))
    if not files:
        sys.exit(f"{run}: no kept updates (run with --set server.keep_updates=true)")
    return files


def levels(run):
    rows = [r for r in csv.DictReader(open(os.path.join(run, "rounds.csv"))) if r["client"] != "all"]
    last = max(int(r["round"]) for r in rows)
    sel = [r for r in rows if 2 <= int(r["round"]) <= last] or [r for r in rows if int(r["round"]) >= 1]
    mean = lambda k: sum(int(r[k]) for r in sel) / len(sel)
    up = [mean(f"up_{k}") for k in ("payload", "message", "socket")]
    down = [mean(f"down_{k}") for k in ("payload", "message", "socket")]
    print(f"{run}: {len(sel)} client-rounds; up payload / message / socket "
          f"{up[0]:.0f} / {up[1]:.0f} / {up[2]:.0f} B (socket − message {up[2] - up[1]:.0f}); "
          f"down {down[0]:.0f} / {down[1]:.0f} / {down[2]:.0f} B (socket − message {down[2] - down[1]:.0f})")


def class_weights(path):
    """A TPFL upload's ClassWeights: (varint values or None, bytes on the wire, count)."""
    winner = fields(fields(open(path, "rb").read())[3][0])
    cw = fields(winner[3][0])
    if cw[2]:
        return zigzag_values(cw[2][0]), len(cw[2][0])
    return None, len(cw[3][0])


def weights(run):
    pooled, sizes, n = collections.Counter(), [], 0
    for path in updates(run):
        values, size = class_weights(path)
        sizes.append(size)
        if values is not None:
            pooled.update(values)
            n += len(values)
    line = f"{run}: {len(sizes)} updates, {sum(sizes) / len(sizes):.1f} B of weights each"
    if n:
        line += (f", {8 * sum(sizes) / n:.2f} bits per weight as varints; "
                 f"pooled order-0 entropy {entropy(pooled):.2f} bits ({len(pooled)} values)")
    else:
        line += " (coded: the same run with --set tpfl.coding=varint gives the values' entropy)"
    print(line)


def include(run):
    coded = plain = classes = bits = weight_bytes = 0
    for path in updates(run):
        model = fields(fields(fields(open(path, "rb").read())[7][0])[1][0])
        clauses, literals = model[1][0], model[2][0]
        for cw in map(fields, model[3]):
            weight_bytes += sum(len(v) for v in cw[2] + cw[3])
        for code in model[6]:
            coded += len(code)
        for raw in model[4]:
            plain += len(raw)
        classes += len(model[3])
        bits += len(model[3]) * clauses * literals
    size = coded or plain
    form = "coded" if coded else "plain"
    print(f"{run}: {classes} classes, {form} include bits {size / classes:.0f} B a class, "
          f"{8 * size / bits:.3f} bits per include bit; weights {weight_bytes / classes:.0f} B a class")


def simulate(run):
    """Ideal adaptive code lengths of the weight model's variants on a varint run's updates:
    M mantissa bits below the top one, an initial count of `prior` steps."""
    vectors = [v for v, _ in map(class_weights, updates(run)) if v is not None]
    if not vectors:
        sys.exit(f"{run}: no varint updates (run with --set tpfl.coding=varint)")
    n = sum(map(len, vectors))
    for m_bits in (0, 1, 2, 3):
        for prior in (0.5, 0.1, 0.02):
            total = sum(code_length(v, m_bits, prior) for v in vectors)
            print(f"M = {m_bits}, prior {prior}: {total / n:.2f} bits per weight")


def code_length(values, m_bits, prior):
    bins = [(0, 0)] + [(k, t) for k in range(1, 33) for t in range(1 << min(k - 1, m_bits), 1 << min(k, m_bits + 1))]
    counts, total, bits, signs = collections.Counter(), 0, 0.0, [1, 1]
    for w in values:
        m = abs(w)
        k = m.bit_length()
        extra = max(0, k - 1 - m_bits)
        b = (k, m >> extra) if m else (0, 0)
        bits -= math.log2((counts[b] + prior) / (total + prior * len(bins)))
        counts[b] += 1
        total += 1
        bits += extra
        if m:
            s = int(w > 0)
            bits -= math.log2(signs[s] / sum(signs))
            signs[s] += 1
    return bits


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("levels", "weights", "include", "simulate"):
        sys.exit(__doc__)
    action = globals()[sys.argv[1]]
    for path in sys.argv[2:]:
        action(run_dir(path))


if __name__ == "__main__":
    main()
