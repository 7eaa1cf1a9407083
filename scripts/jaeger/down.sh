#!/usr/bin/env bash
# Stops the Jaeger scripts/jaeger/up.sh started on ${TASKGATE_JAEGER_QUERY_PORT:-16696}
# (its pid file); SIGTERM, then SIGKILL after 10 s. Quiet and successful when none runs.
set -euo pipefail
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_JAEGER_QUERY_PORT:-16696}"
pidfile="$cache/jaeger/run-$port/jaeger.pid"
[[ -f "$pidfile" ]] || exit 0
pid="$(cat "$pidfile")"
if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "[jaeger-down] pid $pid did not stop in 10s: SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
fi
rm -f "$pidfile"
