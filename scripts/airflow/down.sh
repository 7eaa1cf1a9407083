#!/usr/bin/env bash
# Stops the Airflow processes that scripts/airflow/up.sh started (by their recorded
# pids, children included) and its PostgreSQL server, and removes that instance's
# home (logs) and database cluster.
set -euo pipefail

cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_AIRFLOW_PORT:-28080}"
home="$cache/airflow-home-$port"
pg_port="${TASKGATE_AIRFLOW_PG_PORT:-28432}"
pg_data="${TMPDIR:-/tmp}/taskgate-airflow-pg-$pg_port"

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

# The database goes last: the Airflow processes above are gone by now.
if [ -f "$pg_data/postmaster.pid" ]; then
    pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$pg_bin/pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null 2>&1 || true
    else
        "$pg_bin/pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    echo "stopped the Airflow PostgreSQL server (port $pg_port)" >&2
fi
if [ "${TASKGATE_AIRFLOW_KEEP_HOME:-}" != "1" ]; then
    rm -rf "$pg_data" "$pg_data.initdb.log"
fi
