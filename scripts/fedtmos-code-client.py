#!/usr/bin/env python3
"""Trains one client of a FedTMOS experiment with the published code's own C Tsetlin Machine, as
the code trains it, and prints how its class sums behave on the global test half: the side of
`flint replay RUN --sums` that Flint cannot give.

    scripts/fedtmos-code-client.py FEDTMOS_CHECKOUT EXPERIMENT CLIENT [--no-leak]

FEDTMOS_CHECKOUT is a clone of shannonhsq/FedTMOS (HEAD a763671). Its C library does not build
as published (FEDTMOS-CODE-NOTES §8); a copy is built in a temporary directory with the two
fixes: `mc_tm_votes` reads T from its first machine, and the file includes math.h (linked with
-lm). EXPERIMENT is an MNIST file with `partition.kind = "explicit"`
(experiments/fedtmos-code/numpy/): client k takes the next class_counts of each class in file
order, as the code slices. Training (FEDTMOS-CODE-NOTES §1): one epoch on the rows of the first
client holding class 9 (the code's `copy_data` leak; `--no-leak` skips it), then 30 epochs on the
client's own rows in class order, no shuffling; 100 clauses, T = 1000, s = 5, 10×10 patches,
weighted clauses, pixels >= 75. Needs numpy, gcc with OpenMP and FLINT_DATA_DIR."""

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


def idx(path, images):
    with gzip.open(path) as f:
        raw = f.read()
    if images:
        return np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 28, 28)
    return np.frombuffer(raw, np.uint8, offset=8)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout")
    parser.add_argument("experiment")
    parser.add_argument("client", type=int, help="1-based, as in the experiment")
    parser.add_argument("--no-leak", action="store_true")
    args = parser.parse_args()
    exp = tomllib.loads(Path(args.experiment).read_text())
    counts = [c["class_counts"] for c in exp["clients"]]
    if exp["data"]["source"] != "mnist" or not 1 <= args.client <= len(counts):
        sys.exit("needs an MNIST experiment with class_counts and a client it declares")
    data = Path(os.environ.get("FLINT_DATA_DIR", "data")) / "mnist"
    xtr = (idx(data / "train-images-idx3-ubyte.gz", True) >= 75).astype(np.uint32)
    ytr = idx(data / "train-labels-idx1-ubyte.gz", False)
    xte = (idx(data / "t10k-images-idx3-ubyte.gz", True) >= 75).astype(np.uint32)[4992:]
    yte = idx(data / "t10k-labels-idx1-ubyte.gz", False)[4992:]
    by_class = [np.where(ytr == c)[0] for c in range(10)]
    starts = np.cumsum([[0] * 10] + counts, axis=0)

    def rows(k):
        return np.concatenate([by_class[c][starts[k][c]:starts[k + 1][c]] for c in range(10)])

    leak_client = next((k for k, row in enumerate(counts) if row[9] > 0), None)
    if leak_client is None and not args.no_leak:
        sys.exit("no client holds class 9, so the code has no leak client: use --no-leak")
    ctm = build(args.checkout)
    tm = ctm(100, 1000, 5.0, (10, 10), weighted_clauses=True)
    started = time.time()
    if not args.no_leak:
        leak = rows(leak_client)
        tm.fit(xtr[leak], ytr[leak].astype(np.uint32), epochs=1, incremental=True)
    own = rows(args.client - 1)
    tm.fit(xtr[own], ytr[own].astype(np.uint32), epochs=30, incremental=True)
    _, scores = tm.get_score(xte)
    leak_note = "no leak" if args.no_leak else f"leak from client {leak_client + 1}"
    print(f"client {args.client} ({len(own)} rows, {leak_note}), trained in "
          f"{time.time() - started:.0f} s; on the 5,008 rows of the global test half:")
    for c in range(10):
        if counts[args.client - 1][c] == 0:
            continue
        on, off = scores[yte == c, c], scores[yte != c, c]
        print(f"  class {c}: mean sum {on.mean():.0f} on its rows, {off.mean():.0f} on the "
              f"others'; others above 0: {(off > 0).mean():.3f}, at least T/2: "
              f"{(off >= 500).mean():.3f}")


if __name__ == "__main__":
    main()
