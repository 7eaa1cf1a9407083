#!/usr/bin/env bash
# Stops the Temporal server scripts/temporal/up.sh started on ${TASKGATE_TEMPORAL_PORT:-17233}
# (its pid file); SIGTERM, then SIGKILL after 15 s. Quiet and successful when none runs.
set -euo pipefail
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_TEMPORAL_PORT:-17233}"
pidfile="$cache/temporal/run-$port/server.pid"
[[ -f "$pidfile" ]] || exit 0
pid="$(cat "$pidfile")"
if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "[temporal-down] pid $pid did not stop in 15s: SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
fi
rm -f "$pidfile"
