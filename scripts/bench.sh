#!/usr/bin/env bash
# taskgate's benchmark: one command, one table.
#
#   scripts/bench.sh                  # 15 s per run; the 1-million-request run at the end
#   BENCH_SECONDS=5 BENCH_MILLION=0 scripts/bench.sh   # quick look
#   BENCH_REPEAT=5 scripts/bench.sh   # each row the median of 5 runs (default 3)
#   BENCH_KERNEL=1 scripts/bench.sh   # also context switches, system calls and kernel share (perf)
#   BENCH_CONNS="16 64" scripts/bench.sh   # connection counts (default 1 16 64)
#   BENCH_MILLIONS=3 scripts/bench.sh # three million-request runs, RSS after each
#   scripts/bench-ceiling.sh          # the same against a build whose engine read costs nothing
#   BENCH_TRACING=0 scripts/bench.sh  # without the rows of traces on (sampling 1.0, 0.01) and off
#
# Builds taskgate and the bare axum yardstick (examples/baseline.rs) in release
# mode, starts both on loopback, and drives each with the same load generator
# (wrk) in the same run: tasks/get of one live exec task in 2026-07-28 and in
# 2025-11-25, at 1 (one client polling), 16 and 64 connections, and in 2026-07-28 with one task per
# connection (no single-flight sharing: one engine read per request). Prints req/s, p50/p99, server CPU per
# request, engine calls per request (taskgate's /metrics), and the ratio to the
# yardstick; then RSS idle and peak, tools/call → CreateTaskResult latency, the
# time from exec to ready, and RSS after a run of a million requests.
# Numbers belong in the README and issue notes, never in test assertions.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${BENCH_SECONDS:-15}
million=${BENCH_MILLION:-1}
threads=${BENCH_THREADS:-2}
repeat=${BENCH_REPEAT:-3}

if ! command -v wrk >/dev/null; then
    echo "installing wrk (Debian)" >&2
    apt-get update -qq >/dev/null && apt-get install -y -qq wrk >/dev/null
fi
cargo build --release --quiet --bin taskgate --example baseline --example load
# BENCH_TASKGATE: another taskgate binary to measure (scripts/bench-ceiling.sh).
bin="${BENCH_TASKGATE:-$root/target/release/taskgate}"
baseline_bin="$root/target/release/examples/baseline"
load_bin="$root/target/release/examples/load"

. "$root/scripts/lib/bench-server.sh"

ms() { date +%s%3N; }
wait_ready() {
    local url=$1 until=$(( $(date +%s) + 30 ))
    until curl -sf -o /dev/null "$url"; do
        [ "$(date +%s)" -lt "$until" ] || { echo "not ready: $url" >&2; exit 1; }
        sleep 0.005
    done
}

t0=$(ms)
TASKGATE_LOG=warn "$bin" serve --config "$work/bench.toml" 2>"$work/taskgate.log" &
tg_pid=$!
pids+=("$tg_pid")
wait_ready "http://127.0.0.1:$tg_port/healthz"
ready_ms=$(( $(ms) - t0 ))
"$baseline_bin" "127.0.0.1:$base_port" 2>/dev/null &
base_pid=$!
pids+=("$base_pid")
until curl -s -o /dev/null -X POST "http://127.0.0.1:$base_port/mcp" -d '{}'; do sleep 0.01; done

url="http://127.0.0.1:$tg_port/mcp"
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
post26() { # method name body
    curl -sf "$url" -H 'content-type: application/json' -H 'mcp-protocol-version: 2026-07-28' \
        -H "mcp-method: $1" -H "mcp-name: $2" -d "$3"
}
task26=$(post26 tools/call bench_sleep '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bench_sleep","arguments":{},'"$META"'}}' \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["taskId"])')
session=$(curl -sf -D - -o /dev/null "$url" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}' \
    | tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id"{print $2}')
