#!/usr/bin/env python3
"""Trains the clients of a FedTMOS experiment with the published code's own C Tsetlin Machine, as
the code trains them, and prints how their class sums behave on the global test half (the side
of `flint replay RUN --sums` that Flint cannot give), each client's accuracy alone and, for
`all`, the ensemble baseline of their machines.

    bench/fedtmos-code-client.py FEDTMOS_CHECKOUT EXPERIMENT CLIENT|all [--no-leak] [--seed N]
        [--updates DIR] [--states FILE.npz]

FEDTMOS_CHECKOUT is a work tree of shannonhsq/FedTMOS (HEAD a763671). Its C library does not
build as published (docs/papers/fedtmos.md §20); a copy is built in a temporary directory with
the two fixes: `mc_tm_votes` reads T from its first machine, and the file includes math.h
(linked with -lm). EXPERIMENT is an MNIST or Fashion-MNIST file split as the code splits:
- `partition.kind = "explicit"` (experiments/fedtmos-code/numpy/): client k takes the next
  class_counts of each class in file order, as the code slices;
- `classes-per-client` with `class_sets` (experiments/fedtmos-code/mnist-s*.toml): the code's
  `cls` split, numpy seeded with the run's seed (the experiment's, or --seed).
Training (docs/papers/fedtmos.md §1-§4): one epoch on the rows of the first client holding
class 9 (the code's `copy_data` leak; `--no-leak` skips it), then 30 epochs on the client's own
rows in class order, no shuffling; T = 1000, s = 5, weighted clauses, and the code's machine for
the dataset (`MACHINES`: MNIST 100 clauses, 10×10 patches, pixels >= 75; Fashion-MNIST 200
clauses, 5×5 patches, OpenCV's adaptive Gaussian threshold, window 11, C = 2).
Classes a client lacks score 0, as its upload zeroes them. The ensemble is given under the
code's reading (one spread per machine over the batch) and eq. 3 (one per row), both on the
code's clamped sums. Needs numpy, gcc with OpenMP, FLINT_DATA_DIR and, for Fashion-MNIST,
OpenCV (`pip install opencv-python-headless`)."""

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

# The code's machine per dataset (docs/papers/fedtmos.md §1-§2): clauses, patch side, server
# models φ (its `--c`), and the dataset name its server's σ table reads.
MACHINES = {
    "mnist": {"clauses": 100, "patch": 10, "models": 4, "name": "MNIST"},
    "fashion-mnist": {"clauses": 200, "patch": 5, "models": 3, "name": "F-MNIST"},
}


def build(checkout):
    work = Path(tempfile.mkdtemp(prefix="fedtmos-tm-"))
    src = work / "pyTsetlinMachineParallel_vote"
    shutil.copytree(Path(checkout) / "pyTsetlinMachineParallel_vote", src)
    mc = src / "MultiClassConvolutionalTsetlinMachine.c"
    text = mc.read_text()
    text = text.replace("int T =  mc_tm->T;", "int T =  tm->T;")
    mc.write_text("#include <math.h>\n" + text)
    names = ["MultiClassConvolutionalTsetlinMachine", "ConvolutionalTsetlinMachine", "Tools"]
    flags = ["-O3", "-fopenmp", "-ffast-math"]
    subprocess.run(["gcc", *flags, "-c", "-fpic", *[f"{n}.c" for n in names]], cwd=src,
                   check=True)
    subprocess.run(["gcc", "-shared", *flags, "-o", "libTM.so", *[f"{n}.o" for n in names],
                    "-lm"], cwd=src, check=True)
    (src / "__init__.py").touch()
    sys.path.insert(0, str(work))
    from pyTsetlinMachineParallel_vote.tm import MultiClassConvolutionalTsetlinMachine2D
    return MultiClassConvolutionalTsetlinMachine2D


def machine(exp):
    """The code's machine for the experiment's dataset, or exit naming what is supported."""
    source = exp["data"]["source"]
    if source not in MACHINES:
        sys.exit(f"needs an MNIST or Fashion-MNIST experiment, not {source}")
    return MACHINES[source]


def booleanized(images, source):
    """The code's booleanization: MNIST pixels >= 75; Fashion-MNIST OpenCV's adaptive Gaussian
    threshold per image (window 11, C = 2), as `oneshot_data.py` does."""
    if source == "mnist":
        return (images >= 75).astype(np.uint32)
    import cv2
    return np.stack([cv2.adaptiveThreshold(im, 1, cv2.ADAPTIVE_THRESH_GAUSSIAN_C,
                                           cv2.THRESH_BINARY, 11, 2) for im in images]
                    ).astype(np.uint32)


