#!/usr/bin/env python3
"""Writes experiments/fedtmos-baselines/: FedTMOS Table 1's one-shot CNN baselines on MNIST and
Fashion-MNIST, each cell (Dir(0.05 / 0.1 / 0.3), S(2 / 3 / 4), the partitions of
experiments/fedtmos/) once per network: LeNet-5 (FedAvg, Fed-OneShot, DENSE) and CNN2
(OT-Fusion, RegMean, FedFisher, every statistic uploaded). Run from the repository root:

    python3 scripts/fedtmos-baselines-experiments.py
"""
import os

# (file stem, [partition] lines, the paper's name)
PARTS = [
    ("dir0.05", 'kind = "dirichlet-by-class"\nalpha = 0.05', "Dir(0.05)"),
    ("dir0.1", 'kind = "dirichlet-by-class"\nalpha = 0.1', "Dir(0.1)"),
    ("dir0.3", 'kind = "dirichlet-by-class"\nalpha = 0.3', "Dir(0.3)"),
    ("s2", 'kind = "classes-per-client"\nbeta = 2', "S(2)"),
    ("s3", 'kind = "classes-per-client"\nbeta = 3', "S(3)"),
    ("s4", 'kind = "classes-per-client"\nbeta = 4', "S(4)"),
]
SETS = [("mnist", "mnist", "MNIST"), ("fmnist", "fashion-mnist", "Fashion-MNIST")]
# network: (cnn.architecture, the run's rule, oneshot.uploads, what the file says of it)
GROUPS = {
    "lenet5": (
        "lenet5",
        "fedavg",
        "rule",
        "FedTMOS §5's CNN (LeNet-5, Dai et al. 2024): the network of Table 1's FedAvg, Fed-OneShot\n"
        "# and distillation columns. Trained once; `flint replay --set oneshot.rule=ensemble` gives\n"
        "# Fed-OneShot on the same uploads.",
    ),
    "cnn2": (
        "cnn2",
        "regmean",
        "every-rule",
        "FedTMOS Table 7's CNN2 (Jhunjhunwala et al.'s bias-free LeNet): the network of Table 1's\n"
        "# OT-Fusion, RegMean and FedFisher columns. The clients upload both statistics, so\n"
        "# `flint replay --set oneshot.rule=fedfisher` (or ot-fusion, fedavg) runs every rule on one\n"
        "# training.",
    ),
}
os.makedirs('experiments/fedtmos-baselines', exist_ok=True)
for sk, source, sname in SETS:
    for pk, ptoml, pname in PARTS:
        assert os.path.exists(f'experiments/fedtmos/{sk}-{pk}.toml')
        for g, (arch, rule, uploads, doc) in GROUPS.items():
            text = f'''# One-shot FL of a CNN on FedTMOS's {sname} {pname} cell (FedTMOS Table 1's CNN baselines).
# Written by scripts/fedtmos-baselines-experiments.py; edit the script, not this file.
# 10 clients, one round, 30 local epochs, batch 128, SGD lr 0.01 with momentum 0.9, measured on
# FedTMOS's global test set.
# {doc}
# The partition is experiments/fedtmos/{sk}-{pk}.toml's.
name = "oneshot-{g}-{sk}-{pk}"
strategy = "oneshot-cnn"
seed = 0
rounds = 1
client_count = 10

[server]
round_timeout_secs = 3600
eval_timeout_secs = 900
keep_updates = true

[data]
source = "{source}"

[partition]
{ptoml}

[cnn]
architecture = "{arch}"
local_epochs = 30
batch_size = 128
learning_rate = 0.01
momentum = 0.9
global_test = true

[oneshot]
rule = "{rule}"
uploads = "{uploads}"
'''
            with open(f'experiments/fedtmos-baselines/{sk}-{pk}-{g}.toml', 'w') as f:
                f.write(text)