task25=$(curl -sf "$url" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -H 'mcp-protocol-version: 2025-11-25' -H "mcp-session-id: $session" \
    -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bench_sleep","arguments":{},"task":{}}}' \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["task"]["taskId"])')

# wrk scripts: the same request every time; responses are checked for a status.
cat > "$work/get26.lua" <<LUA
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.headers["accept"] = "application/json, text/event-stream"
wrk.headers["mcp-protocol-version"] = "2026-07-28"
wrk.headers["mcp-method"] = "tasks/get"
wrk.headers["mcp-name"] = "$task26"
wrk.body = '{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"$task26",$META}}'
LUA
cat > "$work/get25.lua" <<LUA
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.headers["accept"] = "application/json, text/event-stream"
wrk.headers["mcp-protocol-version"] = "2025-11-25"
wrk.headers["mcp-session-id"] = "$session"
wrk.body = '{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"$task25"}}'
LUA
# One task per connection: as many tasks as the most connections, and each
# request names the next one (round-robin, per wrk thread from its own offset),
# so concurrent requests read different runs and single-flight has nothing to
# share: every request makes its own engine read.
own_tasks=()
for _ in $(seq 64); do
    own_tasks+=("$(post26 tools/call bench_sleep '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bench_sleep","arguments":{},'"$META"'}}' \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["taskId"])')")
