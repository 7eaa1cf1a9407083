#!/usr/bin/env bash
# Build the Temporal server the Temporal engine's tests run against: the small Go
# program in scripts/temporal/server (the server from the Go module go.temporal.io/server,
# pinned in its go.mod, on SQLite), into
# ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/temporal/<version>/bin/taskgate-temporal-server.
# Test-only: never shipped.
#
# Idempotent: a stamp file records the version, the Go version and a digest of the
# program's sources; a rerun that matches (and finds the binary) only prints the bin dir.
#
# Usage: scripts/temporal/build.sh          -> prints the bin dir on stdout
# Env:   TASKGATE_CACHE            cache root (default $HOME/.cache/taskgate)
#        TASKGATE_TEMPORAL_FORCE=1 rebuild even if the stamp matches
# All progress goes to stderr; only the bin dir goes to stdout.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
src="$here/server"
# The version is the one go.mod requires; the directory is keyed by it.
VERSION="$(sed -n 's/^[[:space:]]*go\.temporal\.io\/server \(v[^ ]*\).*$/\1/p' "$src/go.mod" | head -n 1)"
[[ -n "$VERSION" ]] || { echo "[temporal-build] no go.temporal.io/server in $src/go.mod" >&2; exit 1; }

CACHE_ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
T_DIR="$CACHE_ROOT/temporal/$VERSION"
BIN_DIR="$T_DIR/bin"
BIN="$BIN_DIR/taskgate-temporal-server"
STAMP="$BIN_DIR/.stamp"

log() { printf '[temporal-build] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
GO_VERSION="$(GOTOOLCHAIN=local go env GOVERSION)"
SRC_DIGEST="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)"
STAMP_CONTENT="temporal=$VERSION go=$GO_VERSION src=$SRC_DIGEST"

fresh() { [[ "${TASKGATE_TEMPORAL_FORCE:-0}" != 1 && -x "$BIN" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_CONTENT" ]]; }

if fresh; then
  echo "$BIN_DIR"
  exit 0
fi

mkdir -p "$BIN_DIR"
# Serialise concurrent builds (two test runs, or test.sh and a developer, at once).
exec 9>"$T_DIR/.build.lock"
flock 9
if fresh; then
  echo "$BIN_DIR"
  exit 0
fi
rm -f "$STAMP"

export GOTOOLCHAIN=local          # never fetch another toolchain
export GOFLAGS="-mod=mod -buildvcs=false"
export GOWORK=off
export CGO_ENABLED=0              # the SQLite driver is pure Go

log "building the Temporal server $VERSION ($GO_VERSION) into $BIN_DIR"
t0=$(date +%s)
(cd "$src" && go build -ldflags "-s -w" -o "$BIN.tmp" .) >&2
mv -f "$BIN.tmp" "$BIN"
echo "$STAMP_CONTENT" > "$STAMP"
took=$(( $(date +%s) - t0 ))
log "built in ${took}s ($STAMP_CONTENT)"
echo "$(date -u +%FT%TZ) $STAMP_CONTENT total=${took}s" >> "$CACHE_ROOT/temporal/build-times.log"
echo "$BIN_DIR"
