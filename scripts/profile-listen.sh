#!/usr/bin/env bash
# What an open listen stream costs, in numbers a loaded machine does not sway:
# heap bytes per idle stream by allocation site (valgrind's DHAT) and the
# instructions taskgate executes per stream to fan a change out (callgrind).
#
#   scripts/profile-listen.sh                          # both, 1,000 streams on one run, h2c
#   PROFILE_LISTEN_TOOLS=dhat scripts/profile-listen.sh
#   PROFILE_LISTEN_HTTP=1 scripts/profile-listen.sh    # a connection per stream (HTTP/1.1)
#   PROFILE_LISTEN_N=2000 PROFILE_LISTEN_PER_CONN=100 scripts/profile-listen.sh
#   PROFILE_LISTEN_DHAT_BIN=… PROFILE_LISTEN_CALLGRIND_BIN=… scripts/profile-listen.sh
#                         # profile these builds (another commit's) instead
#
# taskgate is built with the `profiling` profile (optimized as release, crate by
# crate, with line tables); for DHAT also with the feature `system-allocator`,
# so that every allocation goes through malloc where DHAT sees it (the sizes
# asked for are the same under mimalloc; RSS adds each allocator's rounding,
# which scripts/bench-listen.sh measures). The streams come from the
# bench-listen driver (scripts/bench/listen), one exec run, all on it.
#
#   dhat       taskgate with N_SMALL streams, then with N, each stopped while its
#              streams idle; bytes live at the heap's peak (the idle streams),
#              by site, and (N − N_SMALL streams' difference) / (N − N_SMALL):
#              the bytes each stream holds, site by site.
#   callgrind  taskgate with N streams; the counters zeroed once every stream is
#              open, dumped once every stream has its run's last notification
#              and has ended: instructions per stream for the change's fan-out
#              (the cancel request included, 1 per N), and the costliest
#              functions.
#
# Output folder (printed) keeps the DHAT and callgrind files. Numbers belong in
# README/docs and issue notes, never in test assertions.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
n=${PROFILE_LISTEN_N:-1000}
n_small=${PROFILE_LISTEN_N_SMALL:-200}
version=${PROFILE_LISTEN_HTTP:-2}
per_conn=${PROFILE_LISTEN_PER_CONN:-100}
tools=${PROFILE_LISTEN_TOOLS:-dhat callgrind}
out=${PROFILE_OUT:-$(mktemp -d)}
mkdir -p "$out"

command -v go >/dev/null || { echo "profile-listen needs a Go toolchain for its driver" >&2; exit 1; }
if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null; then
    echo "installing valgrind (Debian)" >&2
    apt-get update -qq >/dev/null && apt-get install -y -qq valgrind >/dev/null
fi

