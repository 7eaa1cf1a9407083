# Shared by scripts/image/*.sh (sourced): where the image tools keep their state.
# shellcheck shell=bash

CACHE_ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
IMAGE_DIR="$CACHE_ROOT/image"
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO_DIR/Cargo.toml" | head -n 1)"
IMAGE="${TASKGATE_IMAGE:-localhost/taskgate:$VERSION}"

# buildah keeps its images under the cache (vfs: plain folders, no overlay mounts
# needed, so it works where fuse and overlay do not).
BUILDAH=(buildah --root "$IMAGE_DIR/storage" --runroot "$IMAGE_DIR/run" --storage-driver vfs)

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }

# Skip (exit 0) with a reason, or fail when CI requires every suite to run.
unavailable() {
  if [[ "${TASKGATE_REQUIRE_E2E:-}" == 1 ]]; then
    log "FAILED: $* (TASKGATE_REQUIRE_E2E=1)"
    exit 1
  fi
  log "skipped: $*"
  exit 0
}

# Installs the Debian packages providing the given commands (as `command:package`)
# when missing. The downloaded .deb files stay in the cache for the next machine.
ensure_commands() {
  local need=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
  done
  (( ${#need[@]} == 0 )) && return 0
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    unavailable "missing ${need[*]} and cannot install them (needs root and apt-get)"
  fi
  log "installing ${need[*]}"
  local archives="$CACHE_ROOT/apt/archives"
  mkdir -p "$archives/partial"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dir::Cache::Archives="$archives" -o APT::Sandbox::User=root "${need[@]}" >&2
}
