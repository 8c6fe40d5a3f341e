#!/usr/bin/env python3
"""Runs the published FedTMOS server (shannonhsq/FedTMOS, `oneshotfedtmos.py`) on client machines
and prints its accuracy on the global test half: the code's own figure for those clients, to set
beside `flint replay` on the same ones. CLIENTS is either the machines saved by
`bench/fedtmos-code-client.py ... all --states FILE.npz` (the code's clients; their
`--updates` are the same machines for `flint replay`) or a Flint run directory that kept its
updates (Flint's clients). MNIST and Fashion-MNIST, each with the code's machine for it
(`MACHINES` in bench/fedtmos-code-client.py).

    bench/fedtmos-code-server.py FEDTMOS_CHECKOUT EXPERIMENT CLIENTS [--seed N]
        [--n-init 1|10] [--draws N]

The server's functions are taken from the checkout as they are (read from its source, not
copied): scaling, the vector filter and order, scikit-learn's k-means (`random_state` = the
code's `alg_seed` = 1), the reassignment with its fill, the averaging and the batch-wide vote
(docs/papers/fedtmos.md §6-§12). What the code does around them is done here as the code does
it:
- each machine as its upload leaves it: lower TA bit planes zeroed, classes not held zeroed;
- numpy's global generator in the state the code's `cls` split leaves it (seeded with the run's
  seed), since the vector order is drawn from it (`np.random.choice`, docs/papers/fedtmos.md
  §7);
- `--n-init`: the code does not pin scikit-learn; n_init is 1 from 1.4 on, 10 before.
`--draws N` also runs the server on N further vector orders (numpy seeded 1000, 1001, ...) to show
how much the order alone moves the result. Needs numpy, scikit-learn, gcc with OpenMP and
FLINT_DATA_DIR."""

import argparse
import ast
import contextlib
import copy
import importlib.util
import io
import itertools
import random
import re
import sys
import tomllib
from argparse import Namespace
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans

SERVER_FUNCTIONS = [
    "gini_index", "normalized_gini", "sum_models_scaled", "flatten_model_params_participation",
    "kmeans_clustering", "calculate_distance", "find_best_model_to_add_class",
    "cluster_global_model_best", "sorted_clusters", "combine_classes_into_models_by_distance_fill",
    "testing_global_model",
]


def client_script():
    path = Path(__file__).with_name("fedtmos-code-client.py")
    spec = importlib.util.spec_from_file_location("fedtmos_code_client", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def code_server(checkout, n_init):
    """The code's server functions, read from its driver (whose top level trains clients)."""
    source = (Path(checkout) / "oneshotfedtmos.py").read_text()
    tree = ast.parse(source)
    kept = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in SERVER_FUNCTIONS]
    missing = set(SERVER_FUNCTIONS) - {n.name for n in kept}
    if missing:
        sys.exit(f"the checkout's oneshotfedtmos.py lacks {sorted(missing)}")
    namespace = {
        "np": np, "copy": copy, "itertools": itertools, "random": random,
        "combinations": itertools.combinations, "ALG_SEED": 1,
        "KMeans": lambda **kw: KMeans(n_init=n_init, **kw),
        "args": Namespace(participation=1.0),
    }
    exec(compile(ast.Module(body=kept, type_ignores=[]), "oneshotfedtmos.py", "exec"), namespace)
    return namespace


def uploaded(ctm, spec, weights, ta, counts, probe):
    """A machine as the code's client leaves it after `handle_uploading` and `handle_non_iid`."""
    tm = ctm(spec["clauses"], 1000, 5.0, (spec["patch"],) * 2, weighted_clauses=True)
    tm.fit(probe, np.array([9], np.uint32), epochs=0, incremental=True)  # allocates 10 classes
    planes = tm.number_of_state_bits
    state = []
    for c in range(10):
        if counts[c] == 0:
            state.append((np.zeros_like(weights[c]), np.zeros_like(ta[c])))
            continue
        top = ta[c].reshape(-1, planes).copy()
        top[:, :planes - 1] = 0
        state.append((weights[c].copy(), np.ascontiguousarray(top.reshape(-1))))
    tm.set_state(state)
    return tm


