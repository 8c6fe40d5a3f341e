#!/usr/bin/env bash
# Runs the compose federation to its end and exits with the server's status, following the
# server's log meanwhile. `up --abort-on-container-exit` cannot: the one-shot `certs` service
# exits first and would stop the federation before its first round.
#   bash deploy/compose-run.sh [docker-compose options, e.g. -p NAME or -f OVERRIDE.yml]
# FLINT_CLIENTS, FLINT_EXPERIMENT, FLINT_DATA_DIR, FLINT_RESULTS and FLINT_IMAGE as in
# docker-compose.yml. A server that crashes is restarted by Docker and resumes; the script waits
# for it to exit for good. Ctrl-C stops the federation. The containers stay for
# `docker-compose … logs`; `down -v` removes them.
set -euo pipefail
cd "$(dirname "$0")/.."
compose=(docker-compose -f deploy/docker-compose.yml "$@")
# The containers run as you, and write into a results directory you own (made here: one that
# Docker makes for a bind mount is root's).
export FLINT_UID="${FLINT_UID:-$(id -u)}" FLINT_GID="${FLINT_GID:-$(id -g)}"
results="${FLINT_RESULTS:-./results}"
case "$results" in /*) ;; *) results="deploy/$results" ;; esac
mkdir -p "$results"
# With Prometheus (`--profile monitoring`) the server keeps /metrics up a little after the run,
# so that the last scrape holds the final figures (Prometheus scrapes every 5 s).
monitoring=
case ",${COMPOSE_PROFILES:-}," in *,monitoring,*) monitoring=1 ;; esac
previous=
for arg in "$@"; do
  if [ "$previous" = --profile ] && [ "$arg" = monitoring ] || [ "$arg" = --profile=monitoring ]; then
    monitoring=1
  fi
  previous=$arg
done
if [ -n "$monitoring" ]; then
  export FLINT_METRICS_LINGER="${FLINT_METRICS_LINGER:-12}"
fi
follow=
stop() {
  [ -n "$follow" ] && kill "$follow" 2>/dev/null || true
  "${compose[@]}" stop -t 10 >/dev/null 2>&1 || true
}
trap 'stop; exit 130' INT TERM

if ! "${compose[@]}" up -d; then
  "${compose[@]}" logs --no-color --tail 50 server || true
  stop
  exit 1
fi
server=$("${compose[@]}" ps -q server)
if [ -z "$server" ]; then
  echo "compose-run: no server container" >&2
  stop
  exit 1
fi
"${compose[@]}" logs -f --no-color server &
follow=$!

# `docker wait` would return at a crash that Docker then restarts (restart: on-failure).
while :; do
  if ! state=$(docker inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$server"); then
    echo "compose-run: the server container is gone" >&2
    stop
    exit 1
  fi
  case "$state" in
    exited* | dead*) break ;;
  esac
  sleep 1
done
status=${state#* }
# The log follower ends with the container; give it a moment for the last lines.
sleep 1
kill "$follow" 2>/dev/null || true
# A client that is still retrying has nothing left to do.
"${compose[@]}" stop -t 10 client >/dev/null 2>&1 || true
echo "compose-run: the server exited with $status"
if [ -n "$monitoring" ]; then
  echo "compose-run: Prometheus keeps the run's metrics at http://127.0.0.1:${FLINT_PROMETHEUS_PORT:-9090} until \`down\`"
fi
exit "$status"