def load(source):
    """Training images and labels, all test labels, and the global test half (images
    4992-9999, booleanized, with their labels)."""
    data = Path(os.environ.get("FLINT_DATA_DIR", "data")) / source
    xtr = booleanized(idx(data / "train-images-idx3-ubyte.gz", True), source)
    ytr = idx(data / "train-labels-idx1-ubyte.gz", False)
    yte_all = idx(data / "t10k-labels-idx1-ubyte.gz", False)
    xte = booleanized(idx(data / "t10k-images-idx3-ubyte.gz", True)[4992:], source)
    return xtr, ytr, yte_all, xte, yte_all[4992:]


def idx(path, images):
    with gzip.open(path) as f:
        raw = f.read()
    if images:
        return np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 28, 28)
    return np.frombuffer(raw, np.uint8, offset=8)


def varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, wire, body):
    if wire == 2:
        body = varint(len(body)) + body
    return varint(number << 3 | wire) + body


def literal_order(patch, side=28):
    """Where each of the code's literals sits in Flint's order, with the feature and TA chunk
    counts. The code: y then x position thermometers, then pixels; Flint: pixels, then y, then
    x; negations after in both."""
    pos, pixels = side - patch, patch * patch
    features = pixels + 2 * pos
    to_flint = np.concatenate([pixels + np.arange(2 * pos), np.arange(pixels)])
    to_flint = np.concatenate([to_flint, to_flint + features])
    return to_flint, features, (2 * features - 1) // 32 + 1


def flint_upload(state, counts, patch):
    """The machine as a Flint FedTMOS upload (a `Payload` holding a `TmUpload`,
    proto/flint/v1/aggregator.proto), written by hand so the script needs no protobuf package."""
    to_flint, features, chunks = literal_order(patch)
    clauses = len(state[0][0])
    model = field(1, 0, varint(clauses)) + field(2, 0, varint(2 * features))
    bits_fields = b""
    for c in np.flatnonzero(counts):
        weights, ta = state[c]
        ta = ta.reshape(clauses, chunks, 8)[:, :, 7]  # the top bit plane: the include action
        code_bits = ((ta[:, :, None] >> np.arange(32, dtype=np.uint32)) & 1).reshape(clauses, -1)
        bits = np.zeros((clauses, 2 * features), np.uint8)
        bits[:, to_flint] = code_bits[:, :2 * features]
        packed = np.packbits(bits.reshape(-1), bitorder="little").tobytes()
        zigzag = b"".join(varint(int(w) << 1) for w in weights)
        model += field(3, 2, field(1, 0, varint(int(c))) + field(2, 2, zigzag))
        bits_fields += field(4, 2, packed)
    model += bits_fields
    model += field(5, 2, b"".join(varint(int(n)) for n in counts[np.flatnonzero(counts)]))
    p = counts / counts.sum()
    gini = field(1, 1, np.float64((p * p).sum()).tobytes())
    return field(7, 2, field(1, 2, model) + field(2, 2, gini))


def code_split(exp, ytr, yte_all, seed):
    """Each client's training rows in the order the code trains them (class by class)."""
    kind = exp["partition"]["kind"]
    if kind == "explicit":
        counts = [c["class_counts"] for c in exp["clients"]]
        by_class = [np.where(ytr == c)[0] for c in range(10)]
        starts = np.cumsum([[0] * 10] + counts, axis=0)
        return [np.concatenate([by_class[c][starts[k][c]:starts[k + 1][c]] for c in range(10)])
                for k in range(len(counts))]
    if kind == "classes-per-client" and "class_sets" in exp["partition"]:
        # The code's `cls` split: np seeded with the run's seed shuffles each class's train and
        # test rows in turn and array_splits the train rows among its holders in client order.
        sets = exp["partition"]["class_sets"]
        np.random.seed(seed)
        shards = [[] for _ in sets]
        for c in range(10):
            train = np.where(ytr == c)[0]
            test = np.where(yte_all == c)[0]
            np.random.shuffle(train)
            np.random.shuffle(test)
            holders = [k for k, s in enumerate(sets) if c in s]
            for k, part in zip(holders, np.array_split(train, len(holders))):
                shards[k].append(part)
        return [np.concatenate(s) for s in shards]
    sys.exit("needs an experiment with explicit class_counts or classes-per-client class_sets")