def run_server(server, spec, k, machines, counts, xte, yte):
    """Steps 2-6 and the vote (the code's `--ensemble 0` path, `--k k`, `--c` the machine's φ);
    returns accuracy and models."""
    global_model = [[m] for m in machines]
    unique_counts = [c.astype(np.float64) for c in counts]
    ratio_count = [np.where(c > 0, 1, 0) for c in counts]
    mean_gini = np.mean([server["normalized_gini"](c / c.sum()) for c in unique_counts])
    mappings = []
    combine = server["combine_classes_into_models_by_distance_fill"]

    def recorded(*a, **kw):
        out = combine(*a, **kw)
        mappings.append(out)
        return out

    server["combine_classes_into_models_by_distance_fill"] = recorded
    with contextlib.redirect_stdout(io.StringIO()):
        scaled, weights = server["sum_models_scaled"](global_model, unique_counts, mean_gini,
                                                      dataset=spec["name"])
        models, _ = server["cluster_global_model_best"](weights, scaled, ratio_count,
                                                        unique_counts, k=k, c=[spec["models"]],
                                                        mean_gini=mean_gini, num_models=1)
        acc = server["testing_global_model"](models, [xte], yte, None, None, numclasses=10)
    server["combine_classes_into_models_by_distance_fill"] = combine
    return acc, mean_gini, mappings[-1]


def fields(buf):
    """A protobuf message's fields, as (number, value): ints for varints, bytes otherwise."""
    out, i = [], 0

    def varint():
        nonlocal i
        n = shift = 0
        while True:
            byte = buf[i]
            i += 1
            n |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return n

    while i < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 1:
            out.append((number, buf[i:i + 8]))
            i += 8
        elif wire == 2:
            n = varint()
            out.append((number, buf[i:i + n]))
            i += n
        else:
            sys.exit(f"unexpected protobuf wire type {wire}")
    return out


def varints(buf):
    """A packed repeated varint field."""
    values, n, shift = [], 0, 0
    for byte in buf:
        n |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            values.append(n)
            n = shift = 0
    return values


def from_flint(run_dir, helper, patch):
    """Flint's kept uploads (`TmUpload`, proto/flint/v1/aggregator.proto) as the code's states:
    weights per class, and TA states whose top bit plane holds the include bits (the literals
    moved back from Flint's order to the code's)."""
    to_flint, features, chunks = helper.literal_order(patch)
    saved = {}
    for path in sorted(Path(run_dir, "updates").glob("round-1-client-*.pb")):
        k = int(path.stem.rsplit("-", 1)[1])
        upload = dict(fields(path.read_bytes()))[7]
        model = [v for n, v in fields(upload) if n == 1][0]
        parts = fields(model)
        clauses = next(v for n, v in parts if n == 1)
        if next(v for n, v in parts if n == 2) != 2 * features:
            sys.exit(f"{path}: not the {2 * features} literals of {patch}×{patch} patches")
        if any(n == 6 for n, _ in parts):
            sys.exit(f"{path}: the machine travelled coded; run with --set fedtmos.coding=varint")
        held = [dict(fields(v)) for n, v in parts if n == 3]
        bits = [v for n, v in parts if n == 4]
        counts_held = varints(next(v for n, v in parts if n == 5))
        weights = np.zeros((10, clauses), np.uint32)
        ta = np.zeros((10, clauses * chunks * 8), np.uint32)
        counts = np.zeros(10, np.int64)
        for cls, packed, n in zip(held, bits, counts_held):
            c = cls.get(1, 0)
            zigzag = np.array(varints(cls.get(2, b"")), np.int64)
            weights[c] = (zigzag >> 1) ^ -(zigzag & 1)
            flat = np.unpackbits(np.frombuffer(packed, np.uint8), bitorder="little")
            flint_bits = flat[:clauses * 2 * features].reshape(clauses, 2 * features)
            code_bits = np.zeros((clauses, chunks * 32), np.uint64)
            code_bits[:, :2 * features] = flint_bits[:, to_flint]
            words = (code_bits.reshape(clauses, chunks, 32)
                     << np.arange(32, dtype=np.uint64)).sum(axis=2).astype(np.uint32)
            planes = np.zeros((clauses, chunks, 8), np.uint32)
            planes[:, :, 7] = words
            ta[c] = planes.reshape(-1)
            counts[c] = n
        saved[f"weights_{k}"], saved[f"ta_{k}"], saved[f"counts_{k}"] = weights, ta, counts
    if not saved:
        sys.exit(f"{run_dir}/updates holds no round-1 upload; run with server.keep_updates")
    return saved


