"""Peers of Flint's Tsetlin Machine on binarized MNIST (pixel > 75): epoch times and accuracy.

Run by bench/tm-bench.sh inside a virtual environment that has the peers installed.
usage: tm_peers.py PEER CONFIG EPOCHS
  PEER:   pytsetlinmachine | tmu | green-tsetlin
  CONFIG: mc2000w | mc100 | mc100w | coalesced1000 | conv100
"""
import gzip
import os
import sys
import time

import numpy as np


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def mnist():
    d = os.path.join(os.environ.get("FLINT_DATA_DIR", "data"), "mnist")
    xtr = idx(os.path.join(d, "train-images-idx3-ubyte.gz"))
    ytr = idx(os.path.join(d, "train-labels-idx1-ubyte.gz")).astype(np.uint32)
    xte = idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"))
    yte = idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz")).astype(np.uint32)
    flat = lambda x: (x > 75).astype(np.uint32).reshape(len(x), -1)
    return flat(xtr), ytr, flat(xte), yte


def main():
    peer, config, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    xtr, ytr, xte, yte = mnist()
    if peer == "pytsetlinmachine":
        from pyTsetlinMachine.tm import MultiClassConvolutionalTsetlinMachine2D, MultiClassTsetlinMachine

        if config == "mc2000w":
            tm = MultiClassTsetlinMachine(2000, 5000, 10.0, weighted_clauses=True)
        elif config == "mc100":
            tm = MultiClassTsetlinMachine(100, 1000, 10.0)
        elif config == "mc100w":
            tm = MultiClassTsetlinMachine(100, 1000, 10.0, weighted_clauses=True)
        elif config == "conv100":
            tm = MultiClassConvolutionalTsetlinMachine2D(100, 1000, 5.0, (10, 10))
            xtr, xte = xtr.reshape(-1, 28, 28), xte.reshape(-1, 28, 28)
        else:
            raise SystemExit(f"config {config} is not run with {peer}")
        fit = lambda: tm.fit(xtr, ytr, epochs=1, incremental=True)
        predict = lambda: tm.predict(xte)
    elif peer == "tmu":
        from tmu.models.classification.vanilla_classifier import TMClassifier

        if config == "conv100":
            tm = TMClassifier(100, 1000, 5.0, patch_dim=(10, 10), platform="CPU", weighted_clauses=True)
            xtr, xte = xtr.reshape(-1, 28, 28), xte.reshape(-1, 28, 28)
        else:
            raise SystemExit(f"config {config} is not run with {peer}")
        fit = lambda: tm.fit(xtr, ytr)
        predict = lambda: tm.predict(xte)
    elif peer == "green-tsetlin":
        import green_tsetlin as gt

        if config != "coalesced1000":
            raise SystemExit(f"config {config} is not run with {peer}")
        # green-tsetlin's defaults: focused negative sampling, no true-positive boost.
        tm = gt.TsetlinMachine(n_literals=784, n_clauses=1000, n_classes=10, s=10.0, threshold=1000)
        trainer = gt.Trainer(tm, seed=1, n_jobs=1, n_epochs=epochs, progress_bar=False, load_best_state=False)
        trainer.set_train_data(xtr.astype(np.uint8), ytr)
        trainer.set_eval_data(xte.astype(np.uint8), yte)
        r = trainer.train()
        print(f"{peer} {config}")
        for epoch, (t, acc) in enumerate(zip(r["train_time_of_epochs"], r["eval_log"]), 1):
            print(f"epoch {epoch} train {t:.2f} s  test accuracy {100 * acc:.2f} %")
        return
    else:
        raise SystemExit(f"unknown peer {peer}")
    print(f"{peer} {config}")
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        fit()
        train = time.perf_counter() - start
        start = time.perf_counter()
        acc = 100 * (predict() == yte).mean()
        test = time.perf_counter() - start
        print(f"epoch {epoch} train {train:.2f} s  test accuracy {acc:.2f} %  inference {len(yte) / test:.0f} samples/s")


if __name__ == "__main__":
    main()
