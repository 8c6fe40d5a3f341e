#!/usr/bin/env python3
"""Writes experiments/table5/: TPFL's Table 5 (§6.8) on one wire — FedAvg, FedProx, IFCA and
FLIS (DC and HC) of FLIS's LeNet beside TPFL — on TPFL §6.3's experiment 5 (100 clients, none IID: Dirichlet α = 0.05),
MNIST and Fashion-MNIST, seed 1, 10 rounds.

Scaled down from TPFL Table 2 so that a run takes minutes on 2 cores, the same for every
strategy: 600 training rows per client (not 30,000), 1,000 test rows, and 2 local epochs for
the networks (TPFL §6.5: 10). At Table 2's sizes a network federation is ~20 hours per run here
(100 clients × 30,000 rows × 10 epochs × 10 rounds at ~1,800 samples/s on one core). TPFL keeps
its own Table 2 machine (300 / 500 clauses, T = 1000, s = 10) and 10 local epochs, on the same
rows."""

from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "experiments" / "table5"
SETS = {"mnist": ("mnist", 300), "fmnist": ("fashion-mnist", 500)}
SAMPLES, TEST, EPOCHS = 600, 1000, 2


# The file's name after the data's, its strategy, and the strategy's own section.
RUNS = [
    ("tpfl", "tpfl", []),
    ("fedavg-cnn", "fedavg-cnn", []),
    ("fedprox", "fedprox", ["[fedprox]", "mu = 0.1"]),
    ("ifca", "ifca", ["[ifca]", "clusters = 4"]),
    ("flis-dc", "flis", ["[flis]", 'variant = "dc"']),
    ("flis-hc", "flis", ["[flis]", 'variant = "hc"']),
]


def experiment(short, source, clauses, run, strategy, section):
    lines = [
        f"# TPFL Table 5 on {source}, experiment 5 (0 of 100 clients IID, α = 0.05), scaled down:",
        f"# {SAMPLES} training rows per client. Written by scripts/table5-experiments.py.",
        f'name = "table5-{short}-{run}"',
        f'strategy = "{strategy}"',
        "seed = 1",
        "rounds = 10",
        "client_count = 100",
        "",
        "[server]",
        "round_timeout_secs = 3600",
        "",
        "[data]",
        f'source = "{source}"',
        "",
        "[partition]",
        'kind = "dirichlet"',
        f"samples = {SAMPLES}",
        "iid_clients = 0",
        "",
    ]
    if strategy == "tpfl":
        lines += [
            "[tm]",
            f"clauses = {clauses}",
            "t = 1000",
            "s = 10",
            "",
            "[tpfl]",
            "local_epochs = 10",
            f"test_samples = {TEST}",
            f"confidence_samples = {TEST}",
        ]
    else:
        lines += ["[cnn]", f"local_epochs = {EPOCHS}", f"test_samples = {TEST}"]
        if section:
            lines += [""] + section
    return "\n".join(lines) + "\n"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for short, (source, clauses) in SETS.items():
        for run, strategy, section in RUNS:
            path = OUT / f"{short}-{run}.toml"
            path.write_text(experiment(short, source, clauses, run, strategy, section))
            print(path.relative_to(OUT.parent.parent))


if __name__ == "__main__":
    main()