def share_above(off, level):
    return (off >= level).mean()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout")
    parser.add_argument("experiment")
    parser.add_argument("client", help="1-based, as in the experiment, or `all`")
    parser.add_argument("--no-leak", action="store_true")
    parser.add_argument("--seed", type=int, help="the run's seed (default: the experiment's)")
    parser.add_argument("--updates", type=Path,
                        help="also write each machine as a Flint upload, "
                             "DIR/round-1-client-K.pb, for `flint replay`")
    parser.add_argument("--states", type=Path,
                        help="also save the machines as the code holds them (FILE.npz), for "
                             "bench/fedtmos-code-server.py")
    args = parser.parse_args()
    exp = tomllib.loads(Path(args.experiment).read_text())
    spec = machine(exp)
    seed = exp.get("seed", 0) if args.seed is None else args.seed
    xtr, ytr, yte_all, xte, yte = load(exp["data"]["source"])
    shards = code_split(exp, ytr, yte_all, seed)
    if args.client == "all":
        clients = list(range(len(shards)))
    elif args.client.isdigit() and 1 <= int(args.client) <= len(shards):
        clients = [int(args.client) - 1]
    else:
        sys.exit(f"client must be `all` or 1 to {len(shards)}")
    leak_client = next((k for k, s in enumerate(shards) if (ytr[s] == 9).any()), None)
    if leak_client is None and not args.no_leak:
        sys.exit("no client holds class 9, so the code has no leak client: use --no-leak")
    ctm = build(args.checkout)
    leak_note = "no leak" if args.no_leak else f"leak from client {leak_client + 1}"
    sums, saved = [], {}
    for k in clients:
        tm = ctm(spec["clauses"], 1000, 5.0, (spec["patch"],) * 2, weighted_clauses=True)
        started = time.time()
        if not args.no_leak:
            leak = shards[leak_client]
            tm.fit(xtr[leak], ytr[leak].astype(np.uint32), epochs=1, incremental=True)
        own = shards[k]
        tm.fit(xtr[own], ytr[own].astype(np.uint32), epochs=30, incremental=True)
        _, scores = tm.get_score(xte)
        # Without the leak the code's machine has only classes up to the client's largest.
        scores = np.pad(scores, ((0, 0), (0, 10 - scores.shape[1])))
        held = np.isin(np.arange(10), ytr[own])
        # The upload zeroes the classes a client lacks: their sums are 0 (docs/papers/fedtmos.md
        # §5).
        scores = np.where(held, scores, 0).astype(np.float64)
        sums.append(scores)
        if args.updates:
            args.updates.mkdir(parents=True, exist_ok=True)
            counts = np.bincount(ytr[own], minlength=10)
            (args.updates / f"round-1-client-{k + 1}.pb").write_bytes(
                flint_upload(tm.get_state(), counts, spec["patch"]))
        if args.states:
            state = tm.get_state()
            classes = len(state)  # without the leak, only up to the client's largest class
            saved[f"weights_{k + 1}"] = np.stack([state[c][0] if c < classes else
                                                  np.zeros_like(state[0][0]) for c in range(10)])
            saved[f"ta_{k + 1}"] = np.stack([state[c][1] if c < classes else
                                             np.zeros_like(state[0][1]) for c in range(10)])
            saved[f"counts_{k + 1}"] = np.bincount(ytr[own], minlength=10)
            np.savez(args.states, **saved)
        alone = (scores.argmax(axis=1) == yte).mean()
        print(f"client {k + 1} ({len(own)} rows, {leak_note}), trained in "
              f"{time.time() - started:.0f} s; alone {100 * alone:.2f} % on the 5,008 rows of "
              f"the global test half", flush=True)
        for c in np.flatnonzero(held):
            on, off = scores[yte == c, c], scores[yte != c, c]
            print(f"  class {c}: mean sum {on.mean():.0f} on its rows, {off.mean():.0f} on the "
                  f"others'; others above 0: {share_above(off, 1):.3f}, at least T/2: "
                  f"{share_above(off, 500):.3f}", flush=True)
    if len(sums) > 1:
        # The ensemble baseline (docs/papers/fedtmos.md §14): the clients' machines combined as
        # the composite, under the code's reading (one spread per machine over the batch) and
        # eq. 3 (per row).
        batch = sum(s / ((s.max() - s.min()) or 1) for s in sums)
        spread = [np.where((r := s.max(axis=1) - s.min(axis=1)) > 0, r, np.inf)[:, None]
                  for s in sums]
        per_row = sum(s / r for s, r in zip(sums, spread))
        print(f"ensemble of {len(sums)} clients: eq. 3 {100 * (per_row.argmax(1) == yte).mean():.2f} "
              f"%, the code's reading {100 * (batch.argmax(1) == yte).mean():.2f} %; clients "
              f"alone, mean {100 * np.mean([(s.argmax(1) == yte).mean() for s in sums]):.2f} %")


if __name__ == "__main__":
    main()
