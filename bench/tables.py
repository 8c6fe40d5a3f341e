#!/usr/bin/env python3
"""Every strategy at its defaults on six public tables, beside scikit-learn.

    python3 bench/tables.py [--out runs/tables] [--flint target/release/flint] [--seeds 1,2,3]

Needs scikit-learn and pandas (e.g. `python3 -m venv /tmp/sk && /tmp/sk/bin/pip install
scikit-learn pandas`, then run with /tmp/sk/bin/python) and FLINT_DATA_DIR holding the papers'
tables and sklearn-digits/. It
1. builds a data directory OUT/data: links to every folder of FLINT_DATA_DIR, scikit-learn's
   bundled iris and wine written as CSV into sklearn-bundled/, and a generated 26-class table
   into sklearn-generated/ (never into the repository);
2. runs `flint grid experiments/tables --resume` over it (resumable: finished runs are kept);
3. fits scikit-learn's majority class, logistic regression and random forest on the same tables
   (80/20 stratified splits, one per seed) and writes OUT/tables.md: one row per table, the
   mean client accuracy of every strategy's last round, a cell marked † where the run warned
   (its kinds listed below the table).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TABLES = ["breast-cancer", "adult", "magic", "digits", "iris", "wine"]
STRATEGIES = ["fedavg", "fedavg-ahp", "central-logreg", "blind-fcm", "blended-fcm", "tpfl",
              "fedtmos", "ensemble", "fedtm", "local-tm", "central-tm"]


def build_data_dir(source: pathlib.Path, out: pathlib.Path):
    from sklearn.datasets import load_iris, load_wine
    out.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        link = out / entry.name
        if entry.is_dir() and not link.exists():
            link.symlink_to(entry.resolve())
    bundled = out / "sklearn-bundled"
    bundled.mkdir(exist_ok=True)
    for name, load in [("iris", load_iris), ("wine", load_wine)]:
        d = load()
        header = [f.replace(" ", "_").replace("(", "").replace(")", "") for f in d.feature_names]
        lines = [",".join(header + ["class"])]
        for x, y in zip(d.data, d.target):
            lines.append(",".join(f"{v:g}" for v in x) + "," + str(d.target_names[y]))
        (bundled / f"{name}.csv").write_text("\n".join(lines) + "\n")
    write_classes26(out / "sklearn-generated")


def write_classes26(folder: pathlib.Path):
    """A 26-class table of 20,000 rows and 16 features (make_classification, seed 0): what the
    FCM and logistic regression defaults were sized on (bench/classes26.toml)."""
    from sklearn.datasets import make_classification
    folder.mkdir(exist_ok=True)
    x, y = make_classification(n_samples=20000, n_features=16, n_informative=12, n_redundant=2,
                               n_classes=26, n_clusters_per_class=1, random_state=0)
    lines = [",".join([f"f{i}" for i in range(16)] + ["label"])]
    lines += [",".join([f"{v:.4f}" for v in row] + [chr(65 + c)]) for row, c in zip(x, y)]
    (folder / "classes26.csv").write_text("\n".join(lines) + "\n")


def load_table(name: str, data: pathlib.Path):
    import numpy as np
    import pandas as pd
    if name == "breast-cancer":
        df = pd.read_csv(data / "breast-cancer-wisconsin/wdbc.data", header=None)
        return df.iloc[:, 2:].to_numpy(float), (df[1] == "M").to_numpy(int)
    if name == "magic":
        df = pd.read_csv(data / "magic-gamma-telescope/magic04.data", header=None)
        return df.iloc[:, :-1].to_numpy(float), (df.iloc[:, -1] == "g").to_numpy(int)
    if name == "adult":
        df = pd.read_csv(data / "adult/adult.data", header=None, skipinitialspace=True,
                         na_values="?")
        y = (df[14] == ">50K").to_numpy(int)
        x = pd.get_dummies(df.drop(columns=[14]), dummy_na=True).astype(float)
        return x.fillna(x.median()).to_numpy(), y
    if name == "digits":
        a = np.loadtxt(data / "sklearn-digits/digits.csv.gz", delimiter=",")
        return a[:, :-1], a[:, -1].astype(int)
    df = pd.read_csv(data / f"sklearn-bundled/{name}.csv")
    return df.iloc[:, :-1].to_numpy(float), pd.factorize(df.iloc[:, -1])[0]


def sklearn_baselines(data: pathlib.Path, seeds):
    import numpy as np
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    out = {}
    for table in TABLES:
        x, y = load_table(table, data)
        scores = {"majority": [], "sklearn LR": [], "sklearn RF": []}
        for seed in seeds:
            xa, xb, ya, yb = train_test_split(x, y, test_size=0.2, stratify=y, random_state=seed)
            scores["majority"].append(np.mean(yb == np.bincount(ya).argmax()))
            lr = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
            scores["sklearn LR"].append(lr.fit(xa, ya).score(xb, yb))
            rf = RandomForestClassifier(n_estimators=100, random_state=seed, n_jobs=1)
            scores["sklearn RF"].append(rf.fit(xa, ya).score(xb, yb))
        out[table] = {k: float(np.mean(v)) for k, v in scores.items()}
    return out


def flint_cells(runs: pathlib.Path, seeds):
    """Mean client accuracy of the last round, over the seeds; the last round's warnings."""
    cells = {}
    for table in TABLES:
        for strategy in STRATEGIES:
            accs, warned = [], set()
            for seed in seeds:
                name = f"{table}-{strategy}-s{seed}"
                path = runs / name / "results.json"
                if not path.exists():
                    continue
                r = json.loads(path.read_text())
                last = r["rounds"][-1]
                accs.append(last["mean"]["accuracy"])
                warned |= {w["kind"] for w in r.get("warnings", []) if w["round"] == last["round"]}
            if accs:
                cells[(table, strategy)] = (sum(accs) / len(accs), sorted(warned))
    return cells


def write_table(out: pathlib.Path, base, cells):
    cols = ["majority", "sklearn LR", "sklearn RF"] + STRATEGIES
    lines = ["| table | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    notes = []
    for table in TABLES:
        row = [f"{base[table][c]:.3f}" for c in cols[:3]]
        for s in STRATEGIES:
            acc, warned = cells.get((table, s), (None, []))
            row.append("—" if acc is None else f"{acc:.3f}" + ("†" if warned else ""))
            if warned:
                notes.append(f"- {table} {s}: {', '.join(warned)}")
        lines.append(f"| {table} | " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n\n† warned in its last round:\n" + "\n".join(notes) + "\n"
    (out / "tables.md").write_text(text)
    print(text)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="runs/tables")
    p.add_argument("--flint", default=str(ROOT / "target/release/flint"))
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--skip-grid", action="store_true")
    a = p.parse_args()
    out = pathlib.Path(a.out).resolve()
    source = pathlib.Path(os.environ.get("FLINT_DATA_DIR", ROOT.parent / "shared/data"))
    data = out / "data"
    build_data_dir(source, data)
    seeds = [int(s) for s in a.seeds.split(",")]
    if not a.skip_grid:
        cmd = [a.flint, "grid", str(ROOT / "experiments/tables"), "--resume", "--data-dir",
               str(data), "--runs-dir", str(out / "runs"), "--summary", str(out / "grid.md"),
               "--seeds", a.seeds]
        subprocess.run(cmd, check=True, stdout=sys.stderr)
    write_table(out, sklearn_baselines(data, seeds), flint_cells(out / "runs", seeds))


if __name__ == "__main__":
    main()