done
{
    echo 'wrk.method = "POST"'
    echo 'wrk.headers["content-type"] = "application/json"'
    echo 'wrk.headers["accept"] = "application/json, text/event-stream"'
    echo 'wrk.headers["mcp-protocol-version"] = "2026-07-28"'
    echo 'wrk.headers["mcp-method"] = "tasks/get"'
    printf 'tasks = {'; printf '"%s",' "${own_tasks[@]}"; echo '}'
    echo "meta = '$META'"
    cat <<'LUA'
local thread_count = 0
setup = function(thread)
    thread:set("offset", thread_count * 17)
    thread_count = thread_count + 1
end
local n = 0
request = function()
    n = n + 1
    local task = tasks[((offset or 0) + n) % #tasks + 1]
    wrk.headers["mcp-name"] = task
    return wrk.format(nil, nil, nil,
        '{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"' .. task .. '",' .. meta .. '}}')
end
LUA
} > "$work/get26own.lua"
for f in get26 get25 get26own; do
    cat >> "$work/$f.lua" <<'LUA'
bad = 0
response = function(status, headers, body)
    if status ~= 200 or not string.find(body, '"status":"working"', 1, true) then bad = bad + 1 end
end
done = function(summary, latency, requests)
    io.write(string.format("BENCH requests=%d p50=%.3f p99=%.3f errors=%d\n",
        summary.requests, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
        summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA
done
# One check of what the scripts send (the answers are the real thing).
post26 tasks/get "$task26" '{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"'"$task26"'",'"$META"'}}' | grep -q '"status":"working"'

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
sys_ticks() { awk '{ print $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status"; }
engine_calls() { curl -sf "http://127.0.0.1:$tg_port/metrics" | awk '/^taskgate_engine_calls_total[{ ]/ { n += $NF } END { print n + 0 }'; }

idle_rss=$(rss_kb "$tg_pid")

# measure PID URL LUA CONNECTIONS -> one line: req/s p50 p99 cpu-µs sys-µs calls errors
measure() {
    local pid=$1 target=$2 lua=$3 conns=$4
    local c0 c1 s0 s1 e0 e1 out reqs p50 p99 errors cpu_us sys_us calls
    c0=$(cpu_ticks "$pid")
    s0=$(sys_ticks "$pid")
    e0=$( [ "$pid" = "$tg_pid" ] && engine_calls || echo 0 )
    out=$(wrk -t"$(( conns < threads ? conns : threads ))" -c"$conns" -d"${seconds}s" -s "$lua" "$target" 2>&1)
    c1=$(cpu_ticks "$pid")
    s1=$(sys_ticks "$pid")
    e1=$( [ "$pid" = "$tg_pid" ] && engine_calls || echo 0 )
    reqs=$(sed -n 's/^BENCH requests=\([0-9]*\).*/\1/p' <<<"$out")
    p50=$(sed -n 's/^BENCH .* p50=\([0-9.]*\).*/\1/p' <<<"$out")
    p99=$(sed -n 's/^BENCH .* p99=\([0-9.]*\).*/\1/p' <<<"$out")
    errors=$(sed -n 's/^BENCH .* errors=\([0-9]*\).*/\1/p' <<<"$out")
    [ -n "$reqs" ] || { echo "wrk failed: $out" >&2; exit 1; }
    cpu_us=$(awk -v t=$(( c1 - c0 )) -v hz="$hz" -v n="$reqs" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    sys_us=$(awk -v t=$(( s1 - s0 )) -v hz="$hz" -v n="$reqs" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    calls=$( [ "$pid" = "$tg_pid" ] && awk -v e=$(( e1 - e0 )) -v n="$reqs" 'BEGIN { printf "%.3f", e / n }' || echo "-")
    echo "$(( reqs / seconds )) $p50 $p99 $cpu_us $sys_us $calls $errors"
}

# The rows of one connection count, each measured $repeat times in turns (the
# baseline, then each taskgate row, then again), so a neighbour's load on a
# shared machine falls on all rows alike; each row shows its median run by
# req/s, and the ratios compare medians.
rows=(base get26 get25 get26own)
declare -A label=(
    [base]="baseline (bare axum)" [get26]="tasks/get 2026-07-28"
    [get25]="tasks/get 2025-11-25" [get26own]="tasks/get 2026, task/conn"
)
ratio() {
    awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" \
        'BEGIN { printf "%-28s %5s %8.0f%% of the baseline'"'"'s req/s, %.1f× its CPU per request\n", "  ratio", "", 100 * a / b, c / d }'
}

echo
echo "taskgate $( "$bin" --version | awk '{print $2}' ) — $(nproc) cores, wrk -t$threads, ${seconds}s per run, median of $repeat"
printf '%-28s %5s %9s %8s %8s %10s %8s %9s %7s\n' "run" "conns" "req/s" "p50 ms" "p99 ms" "CPU µs/req" "sys µs" "calls/req" "errors"
for conns in ${BENCH_CONNS:-1 16 64}; do
    for row in "${rows[@]}"; do : > "$work/row.$row"; done
    for _ in $(seq "$repeat"); do
        for row in "${rows[@]}"; do
            if [ "$row" = base ]; then
                measure "$base_pid" "http://127.0.0.1:$base_port/mcp" "$work/get26.lua" "$conns" >> "$work/row.$row"
            else
                measure "$tg_pid" "$url" "$work/$row.lua" "$conns" >> "$work/row.$row"
            fi
        done
    done
    declare -A median=()
    for row in "${rows[@]}"; do
        median[$row]=$(sort -n "$work/row.$row" | awk -v m=$(( (repeat + 1) / 2 )) 'NR == m')
        read -r rps p50 p99 cpu sys calls errors <<<"${median[$row]}"
        printf '%-28s %5s %9s %8s %8s %10s %8s %9s %7s\n' "${label[$row]}" "$conns" "$rps" "$p50" "$p99" "$cpu" "$sys" "$calls" "$errors"
        if [ "$row" = base ]; then
            b_rps=$rps b_cpu=$cpu
        else
            ratio "$rps" "$b_rps" "$cpu" "$b_cpu"
        fi
        [ "$row" = get26 ] && shared_rps=$rps
    done
done
peak_rss=$(hwm_kb "$tg_pid")

# The cost of traces ([telemetry]), in the same run: the same tasks/get of the
# same task (same key, same spool: any replica answers) on two more servers, one
# recording every trace (sampling_ratio 1.0: a SERVER span and an engine-read
# span per request, exported), one a hundredth (0.01), against the server
# above (tracing off), in turns like the rows above. They export to the Jaeger
# of TASKGATE_JAEGER_OTLP_GRPC (scripts/jaeger/up.sh) when set, else to an
# unreachable endpoint (the exporter's failures are then part of the cost).
# BENCH_TRACING=0 leaves these rows out; BENCH_TRACING_CONNS sets their
# connection counts (default 16).
if [ "${BENCH_TRACING:-1}" = 1 ]; then
    otlp="${TASKGATE_JAEGER_OTLP_GRPC:-http://127.0.0.1:9}"
    where=$([ -n "${TASKGATE_JAEGER_OTLP_GRPC:-}" ] && echo "to Jaeger at $otlp" || echo "to an unreachable endpoint, $otlp")
    declare -A tr_pid=() tr_url=()
    for name in on100 on1; do
        ratio=$([ "$name" = on100 ] && echo 1.0 || echo 0.01)
        port=$(free_port)
        sed "s/^listen = .*/listen = \"127.0.0.1:$port\"/" "$work/bench.toml" > "$work/bench-$name.toml"
        printf '\n[telemetry]\nendpoint = "%s"\nsampling_ratio = %s\n' "$otlp" "$ratio" >> "$work/bench-$name.toml"
        TASKGATE_LOG=error "$bin" serve --config "$work/bench-$name.toml" 2>"$work/taskgate-$name.log" &
        tr_pid[$name]=$!
        pids+=("${tr_pid[$name]}")
        tr_url[$name]="http://127.0.0.1:$port/mcp"
        wait_ready "http://127.0.0.1:$port/healthz"
    done
    tr_pid[off]=$tg_pid tr_url[off]=$url
    declare -A tr_label=([off]="tracing off" [on100]="tracing on, sampling 1.0" [on1]="tracing on, sampling 0.01")
    echo
    echo "traces: tasks/get 2026-07-28, one task, exporting $where; median of $repeat"
    printf '%-28s %5s %9s %8s %8s %10s %8s %9s %7s\n' "run" "conns" "req/s" "p50 ms" "p99 ms" "CPU µs/req" "sys µs" "calls/req" "errors"
    for conns in ${BENCH_TRACING_CONNS:-16}; do
        for row in off on100 on1; do : > "$work/trow.$row"; done
        for _ in $(seq "$repeat"); do
            for row in off on100 on1; do
                measure "${tr_pid[$row]}" "${tr_url[$row]}" "$work/get26.lua" "$conns" >> "$work/trow.$row"
            done
        done
        for row in off on100 on1; do
            read -r rps p50 p99 cpu sys calls errors <<<"$(sort -n "$work/trow.$row" | awk -v m=$(( (repeat + 1) / 2 )) 'NR == m')"
            printf '%-28s %5s %9s %8s %8s %10s %8s %9s %7s\n' "${tr_label[$row]}" "$conns" "$rps" "$p50" "$p99" "$cpu" "$sys" "$calls" "$errors"
            if [ "$row" = off ]; then
                off_rps=$rps off_cpu=$cpu
            else
                awk -v a="$rps" -v b="$off_rps" -v c="$cpu" -v d="$off_cpu" \
                    'BEGIN { printf "%-28s %5s %8.0f%% of tracing off'"'"'s req/s, %.2f× its CPU per request\n", "  ratio", "", 100 * a / b, c / d }'
            fi
        done
    done
fi

echo
"$load_bin" calls "$url" 50
if [ "$million" = 1 ]; then
    # BENCH_MILLIONS=N: N million-request runs one after another, RSS after each
    # (whether memory settles or keeps growing).
    rate=$shared_rps total=0
    for round in $(seq "${BENCH_MILLIONS:-1}"); do
        before=$(rss_kb "$tg_pid")
        # Runs of a quarter more time than the last rate needs, until a million
        # have been answered (a neighbour's load can slow a run below the rate).
        reqs=0 secs=0
        while [ "$reqs" -lt 1000000 ]; do
            chunk=$(awk -v r="$rate" -v left=$(( 1000000 - reqs )) 'BEGIN { print int(1.25 * left / (r > 0 ? r : 1)) + 1 }')
            out=$(wrk -t"$threads" -c64 -d"${chunk}s" -s "$work/get26.lua" "$url" 2>&1)
            done_now=$(sed -n 's/^BENCH requests=\([0-9]*\).*/\1/p' <<<"$out")
            [ -n "$done_now" ] || { echo "wrk failed: $out" >&2; exit 1; }
            reqs=$(( reqs + done_now )) secs=$(( secs + chunk )) rate=$(( done_now / chunk ))
        done
        after=$(rss_kb "$tg_pid") total=$(( total + reqs ))
        echo "RSS around $reqs tasks/get (64 connections, ${secs}s; round $round, $total in all): before $((before / 1024)) MB, after $((after / 1024)) MB ($before → $after kB)"
    done
fi
echo "RSS: idle $((idle_rss / 1024)) MB (one task), peak $((peak_rss / 1024)) MB (VmHWM after the runs)"
echo "exec to ready (serve started → /healthz answers): ${ready_ms} ms"
"$load_bin" handles

# BENCH_KERNEL=1: where the kernel side of a tasks/get goes (needs perf, from
# Debian's linux-perf). For the one-task 2026-07-28 row at 16 connections and
# the baseline: context switches and system calls per request (perf stat
# counting, which costs the servers little), and the share of CPU samples
# taken in the kernel; the same counts for one connection (every poll reads
# alone) and for a task per connection at 16 (reads nobody shares).
if [ "${BENCH_KERNEL:-0}" = 1 ]; then
    command -v perf >/dev/null || { apt-get update -qq >/dev/null && apt-get install -y -qq linux-perf >/dev/null; }
    kernel_row() { # NAME PID URL [LUA CONNECTIONS SAMPLE]
        local name=$1 pid=$2 target=$3 lua=${4:-$work/get26.lua} conns=${5:-16} sample=${6:-1} out reqs
        local wrk_threads=$(( conns < threads ? conns : threads ))
        local events=context-switches,raw_syscalls:sys_enter name_
        for name_ in recvfrom writev write read openat close newfstatat statx fcntl getdents64 futex epoll_wait sched_yield; do
            events+=",syscalls:sys_enter_$name_"
        done
        perf stat -x, -e "$events" -p "$pid" -o "$work/perf.$name" -- sleep $(( seconds + 1 )) &
        local stat_pid=$!
        out=$(wrk -t"$wrk_threads" -c"$conns" -d"${seconds}s" -s "$lua" "$target" 2>&1)
        wait "$stat_pid"
        reqs=$(sed -n 's/^BENCH requests=\([0-9]*\).*/\1/p' <<<"$out")
        awk -F, -v n="$reqs" -v name="$name" -v order="recvfrom writev write read openat close newfstatat statx fcntl getdents64 futex epoll_wait sched_yield" '
            $3 == "context-switches" { cs = $1 }
            $3 == "raw_syscalls:sys_enter" { total = $1 }
            $3 ~ /^syscalls:sys_enter_/ && $1 + 0 > 0 { sub("syscalls:sys_enter_", "", $3); calls[$3] = $1 }
            END {
                printf "%-10s %.2f context switches, %.1f system calls per request:", name, cs / n, total / n
                k = split(order, names, " ")
                for (i = 1; i <= k; i++) if (calls[names[i]] / n >= 0.05) printf " %s %.2f", names[i], calls[names[i]] / n
                printf "\n"
            }' "$work/perf.$name"
        [ "$sample" = 1 ] || return 0
        perf record -q -e cpu-clock -F 2000 -p "$pid" -o "$work/perf.$name.data" -- sleep $(( seconds + 1 )) 2>/dev/null &
        stat_pid=$!
        wrk -t"$threads" -c16 -d"${seconds}s" -s "$work/get26.lua" "$target" >/dev/null 2>&1
        wait "$stat_pid"
        perf report -q -i "$work/perf.$name.data" --stdio --no-children --sort dso 2>/dev/null |
            awk -v name="$name" '/kernel/ { k += $1 } { t += $1 } END { printf "%-10s %.0f%% of CPU samples in the kernel\n", name, k * 100 / (t > 0 ? t : 1) }'
        perf report -q -i "$work/perf.$name.data" --stdio --no-children --sort sym 2>/dev/null |
            awk -v name="$name" '$2 == "[k]" && n < 4 { line = line sprintf(" %s %s", $3, $1); n++ } END { printf "%-10s costliest kernel functions:%s\n", name, line }'
    }
    echo
    echo "kernel side, one task, 16 connections (perf):"
    kernel_row taskgate "$tg_pid" "$url"
    kernel_row baseline "$base_pid" "http://127.0.0.1:$base_port/mcp"
    echo "kernel side, one connection:"
    kernel_row taskgate "$tg_pid" "$url" "$work/get26.lua" 1 0
    kernel_row baseline "$base_pid" "http://127.0.0.1:$base_port/mcp" "$work/get26.lua" 1 0
    echo "kernel side, a task per connection, 16 connections:"
    kernel_row taskgate "$tg_pid" "$url" "$work/get26own.lua" 16 0
fi
