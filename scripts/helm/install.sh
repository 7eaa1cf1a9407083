#!/usr/bin/env bash
# Build Helm (v4, from its Go module) into ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/helm/bin.
#
# Idempotent: a stamp records the version and Go toolchain; a rerun with both
# unchanged only prints the path of the helm binary.
#
# Usage: scripts/helm/install.sh        -> prints the helm binary's path on stdout
# Env:   TASKGATE_CACHE, TASKGATE_HELM_VERSION (default below)
# Progress goes to stderr; only the path goes to stdout.
set -euo pipefail

HELM_VERSION="${TASKGATE_HELM_VERSION:-v4.3.2}"
CACHE_ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
HELM_DIR="$CACHE_ROOT/helm"
BIN_DIR="$HELM_DIR/bin"
STAMP="$BIN_DIR/.stamp"

log() { printf '[helm-install] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
stamp_content="helm=$HELM_VERSION go=$(go env GOVERSION)"

if [[ -x "$BIN_DIR/helm" && -f "$STAMP" && "$(cat "$STAMP")" == "$stamp_content" ]]; then
  echo "$BIN_DIR/helm"
  exit 0
fi

mkdir -p "$BIN_DIR"
exec 9>"$HELM_DIR/.build.lock"
flock 9
if [[ -x "$BIN_DIR/helm" && -f "$STAMP" && "$(cat "$STAMP")" == "$stamp_content" ]]; then
  echo "$BIN_DIR/helm"
  exit 0
fi
rm -f "$STAMP"

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

log "building helm $HELM_VERSION"
t0=$(date +%s)
# helm reports its version from these variables (the release build sets them too).
ld="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
GOBIN="$BIN_DIR" go install -trimpath -ldflags "$ld" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >&2
"$BIN_DIR/helm" version >&2
echo "$stamp_content" > "$STAMP"
log "helm built in $(( $(date +%s) - t0 ))s"
echo "$(date -u +%FT%TZ) $stamp_content total=$(( $(date +%s) - t0 ))s" >> "$HELM_DIR/build-times.log"
echo "$BIN_DIR/helm"
