#!/usr/bin/env bash
# Stops the Airflow processes that scripts/airflow/up.sh started (by their recorded
# pids, children included) and removes that instance's home (database, logs).
set -euo pipefail

cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_AIRFLOW_PORT:-28080}"
home="$cache/airflow-home-$port"

stop() {
    local pid=$1 child
    for child in $(pgrep -P "$pid" 2>/dev/null || true); do
        stop "$child"
    done
    kill "$pid" 2>/dev/null || true
}

for name in api-server scheduler dag-processor; do
    pidfile="$home/$name.pid"
    [ -f "$pidfile" ] || continue
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        stop "$pid"
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
        echo "stopped airflow $name (pid $pid)" >&2
    fi
    rm -f "$pidfile"
done
if [ "${TASKGATE_AIRFLOW_KEEP_HOME:-}" != "1" ] && [ -d "$home" ]; then
    rm -rf "$home"
fi
