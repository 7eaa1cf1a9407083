#!/usr/bin/env bash
# Starts the trace backend the telemetry tests read: Jaeger (built by
# scripts/jaeger/build.sh) with scripts/jaeger/config.yaml (OTLP in, memory storage, the
# query API), on 127.0.0.1, unless one this script started already answers; waits until
# its query API answers (a deadline, not a sleep). Prints `export` lines for
# scripts/test.sh to eval; everything else goes to stderr.
#
# Env: TASKGATE_JAEGER_QUERY_PORT      query API (HTTP) port (default 16696)
#      TASKGATE_JAEGER_QUERY_GRPC_PORT query API (gRPC) port (default query port - 1)
#      TASKGATE_JAEGER_OTLP_GRPC_PORT  OTLP/gRPC port (default 14317)
#      TASKGATE_JAEGER_OTLP_HTTP_PORT  OTLP/HTTP port (default OTLP gRPC port + 1)
#      TASKGATE_JAEGER_START_TIMEOUT   seconds to wait for it to answer (default 60)
# Exports: TASKGATE_JAEGER_URL (the query API), TASKGATE_JAEGER_OTLP_GRPC and
#          TASKGATE_JAEGER_OTLP_HTTP (the endpoints taskgate's [telemetry] points at).
# The run dir (log, pid file) is ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/jaeger/run-<query port>.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
export TASKGATE_JAEGER_QUERY_PORT="${TASKGATE_JAEGER_QUERY_PORT:-16696}"
export TASKGATE_JAEGER_QUERY_GRPC_PORT="${TASKGATE_JAEGER_QUERY_GRPC_PORT:-$((TASKGATE_JAEGER_QUERY_PORT - 1))}"
export TASKGATE_JAEGER_OTLP_GRPC_PORT="${TASKGATE_JAEGER_OTLP_GRPC_PORT:-14317}"
export TASKGATE_JAEGER_OTLP_HTTP_PORT="${TASKGATE_JAEGER_OTLP_HTTP_PORT:-$((TASKGATE_JAEGER_OTLP_GRPC_PORT + 1))}"
timeout="${TASKGATE_JAEGER_START_TIMEOUT:-60}"
query="http://127.0.0.1:$TASKGATE_JAEGER_QUERY_PORT"
run="$cache/jaeger/run-$TASKGATE_JAEGER_QUERY_PORT"
pidfile="$run/jaeger.pid"
logfile="$run/jaeger.log"

log() { printf '[jaeger-up] %s\n' "$*" >&2; }

# The query API answers, and the OTLP/HTTP receiver takes connections.
answers() {
    curl -fsS -o /dev/null --max-time 2 "$query/api/services" 2>/dev/null &&
        curl -sS -o /dev/null --max-time 2 "http://127.0.0.1:$TASKGATE_JAEGER_OTLP_HTTP_PORT/" 2>/dev/null
}

ours_running() { [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

bin_dir="$("$here/build.sh")"

mkdir -p "$run"
if ours_running && ! cmp -s "$bin_dir/.stamp" "$run/jaeger.stamp"; then
    log "the running Jaeger is from another build: restarting it"
    "$here/down.sh" >&2 || true
fi
if ours_running && answers; then
    log "already running (pid $(cat "$pidfile")) on $query"
else
    if ours_running; then
        log "pid $(cat "$pidfile") does not answer: stopping it"
        "$here/down.sh" >&2 || true
    fi
    log "starting $bin_dir/jaeger (query $query, OTLP gRPC :$TASKGATE_JAEGER_OTLP_GRPC_PORT, HTTP :$TASKGATE_JAEGER_OTLP_HTTP_PORT; log: $logfile)"
    t0=$(date +%s%N)
    # Its own session, so the shell that ran up.sh exiting does not stop it.
    setsid "$bin_dir/jaeger" --config "file:$here/config.yaml" >"$logfile" 2>&1 </dev/null &
    echo $! >"$pidfile"
    cp "$bin_dir/.stamp" "$run/jaeger.stamp"
    deadline=$(( $(date +%s) + timeout ))
    until answers; do
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            log "Jaeger exited; the end of its log:"
            tail -n 40 "$logfile" >&2
            rm -f "$pidfile"
            exit 1
        fi
        if (( $(date +%s) >= deadline )); then
            log "Jaeger did not answer within ${timeout}s; the end of its log:"
            tail -n 40 "$logfile" >&2
            "$here/down.sh" >&2 || true
            exit 1
        fi
        sleep 0.1
    done
    log "answering after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
fi

echo "export TASKGATE_JAEGER_URL=$query"
echo "export TASKGATE_JAEGER_OTLP_GRPC=http://127.0.0.1:$TASKGATE_JAEGER_OTLP_GRPC_PORT"
echo "export TASKGATE_JAEGER_OTLP_HTTP=http://127.0.0.1:$TASKGATE_JAEGER_OTLP_HTTP_PORT"
