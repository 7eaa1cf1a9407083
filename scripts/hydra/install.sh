#!/usr/bin/env bash
# Builds ORY Hydra (the OAuth 2.1 authorization server taskgate's authorization tests
# run against) from its Go module, pinned, into ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/hydra/bin.
#
# Hydra's go.mod carries replace directives, which `go install module@version` refuses,
# so the module's source is downloaded through the Go module proxy (`go mod download`,
# checked against the checksum database) and built inside a copy of it. The build needs
# cgo and the `sqlite` tag: `hydra serve --dev` with DSN `memory` is an in-memory SQLite.
#
# Idempotent: a stamp records the version and Go toolchain; a rerun only prints the path.
# Usage: scripts/hydra/install.sh     -> prints the hydra binary's path on stdout
# Env:   TASKGATE_HYDRA_VERSION (default v2.3.0), TASKGATE_CACHE
set -euo pipefail

VERSION="${TASKGATE_HYDRA_VERSION:-v2.3.0}"
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
dir="$cache/hydra"
bin="$dir/bin/hydra"
stamp="$dir/bin/.stamp"

log() { printf '[hydra-install] %s\n' "$*" >&2; }
command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
want="hydra=$VERSION go=$(go env GOVERSION) tags=sqlite"

if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$dir/bin"
exec 9>"$dir/.lock"
flock 9
if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "$bin"
    exit 0
fi

export GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=1
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
t0=$(date +%s)
log "downloading github.com/ory/hydra/v2@$VERSION"
info="$(go mod download -json "github.com/ory/hydra/v2@$VERSION")"
src="$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
[[ -d "$src" ]] || { log "module source not found: $info"; exit 1; }
build="$dir/build"
rm -rf "$build"
cp -r "$src" "$build"
chmod -R u+w "$build"
# The module's zip leaves out internal/httpclient (a nested module that the replace
# points at); the same generated client is published as its own module.
(cd "$build" && go mod edit -dropreplace=github.com/ory/hydra-client-go/v2)
log "building hydra $VERSION (cgo, sqlite; a few minutes on a cold cache)"
(cd "$build" && go build -trimpath -tags sqlite,sqlite_omit_load_extension \
    -ldflags "-s -w -X github.com/ory/hydra/v2/driver/config.Version=$VERSION" -o "$bin.tmp" .) >&2
mv "$bin.tmp" "$bin"
rm -rf "$build"
echo "$want" >"$stamp"
log "built in $(( $(date +%s) - t0 ))s"
echo "$(date -u +%FT%TZ) $want total=$(( $(date +%s) - t0 ))s" >>"$dir/build-times.log"
echo "$bin"
