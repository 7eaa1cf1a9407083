# Sourced by scripts/bench.sh and scripts/profile.sh: a scratch folder with a
# cleanup trap, two free loopback ports, and the benchmark's taskgate config
# (one exec tool, `bench_sleep`, whose task runs an hour). Sets work, pids,
# tg_port, base_port; the config is "$work/bench.toml".
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    # The bench tasks' supervisors and processes run detached: stop them too,
    # the processes first (a process outlives its killed supervisor).
    for s in $(pgrep -f "$work/spool" 2>/dev/null); do pkill -P "$s" 2>/dev/null || true; done
    pkill -f "$work/spool" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tg_port=$(free_port)
base_port=$(free_port)
cat > "$work/bench.toml" <<TOML
[server]
listen = "127.0.0.1:$tg_port"
# One load generator is one caller: the per-caller start quota (default 60 a
# minute) would refuse the benchmark's own set-up (64 tasks, then the start
# latency runs).
max_starts_per_minute = 100000

[keys]
seal = [{ id = "bench", dev_secret = "wVz8RLS81B/TPaYZmQgbcH6AWttroN1dkll5HivLOCA=" }]

[engines.local]
kind = "exec"
spool_dir = "$work/spool"

[[tools]]
name = "bench_sleep"
engine = "local"
mode = "async"
poll_interval = "1s"
target = { command = ["/bin/sleep", "3600"] }
TOML
