#!/usr/bin/env python3
"""The compose federation (deploy/docker-compose.yml) under emulated links and with and without
TLS: per setting, the mean round time, the time to the final accuracy, and the bytes per client
and round at the socket and link levels, as the clients counted them.

    deploy/build-image.sh && bench/netem-compose.py [--settings plain,tls,lan,wan,mobile]

Settings: `plain` (no TLS), `tls` (mutual TLS), and `lan`, `wan`, `mobile` (mutual TLS over the
deploy/netem.sh profile on every client container), plus `loopback` (`flint run`, mutual TLS, processes
on the host, no containers) and `relay-lan`, `relay-wan`, `relay-mobile` (`flint run
--link PROFILE`: the same on loopback, every client behind its own user-space link of that
profile's bandwidth and delay, no loss; for kernels without netem). `--experiment` runs another
experiment in the loopback and relay settings (e.g. tests/behaviour/tpfl-mnist.toml, with
FLINT_DATA_DIR set). The clients start first and retry until the server is up, so the
link is in place before their first byte. Writes runs/netem/<setting>/ and prints a Markdown
table. Needs root, Docker, docker-compose, tc and nsenter.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compose(project, setting, results, image, *args, capture=False):
    files = ["-f", "deploy/docker-compose.yml"]
    if setting == "plain":
        files += ["-f", "deploy/docker-compose.plaintext.yml"]
    env = dict(os.environ, FLINT_RESULTS=str(results), FLINT_IMAGE=image)
    out = subprocess.run(["docker-compose", "-p", project, *files, *args], cwd=ROOT, env=env,
                         check=True, capture_output=True, text=True)
    return out.stdout if capture else None


def wait_exit(container, limit):
    start = time.time()
    while time.time() - start < limit:
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", container],
                               capture_output=True, text=True, check=True).stdout.split()
        if state[0] == "exited":
            return int(state[1])
        time.sleep(0.5)
    raise SystemExit(f"{container} still running after {limit} s")


def run_compose(setting, results, image):
    project = f"flintnet{setting}"
    profile = setting if setting in ("lan", "wan", "mobile") else None
    try:
        compose(project, setting, results, image, "up", "-d", "certs")
        certs = compose(project, setting, results, image, "ps", "-q", "certs", capture=True).split()
        wait_exit(certs[0], 60)
        compose(project, setting, results, image, "up", "-d", "--no-deps", "client")
        clients = compose(project, setting, results, image, "ps", "-q", "client", capture=True).split()
        if profile:
            subprocess.run([str(ROOT / "deploy/netem.sh"), profile, *clients], check=True,
                           capture_output=True)
        compose(project, setting, results, image, "up", "-d", "--no-deps", "server")
        server = compose(project, setting, results, image, "ps", "-q", "server", capture=True).split()
        code = wait_exit(server[0], 1800)
        if code != 0:
            raise SystemExit(f"{setting}: the server exited with {code}")
        for c in clients:
            wait_exit(c, 60)
    finally:
        compose(project, setting, results, image, "down", "-v", "-t", "2")


def run_loopback(results, experiment, link=None, per_process=1):
    runs = results.parent / f"{results.name}-runs"
    extra = ["--link", link] if link else []
    subprocess.run(["cargo", "run", "-q", "--release", "-p", "flint", "--", "run", "--runs-dir",
                    str(runs), "--clients-per-process", str(per_process), *extra, experiment],
                   cwd=ROOT, check=True, capture_output=True)
    if results.exists():
        subprocess.run(["rm", "-rf", str(results)], check=True)
    (run,) = [d for d in runs.iterdir() if d.is_dir()]
    run.rename(results)
    runs.rmdir()


def figures(results):
    r = json.loads((results / "results.json").read_text())
    ledgers = {}
    for p in sorted((results / "clients").glob("*.json")):
        c = json.loads(p.read_text())
        ledgers[c["client_id"]] = c["ledger"]["flows"][str(c["client_id"])]
    if not ledgers:
        ledgers = {int(k): v for k, v in r.get("client_ledgers", {}).items()}
        ledgers = {k: v["flows"][str(k)] for k, v in ledgers.items()}
    rounds = [rr for rr in r["rounds"] if rr["round"] >= 1]
    seconds = [rr["seconds"] for rr in rounds]
    final = rounds[-1]["mean"]["accuracy"]
    elapsed, to_final = 0.0, None
    for rr, s in zip(rounds, seconds):
        elapsed += s
        if to_final is None and rr["mean"]["accuracy"] >= final - 0.001:
            to_final = elapsed

    def per_round(level, direction):
        values = [f[direction][level] for flows in ledgers.values()
                  for rnd, f in flows.items() if int(rnd) >= 1]
        return statistics.mean(values)

    def join(level):
        return statistics.mean(f["0"]["up"][level] + f["0"]["down"][level] for f in ledgers.values())

    return {
        "round_s": statistics.mean(seconds),
        "total_s": sum(seconds),
        "to_final_s": to_final,
        "accuracy": final,
        "socket_up": per_round("socket", "up"), "socket_down": per_round("socket", "down"),
        "link_up": per_round("link", "up"), "link_down": per_round("link", "down"),
        "join_socket": join("socket"), "join_link": join("link"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="loopback,plain,tls,lan,wan,mobile")
    ap.add_argument("--image", default="flint:latest")
    ap.add_argument("--out", default=str(ROOT / "runs/netem"))
    ap.add_argument("--experiment", default="experiments/compose.toml",
                    help="for the loopback and relay settings")
    ap.add_argument("--clients-per-process", type=int, default=1)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    rows = []
    for setting in args.settings.split(","):
        results = out / setting
        if not (results / "results.json").exists():
            print(f"running {setting} …", file=sys.stderr)
            results.mkdir(parents=True, exist_ok=True)
            if setting == "loopback":
                run_loopback(results, args.experiment, per_process=args.clients_per_process)
            elif setting.startswith("relay-"):
                run_loopback(results, args.experiment, setting.removeprefix("relay-"),
                             args.clients_per_process)
            else:
                run_compose(setting, results, args.image)
        rows.append((setting, figures(results)))
    print("| setting | mean round (s) | all rounds (s) | to final accuracy (s) | accuracy | "
          "socket up / down (B per client-round) | link up / down | join: socket / link (B per client) |")
    print("|---|---|---|---|---|---|---|---|")
    for setting, f in rows:
        link = (f"{f['link_up']:.0f} / {f['link_down']:.0f}" if f["link_up"] else "not measured")
        join_link = f"{f['join_link']:.0f}" if f["join_link"] else "-"
        print(f"| {setting} | {f['round_s']:.3f} | {f['total_s']:.2f} | {f['to_final_s']:.2f} | "
              f"{f['accuracy']:.4f} | {f['socket_up']:.0f} / {f['socket_down']:.0f} | {link} | "
              f"{f['join_socket']:.0f} / {join_link} |")


if __name__ == "__main__":
    main()
