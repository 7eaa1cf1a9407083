#!/usr/bin/env bash
# Stops the moto_server that scripts/moto/up.sh started (by its recorded pid).
set -euo pipefail

cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_MOTO_PORT:-5005}"
pidfile="$cache/moto-$port.pid"

if [ -f "$pidfile" ]; then
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" || true
        echo "stopped moto_server (pid $pid)" >&2
    fi
    rm -f "$pidfile"
else
    echo "no moto_server recorded for port $port" >&2
fi
