#!/usr/bin/env bash
# Listen at scale: N `subscriptions/listen` streams on one taskgate, one command.
#
#   scripts/bench-listen.sh                          # N = 1000 and 10000, both shapes, 60 s idle
#   BENCH_LISTEN_N="100 1000" scripts/bench-listen.sh
#   BENCH_LISTEN_IDLE=30s scripts/bench-listen.sh    # the idle window (keep-alive every 15 s)
#   BENCH_LISTEN_SHAPES=shared scripts/bench-listen.sh
#   BENCH_LISTEN_HTTP=2 scripts/bench-listen.sh      # h2c only (default "1 2": both)
#   BENCH_LISTEN_PER_CONN=100 scripts/bench-listen.sh  # h2c streams per connection
#   BENCH_LISTEN_OWN_MAX=10000 scripts/bench-listen.sh   # allow 10,000 exec runs (see below)
#   BENCH_TASKGATE=/path/to/taskgate scripts/bench-listen.sh   # measure another build
#   BENCH_LISTEN_ENGINE=stepfunctions BENCH_LISTEN_SFN_ARN=arn:… BENCH_LISTEN_N=100 \
#     scripts/bench-listen.sh   # the same on Step Functions (moto: eval "$(scripts/moto/up.sh)";
#                               # a Standard state machine whose execution waits long)
#
# For each N and shape, a fresh taskgate (release build, one exec tool whose
# run sleeps an hour; bounds sized for N) on loopback, and the driver
# scripts/bench/listen (Go standard library, the scripts/bench module; built
# here with `go build`):
#
#   shared  one run, all N streams on it (one shared watch)
#   own     N runs, one stream each (N watches, N exec supervisors)
#
# and over each HTTP version of BENCH_LISTEN_HTTP: 1, each stream its own
# HTTP/1.1 connection; 2, h2c (server.http2 = true) with BENCH_LISTEN_PER_CONN
# streams per connection (also the server's http2_max_concurrent_streams).
#
# It opens the N streams, lets them idle, then cancels the runs, and prints one
# line per row: taskgate's RSS before and with the streams (bytes per stream),
# its file descriptors and inotify watches, its CPU-seconds during the idle
# window (from /proc), the engine calls during it (taskgate's /metrics, by
# operation), the keep-alive bytes sent, the time from each run's cancel to
# its stream's last notification (p50/p99/max), and taskgate's CPU from the
# cancels to the streams' ends (per stream: what fanning a change out costs the
# server; less swayed by a loaded machine than the latencies are).
#
# The own shape needs two processes per run (a supervisor and the tool's
# process): it is run only for N up to BENCH_LISTEN_OWN_MAX (default 1000),
# since 10,000 runs take 20,000 process ids (Linux's default pid_max is
# 32768) and the memory of 10,000 supervisors.
# Numbers belong in the README and issue notes, never in test assertions.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
counts=${BENCH_LISTEN_N:-1000 10000}
shapes=${BENCH_LISTEN_SHAPES:-shared own}
idle=${BENCH_LISTEN_IDLE:-60s}
own_max=${BENCH_LISTEN_OWN_MAX:-1000}
keep_alive=${BENCH_LISTEN_KEEP_ALIVE:-15s}
engine=${BENCH_LISTEN_ENGINE:-exec}
poll=${BENCH_LISTEN_POLL:-5s}
versions=${BENCH_LISTEN_HTTP:-1 2}
per_conn=${BENCH_LISTEN_PER_CONN:-100}
case "$engine" in
    exec) ;;
    stepfunctions)
        : "${TASKGATE_MOTO_URL:?Step Functions rows need TASKGATE_MOTO_URL (scripts/moto/up.sh)}"
        : "${BENCH_LISTEN_SFN_ARN:?Step Functions rows need BENCH_LISTEN_SFN_ARN, a Standard state machine}"
        export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-testing} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-testing}
        export AWS_REGION=${AWS_REGION:-us-east-1} AWS_EC2_METADATA_DISABLED=true
        ;;
    *) echo "BENCH_LISTEN_ENGINE is exec or stepfunctions" >&2; exit 2 ;;
esac

command -v go >/dev/null || { echo "bench-listen needs a Go toolchain for its driver (scripts/bench/listen)" >&2; exit 1; }
bin="${BENCH_TASKGATE:-$root/target/release/taskgate}"
if [ -z "${BENCH_TASKGATE:-}" ]; then
    cargo build --release --quiet --bin taskgate
fi

