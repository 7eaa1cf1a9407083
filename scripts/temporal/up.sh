#!/usr/bin/env bash
# Starts the Temporal server the Temporal engine's tests run against (built by
# scripts/temporal/build.sh, on an in-memory SQLite store) on 127.0.0.1, unless one this
# script started already answers on that port; waits until its frontend answers and its
# namespaces are served (a deadline, not a sleep); prepares the Python environment of the
# test workers (scripts/temporal/python-setup.sh). Prints `export` lines for
# scripts/test.sh to eval; everything else goes to stderr.
#
# Env: TASKGATE_TEMPORAL_PORT          frontend gRPC port (default 17233); the server also
#                                      takes port+1..port+3 (history, matching, worker)
#      TASKGATE_TEMPORAL_HTTP_PORT     frontend HTTP API port (default port+10)
#      TASKGATE_TEMPORAL_METRICS_PORT  Prometheus metrics port (default port+20)
#      TASKGATE_TEMPORAL_NAMESPACE     the namespace the tests use (default taskgate-test;
#                                      `default` exists too)
#      TASKGATE_TEMPORAL_START_TIMEOUT seconds to wait for it to answer (default 90)
#      TASKGATE_TEMPORAL_DB_FILE=1     keep the store in a file in the run dir (default: memory)
# The run dir (log, pid file) is ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/temporal/run-<port>.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_TEMPORAL_PORT:-17233}"
http_port="${TASKGATE_TEMPORAL_HTTP_PORT:-$((port + 10))}"
metrics_port="${TASKGATE_TEMPORAL_METRICS_PORT:-$((port + 20))}"
namespace="${TASKGATE_TEMPORAL_NAMESPACE:-taskgate-test}"
timeout="${TASKGATE_TEMPORAL_START_TIMEOUT:-90}"
run="$cache/temporal/run-$port"
pidfile="$run/server.pid"
logfile="$run/server.log"

log() { printf '[temporal-up] %s\n' "$*" >&2; }

# The frontend answers (over its HTTP API, which calls the gRPC handlers in process)
# and serves every namespace the tests use.
answers() {
    local ns
    for ns in default "$namespace"; do
        curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$http_port/api/v1/namespaces/$ns" 2>/dev/null || return 1
    done
    curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$metrics_port/metrics" 2>/dev/null
}

ours_running() { [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

bin_dir="$("$here/build.sh")"
py="$("$here/python-setup.sh" | tail -n 1)"

mkdir -p "$run"
# A server started from an older build is replaced.
if ours_running && ! cmp -s "$bin_dir/.stamp" "$run/server.stamp"; then
    log "the running server is from another build: restarting it"
    "$here/down.sh" >&2 || true
fi
if ours_running && answers; then
    log "already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"
else
    if ours_running; then
        log "pid $(cat "$pidfile") does not answer: stopping it"
        "$here/down.sh" >&2 || true
    fi
    args=(-ip 127.0.0.1 -port "$port" -http-port "$http_port" -metrics-port "$metrics_port"
          -namespace default -namespace "$namespace")
    if [[ "${TASKGATE_TEMPORAL_DB_FILE:-0}" == 1 ]]; then
        rm -f "$run/store.db"
        args+=(-db-file "$run/store.db")
    fi
    log "starting $bin_dir/taskgate-temporal-server on 127.0.0.1:$port (log: $logfile)"
    t0=$(date +%s%N)
    # Its own session, so the shell that ran up.sh exiting does not stop it.
    setsid "$bin_dir/taskgate-temporal-server" "${args[@]}" >"$logfile" 2>&1 </dev/null &
    echo $! >"$pidfile"
    cp "$bin_dir/.stamp" "$run/server.stamp"
    deadline=$(( $(date +%s) + timeout ))
    until answers; do
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            log "the server exited; the end of its log:"
            tail -n 40 "$logfile" >&2
            rm -f "$pidfile"
            exit 1
        fi
        if (( $(date +%s) >= deadline )); then
            log "the server did not answer within ${timeout}s; the end of its log:"
            tail -n 40 "$logfile" >&2
            "$here/down.sh" >&2 || true
            exit 1
        fi
        sleep 0.1
    done
    log "answering after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
fi

echo "export TASKGATE_TEMPORAL_ADDRESS=127.0.0.1:$port"
echo "export TASKGATE_TEMPORAL_HTTP=http://127.0.0.1:$http_port"
echo "export TASKGATE_TEMPORAL_METRICS=http://127.0.0.1:$metrics_port/metrics"
echo "export TASKGATE_TEMPORAL_NAMESPACE=$namespace"
echo "export TASKGATE_TEMPORAL_PYTHON=$py"
echo "export TASKGATE_TEMPORAL_WORKER=$root/tests/temporal/worker.py"
