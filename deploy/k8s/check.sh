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
for dir in base overlays/* reader; do
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
  "$venv/bin/python" - "$dir" "$out/$name".*.yaml <<'PY'
import sys, yaml
dir, files = sys.argv[1], sys.argv[2:]
docs = [sorted((d for d in yaml.safe_load_all(open(f)) if d), key=lambda d: (d["kind"], d["metadata"]["name"]))
        for f in files]
if any(d != docs[0] for d in docs[1:]):
    sys.exit(f"k8s: {dir}: kustomize v2 and the newer kubectl render differently")
jobs = {d["metadata"]["name"]: d for d in docs[0] if d["kind"] == "Job"}
if "flint-clients" in jobs:
    c = jobs["flint-clients"]
    want = {"completions": c["spec"]["completions"], "parallelism": c["spec"]["parallelism"],
            "flint/clients": int(c["metadata"]["annotations"]["flint/clients"])}
    for job in jobs.values():
        for arg in job["spec"]["template"]["spec"]["containers"][0]["args"]:
            if arg.startswith("--set=client_count="):
                want[job["metadata"]["name"] + " client_count"] = int(arg.split("=")[-1])
    if len(set(want.values())) != 1 or len(want) != 5:
        sys.exit(f"k8s: {dir}: the client count disagrees: {want}")
    print(f"k8s: {dir}: {len(docs[0])} objects, {want['completions']} clients, valid")
else:
    print(f"k8s: {dir}: {len(docs[0])} objects, valid")
PY
done
