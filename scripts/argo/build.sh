#!/usr/bin/env bash
# Build the Argo Workflows controller (cmd/workflow-controller) from its Go module,
# pinned, for the tests' private Kubernetes control plane only.
#
# Usage: scripts/argo/build.sh      -> prints the bin directory on stdout
# Writes: ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/argo/$ARGO_VERSION/bin/workflow-controller
#         (+ .stamp). Idempotent: a matching stamp returns at once; concurrent
#         callers serialise on a lock.
#
# SECURITY: v4.0.5 is what the Go module proxy serves and it has reported security
# flaws. It only ever runs inside the tests' throw-away cluster (kwok nodes, loopback
# only), pinned here; never deploy this build anywhere else.
#
# Env: TASKGATE_ARGO_VERSION (default v4.0.5), TASKGATE_ARGO_FORCE=1 rebuilds,
#      GOCACHE / GOMODCACHE / GOPROXY as Go reads them.
set -euo pipefail

ARGO_VERSION="${TASKGATE_ARGO_VERSION:-v4.0.5}"
ARGO_MODULE="github.com/argoproj/argo-workflows/v4"
CACHE_ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
ARGO_DIR="$CACHE_ROOT/argo/$ARGO_VERSION"
BIN_DIR="$ARGO_DIR/bin"
STAMP="$BIN_DIR/.stamp"

log() { printf '[argo-build] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
GO_VERSION="$(go env GOVERSION)"
STAMP_CONTENT="argo=$ARGO_VERSION go=$GO_VERSION layout=1"

ready() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_CONTENT" && -x "$BIN_DIR/workflow-controller" ]]; }

if [[ "${TASKGATE_ARGO_FORCE:-0}" != 1 ]] && ready; then
  echo "$BIN_DIR"; exit 0
fi
mkdir -p "$BIN_DIR"
exec 9>"$ARGO_DIR/.build.lock"
flock -w 3600 9 || { log "timed out waiting for $ARGO_DIR/.build.lock"; exit 1; }
if [[ "${TASKGATE_ARGO_FORCE:-0}" != 1 ]] && ready; then
  echo "$BIN_DIR"; exit 0
fi
rm -f "$STAMP"

export GOTOOLCHAIN=local          # never fetch another toolchain
export GOFLAGS="-mod=mod -buildvcs=false"
export GOWORK=off
export CGO_ENABLED=0

log "building $ARGO_MODULE/cmd/workflow-controller $ARGO_VERSION (go $GO_VERSION)"
t0=$(date +%s)
# The module has no replace directives, so `go install pkg@version` builds it with
# its own go.mod and go.sum (checked against the checksum database).
GOBIN="$BIN_DIR" go install -trimpath \
  -ldflags "-s -w -X $ARGO_MODULE.version=$ARGO_VERSION -X $ARGO_MODULE.gitTag=$ARGO_VERSION -X $ARGO_MODULE.gitTreeState=clean" \
  "$ARGO_MODULE/cmd/workflow-controller@$ARGO_VERSION" >&2
# The CRDs and the controller's manifests come from the same module version.
src="$(go mod download -json "$ARGO_MODULE@$ARGO_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
[[ -d "$src/manifests/base/crds/minimal" ]] || { log "no CRDs in $src"; exit 1; }
rm -rf "$ARGO_DIR/crds"; mkdir -p "$ARGO_DIR/crds"
cp "$src"/manifests/base/crds/minimal/argoproj.io_*.yaml "$ARGO_DIR/crds/"
echo "$STAMP_CONTENT" > "$STAMP"
log "workflow-controller $ARGO_VERSION built in $(( $(date +%s) - t0 ))s"
echo "$(date -u +%FT%TZ) argo $ARGO_VERSION $(( $(date +%s) - t0 ))s" >> "$CACHE_ROOT/argo/build-times.log"
echo "$BIN_DIR"
