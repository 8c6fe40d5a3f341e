#!/usr/bin/env python3
"""The ensemble's model files: runs experiments/ensemble/*.toml with flint,
then prints per table the bytes of models/ (format version 2: each machine stored once), that
size over one composite (the stored machines plus one client's file), the version 1 size
rebuilt from the same files (every client's file with its machines inline, pretty-printed, and
a checkpoint per machine per client, as version 1 wrote them), and `flint explain`'s time.

    FLINT_DATA_DIR=/path/to/data python3 bench/model-files.py   # FLINT=target/release/flint
"""
import glob
import json
import os
import subprocess
import sys
import time

FLINT = os.environ.get("FLINT", "target/release/flint")
RUNS = os.environ.get("RUNS", "runs")


def size(path):
    return os.path.getsize(path)


def measure(run):
    models = os.path.join(run, "models")
    machines = os.path.join(models, "machines")
    after = sum(size(p) for p in glob.glob(models + "/**", recursive=True) if os.path.isfile(p))
    stored = sum(size(p) for p in glob.glob(machines + "/*"))
    clients = sorted(glob.glob(models + "/client-*.json"))
    one = stored + size(clients[0])
    before = 0
    for path in clients:
        with open(path) as f:
            m = json.load(f)
        ids = m["model"].pop("stored")
        inline = []
        for i in ids:
            with open(os.path.join(machines, i + ".json")) as f:
                inline.append(json.load(f))
        m["model"]["machines"], m["version"] = inline, 1
        before += len(json.dumps(m, indent=2).encode())
        before += sum(size(os.path.join(machines, i + ".tm")) for i in ids)
    start = time.monotonic()
    subprocess.run([FLINT, "explain", run], check=True, stdout=subprocess.DEVNULL)
    return after, after / one, before, time.monotonic() - start


def main():
    print("| experiment | version 1 (rebuilt) | version 2 | ÷ one composite | flint explain |")
    print("|---|---|---|---|---|")
    for exp in sorted(glob.glob("experiments/ensemble/*.toml")):
        subprocess.run([FLINT, "run", exp, "--runs-dir", RUNS], check=True, stdout=subprocess.DEVNULL)
        name = "ensemble-" + os.path.basename(exp)[: -len(".toml")]
        after, ratio, before, seconds = measure(os.path.join(RUNS, name))
        print(f"| {name} | {before / 1e6:.1f} MB | {after / 1e6:.2f} MB | {ratio:.2f} | {seconds:.2f} s |")


if __name__ == "__main__":
    sys.exit(main())
