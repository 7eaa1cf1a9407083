#!/usr/bin/env bash
# Where a tasks/get spends its instructions: taskgate and the bare axum
# yardstick (examples/baseline.rs) each run under valgrind's callgrind, get the
# same N keep-alive requests one after another, and the script prints the
# instructions each executed per request and taskgate's costliest functions.
#
#   scripts/profile.sh                      # 2000 requests, 2026-07-28 tasks/get of one exec task
#   PROFILE_REQUESTS=500 scripts/profile.sh
#
# Instruction counts do not depend on how loaded the machine is, so unlike the
# wrk figures of scripts/bench.sh they can be compared between runs on a shared
# machine. Counts are taken between a zeroing and a dump of callgrind's
# counters (callgrind_control), so start-up and the task's creation are left out.
# The output folder (printed at the end) keeps the callgrind files for
# callgrind_annotate or kcachegrind.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
requests=${PROFILE_REQUESTS:-2000}
out=${PROFILE_OUT:-$(mktemp -d)}
mkdir -p "$out"

if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null; then
    echo "installing valgrind (Debian)" >&2
    apt-get update -qq >/dev/null && apt-get install -y -qq valgrind >/dev/null
fi
cargo build --release --quiet --bin taskgate --example baseline
bin="$root/target/release/taskgate"
baseline_bin="$root/target/release/examples/baseline"

. "$root/scripts/lib/bench-server.sh"

wait_ready() {
    local url=$1 until=$(( $(date +%s) + 120 ))
    until curl -s -o /dev/null -X POST "$url" -d '{}'; do
        [ "$(date +%s)" -lt "$until" ] || { echo "not ready: $url" >&2; exit 1; }
        sleep 0.1
    done
}

cg() { # NAME -- command…: starts it under callgrind, no counting until told
    local name=$1
    shift 2
    valgrind --tool=callgrind --callgrind-out-file="$out/$name.%p.out" \
        --dump-instr=no --collect-jumps=no "$@" 2>"$out/$name.valgrind.log" &
    pids+=("$!")
    last_pid=$!
}

export TASKGATE_LOG=warn
cg taskgate -- "$bin" serve --config "$work/bench.toml"
tg_pid=$last_pid
cg baseline -- "$baseline_bin" "127.0.0.1:$base_port"
base_pid=$last_pid
wait_ready "http://127.0.0.1:$tg_port/mcp"
wait_ready "http://127.0.0.1:$base_port/mcp"

# The requests: one keep-alive connection, the same tasks/get each time; each
# answer is checked, so a profile of error replies cannot pass for one of work.
cat > "$work/drive.py" <<'PY'
import http.client, json, sys
port, requests, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
           "mcp-protocol-version": "2026-07-28"}
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
def post(method, name, params):
    h = dict(headers, **{"mcp-method": method, "mcp-name": name})
    conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}), h)
    r = conn.getresponse()
    body = r.read()
    assert r.status == 200, (r.status, body)
    return json.loads(body)
if mode == "start":
    print(post("tools/call", "bench_sleep", {"name": "bench_sleep", "arguments": {}, "_meta": meta})["result"]["taskId"])
else:
    task = mode
    for _ in range(requests):
        answer = post("tasks/get", task, {"taskId": task, "_meta": meta})
        assert answer["result"]["status"] == "working", answer
PY
task=$(python3 "$work/drive.py" "$tg_port" 0 start)
python3 "$work/drive.py" "$tg_port" 50 "$task"        # warm-up
python3 "$work/drive.py" "$base_port" 50 "any"        # warm-up (the yardstick answers anything)

measure() { # PID PORT TASK -> instructions per request
    local pid=$1 port=$2 task=$3 file
    callgrind_control --zero "$pid" >/dev/null
    python3 "$work/drive.py" "$port" "$requests" "$task"
    callgrind_control --dump="measured" "$pid" >/dev/null
    file=$(ls -t "$out"/*."$pid".out* | head -n 1)
    awk -v n="$requests" '/^summary:/ { printf "%.0f", $2 / n }' "$file"
    echo " $file"
}
read -r tg_ir tg_file < <(measure "$tg_pid" "$tg_port" "$task")
read -r base_ir base_file < <(measure "$base_pid" "$base_port" "any")

echo
echo "instructions per tasks/get (callgrind, $requests requests on one keep-alive connection)"
printf '%-34s %12s\n' "server" "Ir/request"
printf '%-34s %12s\n' "taskgate (2026-07-28, exec task)" "$tg_ir"
printf '%-34s %12s\n' "bare axum yardstick" "$base_ir"
awk -v a="$tg_ir" -v b="$base_ir" 'BEGIN { printf "ratio: %.2f× the yardstick\n", a / b }'
echo
echo "taskgate's costliest functions, inclusive (share of all instructions):"
callgrind_annotate --inclusive=yes "$tg_file" 2>/dev/null \
    | awk '/^-+$/ { n++ ; next } n >= 3 && NF > 2 { print }' | head -n 40
echo
echo "taskgate's costliest functions, exclusive:"
callgrind_annotate "$tg_file" 2>/dev/null \
    | awk '/^-+$/ { n++ ; next } n >= 3 && NF > 2 { print }' | head -n 25
echo
echo "callgrind files: $out"