def describe(mapping):
    """Each server model as its classes and who gives them (1-based clients)."""
    parts = []
    for model in mapping:
        classes = {}
        for client, held in model.items():
            for c in held:
                classes.setdefault(c, []).append(client + 1)
        parts.append("{" + ", ".join(f"{c}: {sorted(v)}" for c, v in sorted(classes.items()))
                     + "}")
    return " ".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout")
    parser.add_argument("experiment")
    parser.add_argument("clients", type=Path, help="STATES.npz or a Flint run directory")
    parser.add_argument("--seed", type=int, help="the run's seed (default: a Flint run's own, else the experiment's)")
    parser.add_argument("--n-init", type=int, default=1, choices=[1, 10])
    parser.add_argument("--draws", type=int, default=0)
    args = parser.parse_args()
    exp = tomllib.loads(Path(args.experiment).read_text())
    if exp["strategy"] != "fedtmos":
        sys.exit("needs a FedTMOS experiment")
    helper = client_script()
    spec = helper.machine(exp)
    if exp["fedtmos"].get("models", 4) != spec["models"]:
        sys.exit(f"the code's {spec['name']} runs use {spec['models']} server models "
                 f"(--c {spec['models']})")
    # The code's `--k`: Flint's experiment files carry it as k_max (10 for S(β), 30 for Dir).
    k = exp["fedtmos"].get("k_max", 30)
    seed = exp.get("seed", 0) if args.seed is None else args.seed
    if args.clients.is_dir():
        # A Flint run knows its seed: the vector order must be drawn from that one.
        ran = tomllib.loads((args.clients / "experiment.toml").read_text()).get("seed", 0)
        if args.seed is not None and args.seed != ran:
            sys.exit(f"--seed {args.seed} does not match the run's seed {ran}")
        seed = ran
    _, ytr, yte_all, xte, yte = helper.load(exp["data"]["source"])
    saved = (from_flint(args.clients, helper, spec["patch"]) if args.clients.is_dir()
             else dict(np.load(args.clients)))
    ids = sorted(int(k.split("_")[1]) for k in saved if k.startswith("counts_"))
    counts = [saved[f"counts_{k}"] for k in ids]
    ctm = helper.build(args.checkout)
    server = code_server(args.checkout, args.n_init)

    def machines():
        # The server scales the machines in place, so each run starts from fresh uploads.
        return [uploaded(ctm, spec, saved[f"weights_{j}"], saved[f"ta_{j}"],
                         saved[f"counts_{j}"], xte[:1]) for j in ids]

    # The code's `cls` split is the last user of numpy's generator before the vector order.
    if exp["partition"]["kind"] == "classes-per-client":
        helper.code_split(exp, ytr, yte_all, seed)
        order = f"numpy as the code's cls split leaves it (seed {seed})"
    else:
        # The code's `dir` split: numpy seeded with the run's seed, one Dirichlet draw over its
        # nominal 10 clients (docs/papers/fedtmos.md §16); the experiment's name says which.
        found = re.search(r"dir([0-9.]+)-s([0-9]+)$", exp["name"])
        if found is None:
            sys.exit("needs a `cls` experiment or one of experiments/fedtmos-code/numpy/")
        alpha = float(found[1])
        # The split is the named seed's: clients of another seed would meet another order.
        if int(found[2]) != seed:
            sys.exit(f"the experiment {exp['name']} is split with seed {found[2]}, not {seed}")
        np.random.seed(seed)
        np.random.dirichlet(np.repeat(alpha, 10), size=10)
        order = f"numpy as the code's dir split leaves it (seed {seed})"
    acc, mean_gini, mapping = run_server(server, spec, k, machines(), counts, xte, yte)
    print(f"{len(ids)} clients, mean normalized Gini {mean_gini:.3f}, n_init {args.n_init}")
    print(f"the code's server, vector order from {order}: {acc:.2f} %")
    print(f"  server models: {describe(mapping)}")
    for d in range(args.draws):
        np.random.seed(1000 + d)
        acc, _, mapping = run_server(server, spec, k, machines(), counts, xte, yte)
        print(f"order drawn from numpy seeded {1000 + d}: {acc:.2f} %  {describe(mapping)}",
              flush=True)


if __name__ == "__main__":
    main()
