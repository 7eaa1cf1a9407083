#!/usr/bin/env bash
# stop-recorded.sh NAME PIDFILE: stops the service whose pid a project script
# recorded in PIDFILE (SIGTERM, then SIGKILL after 5 s), and removes the record.
set -euo pipefail
name=$1
pidfile=$2
if [ -f "$pidfile" ]; then
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" || true
        echo "stopped $name (pid $pid)" >&2
    fi
    rm -f "$pidfile"
else
    echo "no $name recorded at $pidfile" >&2
fi
