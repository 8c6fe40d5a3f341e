#!/usr/bin/env bash
# Runs the compose federation to its end and exits with the server's status, following the
# server's log meanwhile. `up --abort-on-container-exit` cannot: the one-shot `certs` service
# exits first and would stop the federation before its first round.
#   bash deploy/compose-run.sh [docker-compose options, e.g. -p NAME]
# FLINT_CLIENTS, FLINT_EXPERIMENT, FLINT_DATA_DIR, FLINT_RESULTS and FLINT_IMAGE as in
# docker-compose.yml. The containers stay for `docker-compose … logs`; `down -v` removes them.
set -euo pipefail
cd "$(dirname "$0")/.."
compose=(docker-compose "$@" -f deploy/docker-compose.yml)
"${compose[@]}" up -d
server=$("${compose[@]}" ps -q server)
"${compose[@]}" logs -f --no-color server &
follow=$!
status=$(docker wait "$server")
kill "$follow" 2>/dev/null || true
# A client that is still retrying has nothing left to do.
"${compose[@]}" stop -t 10 client >/dev/null 2>&1 || true
echo "compose-run: the server exited with $status"
exit "$status"
