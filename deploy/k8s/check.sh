#!/usr/bin/env bash
# Renders every kustomization here (base, overlays, reader) with Debian's kubectl 1.20
# (kustomize v2) and, where there is one, the machine's newer kubectl, and checks:
# both render the same; the output validates strictly against the Kubernetes schemas;
# the clients Job's completions, parallelism and flint/clients annotation agree with the
# server's and clients' client_count. No cluster is needed (none was used).
#   bash deploy/k8s/check.sh [VENV]   (a Python venv with kubernetes-validate; CI makes one)
set -euo pipefail
cd "$(dirname "$0")"
venv="${1:-${TMPDIR:-/tmp}/flint-ci-venv}"
cache="${TMPDIR:-/tmp}/flint-kubectl-1.20"
old="$cache/usr/bin/kubectl"
if [ ! -x "$old" ]; then
  # Unpacked, not installed: it would replace a newer kubectl the machine may have.
  mkdir -p "$cache" && (cd "$cache" && apt-get download -q kubernetes-client >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get download -q kubernetes-client; })
  dpkg -x "$cache"/kubernetes-client_*.deb "$cache"
fi
renderers=("$old")
if command -v kubectl >/dev/null && [ "$(command -v kubectl)" != "$old" ]; then
  renderers+=("$(command -v kubectl)")
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for dir in base parts/* overlays/* overlays/*/reader reader; do
  [ -f "$dir/kustomization.yaml" ] || continue
  name=${dir//\//-}
  for i in "${!renderers[@]}"; do
    "${renderers[$i]}" kustomize "$dir" > "$out/$name.$i.yaml" 2> "$out/$name.$i.err" ||
      { cat "$out/$name.$i.err"; echo "k8s: ${renderers[$i]} cannot render $dir" >&2; exit 1; }
  done
  # The oldest version with every field used here (Indexed Jobs, ttlSecondsAfterFinished,
  # seccompProfile) that we name in the README, and the newest the validator knows.
  for version in 1.27.0 ""; do
    "$venv/bin/kubernetes-validate" ${version:+-k "$version"} --strict --quiet "$out/$name.0.yaml"
  done
  # A reader renders beside the overlay it belongs to (overlays/X/reader: overlays-X.0.yaml).
  parent=$(dirname "$dir")
  "$venv/bin/python" - "$dir" "$out/${parent//\//-}.0.yaml" "$out/$name".*.yaml <<'PY'
import os, sys, yaml
dir, parent, files = sys.argv[1], sys.argv[2], sys.argv[3:]
load = lambda f: sorted((d for d in yaml.safe_load_all(open(f)) if d),
                        key=lambda d: (d["kind"], d["metadata"]["name"]))
docs = [load(f) for f in files]
if any(d != docs[0] for d in docs[1:]):
    sys.exit(f"k8s: {dir}: kustomize v2 and the newer kubectl render differently")
def pods(objects):
    for d in objects:
        spec = d["spec"]["template"]["spec"] if d["kind"] == "Job" else d["spec"] if d["kind"] == "Pod" else None
        if spec:
            yield d, spec
images = {c["image"] for _, spec in pods(docs[0]) for c in spec["containers"]}
said = [f"{len(docs[0])} objects"]
if dir.endswith("reader") and os.path.exists(parent):
    theirs = {c["image"] for _, spec in pods(load(parent)) for c in spec["containers"]}
    secrets = lambda objects: {s["name"] for _, spec in pods(objects) for s in spec.get("imagePullSecrets", [])}
    if images != theirs or secrets(docs[0]) != secrets(load(parent)):
        sys.exit(f"k8s: {dir}: the reader runs {sorted(images)} with pull secrets {sorted(secrets(docs[0]))}, "
                 f"its overlay {sorted(theirs)} with {sorted(secrets(load(parent)))}")
    said.append(f"the overlay's image {images.pop()}")
jobs = {d["metadata"]["name"]: d for d in docs[0] if d["kind"] == "Job"}
if "flint-clients" in jobs:
    c = jobs["flint-clients"]
    notes = c["metadata"]["annotations"]
    total, outside = int(notes["flint/clients"]), int(notes.get("flint/outside", "0"))
    inside = {"completions": c["spec"]["completions"], "parallelism": c["spec"]["parallelism"],
              "flint/clients - flint/outside": total - outside}
    counts = {}
    for job in jobs.values():
        for arg in job["spec"]["template"]["spec"]["containers"][0]["args"]:
            if arg.startswith("--set=client_count="):
                counts[job["metadata"]["name"]] = int(arg.split("=")[-1])
    if len(set(inside.values())) != 1 or set(counts.values()) != {total} or len(counts) != 2 or outside < 0:
        sys.exit(f"k8s: {dir}: the client count disagrees: {inside}, client_count {counts}, outside {outside}")
    cpu = lambda q: float(q[:-1]) / 1000 if q.endswith("m") else float(q)
    request = lambda job: sum(cpu(x["resources"]["requests"]["cpu"]) for x in job["spec"]["template"]["spec"]["containers"])
    cpus = request(jobs["flint-server"]) + inside["completions"] * request(c)
    said.append(f"{inside['completions']} clients inside, {outside} outside, {cpus:g} CPUs requested at once")
print(f"k8s: {dir}: {', '.join(said)}, valid")
PY
done