work=$(mktemp -d)
vg_pid=
cleanup() {
    [ -n "$vg_pid" ] && kill -KILL "$vg_pid" 2>/dev/null || true
    for s in $(pgrep -f "$work/spool" 2>/dev/null); do pkill -P "$s" 2>/dev/null || true; done
    pkill -f "$work/spool" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

build() { # FEATURES NAME [PREBUILT]: a profiling build of taskgate, copied to $work/NAME
    local features=$1 name=$2 prebuilt=${3:-}
    if [ -n "$prebuilt" ]; then
        cp "$prebuilt" "$work/$name"
        return
    fi
    nice -n 5 cargo build --profile profiling --quiet --bin taskgate ${features:+--features "$features"}
    cp "$root/target/profiling/taskgate" "$work/$name"
}
(cd scripts/bench && go build -o "$work/listen" ./listen)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

config() { # PORT STREAMS: the config, bounds sized for the streams
    cat > "$work/listen.toml" <<TOML
[server]
listen = "127.0.0.1:$1"
max_waits = $(( $2 + 64 ))
max_waits_per_caller = $(( $2 + 64 ))
max_watched_runs_per_caller = $(( $2 + 64 ))
max_listen = "1h"
# No keep-alive comment while the profile runs.
listen_keep_alive = "1h"
http2 = $([ "$version" = 2 ] && echo true || echo false)
http2_max_concurrent_streams = $per_conn
# Valgrind runs taskgate tens of times slower than native.
header_read_timeout = "60s"

[keys]
seal = [{ id = "bench", dev_secret = "wVz8RLS81B/TPaYZmQgbcH6AWttroN1dkll5HivLOCA=" }]

[engines.local]
kind = "exec"
spool_dir = "$work/spool"

[[tools]]
name = "bench_tool"
engine = "local"
mode = "async"
poll_interval = "5s"
target = { command = ["/bin/sleep", "3600"] }
TOML
}

# start TOOL-ARGS…: taskgate under valgrind; sets vg_pid, port
start() {
    port=$(free_port)
    rm -rf "$work/spool"
    config "$port" "$streams"
    TASKGATE_LOG=warn valgrind "$@" serve --config "$work/listen.toml" 2>"$work/valgrind.log" &
    vg_pid=$!
    local until=$(( $(date +%s) + 180 ))
    until curl -sf -o /dev/null "http://127.0.0.1:$port/healthz"; do
        [ "$(date +%s)" -lt "$until" ] || { echo "taskgate did not start under valgrind:" >&2; tail "$work/valgrind.log" >&2; exit 1; }
        sleep 0.2
    done
}

# until_open N DEADLINE_S: waits until taskgate counts N open listen streams
until_open() {
    local want=$1 until=$(( $(date +%s) + $2 )) have=0
    while :; do
        have=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^taskgate_listen_streams_in_flight /{print $2}')
        [ "${have%.*}" = "$want" ] && return 0
        [ "$(date +%s)" -lt "$until" ] || { echo "only ${have:-0} of $want streams open" >&2; exit 1; }
        sleep 0.5
    done
}

driver() { # STREAMS IDLE: the bench-listen driver against the taskgate on $port
    "$work/listen" -url "http://127.0.0.1:$port/mcp" -pid "$vg_pid" -n "$1" -shape shared \
        -tool bench_tool -idle "$2" -http "$version" -per-conn "$per_conn" -concurrency 16
}

stop_taskgate() {
    kill -TERM "$vg_pid" 2>/dev/null || true
    wait "$vg_pid" 2>/dev/null || true
    vg_pid=
    for s in $(pgrep -f "$work/spool" 2>/dev/null); do pkill -P "$s" 2>/dev/null || true; done
    pkill -f "$work/spool" 2>/dev/null || true
}

echo "profile-listen: $n streams on one run over HTTP/$version$([ "$version" = 2 ] && echo ", $per_conn per connection"); load average $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"

if [[ " $tools " == *" dhat "* ]]; then
    build system-allocator taskgate-sysalloc "${PROFILE_LISTEN_DHAT_BIN:-}"
    for streams in "$n_small" "$n"; do
        start --tool=dhat --dhat-out-file="$out/dhat.$streams.json" "$work/taskgate-sysalloc"
        driver "$streams" 1h > "$work/driver.$streams.log" 2>&1 &
        driver_pid=$!
        until_open "$streams" 600
        # Settled: the opening requests' transient allocations are gone.
        sleep 3
        stop_taskgate
        kill "$driver_pid" 2>/dev/null || true
        wait "$driver_pid" 2>/dev/null || true
    done
    python3 - "$out/dhat.$n_small.json" "$out/dhat.$n.json" "$n_small" "$n" <<'PY'
import json, sys
small_path, big_path, n_small, n_big = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def name(frame):
    # "0xADDR: function (file:line)"
    return frame.split(": ", 1)[-1]
def site_of(frames):
    """What allocated: the type a Box or Arc was made for, if any, then the
    first two frames outside the allocator and Rust's standard library."""
    boxed, names = None, []
    for f in frames:
        text = name(f)
        if "vgpreload" in text or "(library/" in text or text.startswith(("UnknownInlinedFun", "???")):
            if boxed is None and text.startswith(("new<", "pin<", "new_uninit<")):
                boxed = text.split(" (")[0]
            continue
        names.append(text)
        if len(names) == 2:
            break
    return ((boxed + " <- ") if boxed else "") + " <- ".join(names)
def load(path):
    d = json.load(open(path))
    ftbl = d["ftbl"]
    def site(pp):
        return site_of([ftbl[i] for i in pp["fs"]])
    sites = {}
    for pp in d["pps"]:
        k = site(pp)
        b, n = sites.get(k, (0, 0))
        sites[k] = (b + pp["gb"], n + pp["gbk"])
    return d, sites
small, s_sites = load(small_path)
big, b_sites = load(big_path)
def total(sites): return sum(b for b, _ in sites.values())
per = (total(b_sites) - total(s_sites)) / (n_big - n_small)
print(f"dhat: heap live at the peak: {total(s_sites)} bytes with {n_small} streams, {total(b_sites)} with {n_big}: {per:.0f} bytes per stream")
rows = []
for k in set(s_sites) | set(b_sites):
    bb, bn = b_sites.get(k, (0, 0))
    sb, sn = s_sites.get(k, (0, 0))
    d = (bb - sb) / (n_big - n_small)
    if abs(d) >= 8:
        rows.append((d, (bn - sn) / (n_big - n_small), k))
rows.sort(reverse=True)
print("  bytes/stream  blocks/stream  site (innermost taskgate or library frame first)")
for d, blocks, k in rows[:30]:
    print(f"  {d:12.0f}  {blocks:13.2f}  {k[:200]}")
PY
fi

if [[ " $tools " == *" callgrind "* ]]; then
    build "" taskgate-profiling "${PROFILE_LISTEN_CALLGRIND_BIN:-}"
    streams=$n
    start --tool=callgrind --callgrind-out-file="$out/callgrind.out" --dump-instr=no --collect-jumps=no "$work/taskgate-profiling"
    driver "$n" 20s > "$work/driver.log" 2>&1 &
    driver_pid=$!
    until_open "$n" 600
    sleep 3
    callgrind_control -z "$vg_pid" >/dev/null
    if ! wait "$driver_pid"; then
        echo "the driver failed:" >&2
        cat "$work/driver.log" >&2
        exit 1
    fi
    callgrind_control --dump="fan-out" "$vg_pid" >/dev/null
    dump=$(ls -t "$out"/callgrind.out.* | head -n 1)
    stop_taskgate
    ir=$(awk '/^summary:/ { print $2 }' "$dump")
    echo "callgrind: $ir instructions from the open streams' idle to their ends: $(( ir / n )) per stream (the change's fan-out, the cancel request's share, each stream's end)"
    grep -v '^BENCH ' "$work/driver.log" | sed 's/^/  driver: /'
    echo "  costliest functions, inclusive:"
    callgrind_annotate --inclusive=yes "$dump" 2>/dev/null \
        | awk '/^-+$/ { n++ ; next } n >= 3 && NF > 2 { print }' | head -n 40 | sed 's/^/  /'
    echo "  costliest functions, exclusive:"
    callgrind_annotate "$dump" 2>/dev/null \
        | awk '/^-+$/ { n++ ; next } n >= 3 && NF > 2 { print }' | head -n 30 | sed 's/^/  /'
fi
echo "output: $out"
