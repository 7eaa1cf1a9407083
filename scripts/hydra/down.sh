#!/usr/bin/env bash
# Stops the hydra that scripts/hydra/up.sh started (by its recorded pid).
set -euo pipefail

cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_HYDRA_PORT:-4444}"
pidfile="$cache/hydra-$port.pid"

if [ -f "$pidfile" ]; then
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" || true
        echo "stopped hydra (pid $pid)" >&2
    fi
    rm -f "$pidfile"
else
    echo "no hydra recorded for port $port" >&2
fi