work=$(mktemp -d)
tg_pid=
cleanup() {
    [ -n "$tg_pid" ] && kill "$tg_pid" 2>/dev/null || true
    # The runs' supervisors and processes run detached: stop them too, the
    # processes first (a process outlives its killed supervisor).
    for s in $(pgrep -f "$work/spool" 2>/dev/null); do pkill -P "$s" 2>/dev/null || true; done
    pkill -f "$work/spool" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
(cd scripts/bench && go build -o "$work/listen" ./listen)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The engine and its one tool, `bench_tool`, whose runs last an hour.
engine_toml() {
    if [ "$engine" = exec ]; then
        cat <<TOML
[engines.local]
kind = "exec"
spool_dir = "$work/spool"

[[tools]]
name = "bench_tool"
engine = "local"
mode = "async"
poll_interval = "$poll"
target = { command = ["/bin/sleep", "3600"] }
TOML
    else
        cat <<TOML
[engines.aws]
kind = "stepfunctions"
region = "${AWS_REGION}"
endpoint_url = "$TASKGATE_MOTO_URL"

[[tools]]
name = "bench_tool"
engine = "aws"
mode = "async"
poll_interval = "$poll"
target = { state_machine_arn = "$BENCH_LISTEN_SFN_ARN" }
TOML
    fi
}

# serve N VERSION: a fresh taskgate whose bounds admit N streams of one
# caller, with h2c when VERSION is 2.
serve() {
    local n=$1 version=$2 port
    port=$(free_port)
    rm -rf "$work/spool"
    cat > "$work/listen.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
# One driver is one caller (anonymous, loopback): every stream holds a slot
# of max_waits and max_waits_per_caller, and watches one run.
max_waits = $(( n + 64 ))
max_waits_per_caller = $(( n + 64 ))
max_watched_runs_per_caller = $(( n + 64 ))
max_starts_per_minute = 100000
max_listen = "1h"
listen_keep_alive = "$keep_alive"
http2 = $([ "$version" = 2 ] && echo true || echo false)
http2_max_concurrent_streams = $per_conn

[keys]
seal = [{ id = "bench", dev_secret = "wVz8RLS81B/TPaYZmQgbcH6AWttroN1dkll5HivLOCA=" }]

$(engine_toml)
TOML
    TASKGATE_LOG=info "$bin" serve --config "$work/listen.toml" 2>"$work/taskgate.log" &
    tg_pid=$!
    url="http://127.0.0.1:$port/mcp"
    local until=$(( $(date +%s) + 30 ))
    until curl -sf -o /dev/null "http://127.0.0.1:$port/healthz"; do
        [ "$(date +%s)" -lt "$until" ] || { echo "taskgate did not start:" >&2; cat "$work/taskgate.log" >&2; exit 1; }
        sleep 0.05
    done
}

stop() {
    kill "$tg_pid" 2>/dev/null || true
    wait "$tg_pid" 2>/dev/null || true
    tg_pid=
    for s in $(pgrep -f "$work/spool" 2>/dev/null); do pkill -P "$s" 2>/dev/null || true; done
    pkill -f "$work/spool" 2>/dev/null || true
}

echo "taskgate $("$bin" --version | awk '{print $2}') — engine $engine, poll_interval $poll, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), idle window $idle, keep-alive every $keep_alive"
for n in $counts; do
    for shape in $shapes; do
        if [ "$shape" = own ] && [ "$engine" = exec ] && [ "$n" -gt "$own_max" ]; then
            echo "$shape, $n streams: skipping: $n exec runs need $(( 2 * n )) processes (BENCH_LISTEN_OWN_MAX=$own_max)"
            continue
        fi
        for version in $versions; do
            serve "$n" "$version"
            grep -o 'limit on open files[^"]*: [0-9]*' "$work/taskgate.log" | head -1 | sed 's/^/  taskgate: /' || true
            if ! "$work/listen" -url "$url" -pid "$tg_pid" -n "$n" -shape "$shape" -tool bench_tool -idle "$idle" -hz "$(getconf CLK_TCK)" \
                    -http "$version" -per-conn "$per_conn" > "$work/out" 2>&1; then
                echo "HTTP/$version, $shape, $n streams: FAILED" >&2
                cat "$work/out" >&2
                tail -5 "$work/taskgate.log" >&2
                stop
                continue
            fi
            grep -v '^BENCH ' "$work/out"
            grep '^BENCH ' "$work/out" >> "${BENCH_LISTEN_RAW:-/dev/null}" || true
            stop
        done
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
