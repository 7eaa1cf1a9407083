#!/usr/bin/env bash
# Build the trace backend the telemetry tests read: Jaeger v2's all-in-one program
# (github.com/jaegertracing/jaeger/cmd/jaeger, the version scripts/jaeger/module/go.mod
# requires: OTLP gRPC and HTTP in, in-memory storage, the query API) into
# ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/jaeger/<version>/bin/jaeger. Test-only: never
# shipped.
#
# Idempotent: a stamp file records the version, the Go version and a digest of the
# module's files; a rerun that matches (and finds the binary) only prints the bin dir.
# Two callers at once (scripts/test.sh and a developer) build once: the second waits on a
# lock and then finds the stamp.
#
# Usage: scripts/jaeger/build.sh          -> prints the bin dir on stdout
# Env:   TASKGATE_CACHE           cache root (default $HOME/.cache/taskgate)
#        TASKGATE_JAEGER_FORCE=1  rebuild even if the stamp matches
# All progress goes to stderr; only the bin dir goes to stdout. Each build appends its
# wall and CPU seconds to <cache>/jaeger/build-times.log.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
src="$here/module"
VERSION="$(sed -n 's/^[[:space:]]*require github\.com\/jaegertracing\/jaeger \(v[^ ]*\).*$/\1/p; s/^[[:space:]]*github\.com\/jaegertracing\/jaeger \(v[^ ]*\).*$/\1/p' "$src/go.mod" | head -n 1)"
[[ -n "$VERSION" ]] || { echo "[jaeger-build] no github.com/jaegertracing/jaeger in $src/go.mod" >&2; exit 1; }

CACHE_ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
J_DIR="$CACHE_ROOT/jaeger/$VERSION"
BIN_DIR="$J_DIR/bin"
BIN="$BIN_DIR/jaeger"
STAMP="$BIN_DIR/.stamp"

log() { printf '[jaeger-build] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
GO_VERSION="$(GOTOOLCHAIN=local go env GOVERSION)"
SRC_DIGEST="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)"
STAMP_CONTENT="jaeger=$VERSION go=$GO_VERSION src=$SRC_DIGEST"

fresh() { [[ "${TASKGATE_JAEGER_FORCE:-0}" != 1 && -x "$BIN" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_CONTENT" ]]; }

if fresh; then
  echo "$BIN_DIR"
  exit 0
fi

mkdir -p "$BIN_DIR"
# Serialise concurrent builds; whoever waited finds the stamp the first one wrote.
exec 9>"$J_DIR/.build.lock"
flock 9
if fresh; then
  echo "$BIN_DIR"
  exit 0
fi
rm -f "$STAMP"

export GOTOOLCHAIN=local          # never fetch another toolchain
export GOFLAGS="-mod=mod -buildvcs=false"
export GOWORK=off
export CGO_ENABLED=0

log "building Jaeger $VERSION ($GO_VERSION) into $BIN_DIR"
times="$J_DIR/.time.$$"
timer=()
[[ -x /usr/bin/time ]] && timer=(/usr/bin/time -f '%e %U %S' -o "$times")
t0=$(date +%s)
(cd "$src" && "${timer[@]}" go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" github.com/jaegertracing/jaeger/cmd/jaeger) >&2
mv -f "$BIN.tmp" "$BIN"
echo "$STAMP_CONTENT" > "$STAMP"
took=$(( $(date +%s) - t0 ))
cpu=""
if [[ -s "$times" ]]; then
  read -r wall user sys < "$times"
  cpu="$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')"
  took="$wall"
fi
rm -f "$times"
log "built in ${took}s wall${cpu:+, ${cpu} CPU-s} ($STAMP_CONTENT)"
echo "$(date -u +%FT%TZ) $STAMP_CONTENT wall=${took}s${cpu:+ cpu=${cpu}s}" >> "$CACHE_ROOT/jaeger/build-times.log"
echo "$BIN_DIR"
