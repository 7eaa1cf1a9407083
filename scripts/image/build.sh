#!/usr/bin/env bash
# Builds taskgate's container image offline and checks it.
#
#   1. the Debian base image: `debootstrap --variant=minbase` of bookworm, tarred
#      into the cache and imported into buildah's store (done once per machine);
#   2. `cargo build --release` of the taskgate binary (target dir in the cache);
#   3. `buildah build` of ./Containerfile (chroot isolation, vfs storage) on that
#      base, tagged localhost/taskgate:<version>;
#   4. scripts/image/check.sh on the result (non-root, read-only root file system).
#
# Usage: scripts/image/build.sh        -> prints the image name on stdout
# Env:   TASKGATE_CACHE; TASKGATE_IMAGE (default localhost/taskgate:<version>);
#        TASKGATE_DEBIAN_SUITE (bookworm), TASKGATE_DEBIAN_MIRROR;
#        TASKGATE_IMAGE_REBASE=1 makes the base again (new Debian point release).
# Timings of each step are appended to $TASKGATE_CACHE/image/build-times.log.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO_DIR"

SUITE="${TASKGATE_DEBIAN_SUITE:-bookworm}"
MIRROR="${TASKGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "$IMAGE_DIR"
ensure_commands buildah:buildah debootstrap:debootstrap
times=()
t() { times+=("$1=$(( $(date +%s) - $2 ))s"); }

# ---------------------------------------------------------------- base ------
exec 9>"$IMAGE_DIR/.lock"
flock 9
BASE_TAR="$IMAGE_DIR/debian-$SUITE-minbase.tar"
if [[ "${TASKGATE_IMAGE_REBASE:-0}" == 1 || ! -s "$BASE_TAR" ]]; then
  t0=$(date +%s)
  log "debootstrap $SUITE (minbase) from $MIRROR"
  work="$(mktemp -d "$IMAGE_DIR/debootstrap.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  debootstrap --variant=minbase "$SUITE" "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
  # What a slim image leaves out: package caches, lists, docs, man pages, logs.
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/* \
         "$work"/rootfs/usr/share/doc/* "$work"/rootfs/usr/share/man/* \
         "$work"/rootfs/usr/share/info/* "$work"/rootfs/var/log/*.log \
         "$work"/rootfs/var/cache/debconf/*-old "$work"/rootfs/dev/*
  # The same sources a Debian image has (debootstrap writes only the main suite).
  printf 'deb %s %s main\ndeb %s %s-updates main\ndeb http://deb.debian.org/debian-security %s-security main\n' \
    "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" "$SUITE" > "$work/rootfs/etc/apt/sources.list"
  tar -C "$work/rootfs" --numeric-owner --sort=name -cf "$work/base.tar" .
  mv "$work/base.tar" "$BASE_TAR"
  rm -rf "$work"
  trap - EXIT
  t debootstrap "$t0"
fi
BASE_IMAGE="localhost/taskgate-base:$SUITE-$(sha256sum "$BASE_TAR" | cut -c1-12)"
if ! "${BUILDAH[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  t0=$(date +%s)
  log "importing $BASE_TAR as $BASE_IMAGE"
  ctr="$("${BUILDAH[@]}" from scratch)"
  "${BUILDAH[@]}" add "$ctr" "$BASE_TAR" / >/dev/null
  "${BUILDAH[@]}" config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label org.opencontainers.image.title="debian $SUITE minbase (local)" "$ctr"
  "${BUILDAH[@]}" commit -q --rm "$ctr" "$BASE_IMAGE" >/dev/null
  # Older bases (an earlier tarball) are not needed any more.
  "${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/taskgate-base:' \
    | grep -vxF "$BASE_IMAGE" | xargs -r "${BUILDAH[@]}" rmi -f >/dev/null 2>&1 || true
  t import "$t0"
fi
flock -u 9

# -------------------------------------------------------------- binary ------
# The release build keeps its target dir in the cache (outside the clone), so a
# rerun on the same machine, even from a fresh clone, rebuilds only taskgate's own
# crates; the binary is then put where the Containerfile expects it.
t0=$(date +%s)
release_target="${TASKGATE_RELEASE_TARGET:-$CACHE_ROOT/release-target}"
CARGO_TARGET_DIR="$release_target" cargo build --release --locked --bin taskgate >&2
mkdir -p target/release
cp -f "$release_target/release/taskgate" target/release/taskgate
t cargo-release "$t0"

# --------------------------------------------------------------- image ------
t0=$(date +%s)
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || revision="$revision-dirty"
created="$(git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)"
"${BUILDAH[@]}" build --isolation chroot --layers=false --pull=never \
  --build-arg BASE_IMAGE="$BASE_IMAGE" \
  --build-arg VERSION="$VERSION" \
  --build-arg REVISION="$revision" \
  --build-arg CREATED="$created" \
  -f Containerfile -t "$IMAGE" . >&2
t buildah-build "$t0"
# No layer cache (--layers=false): with vfs every cached step is a full copy of the
# file system, slower than running the one RUN step again. Drop the images this
# build replaced, so the store does not grow with every build.
"${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true

t0=$(date +%s)
"$REPO_DIR/scripts/image/check.sh" "$IMAGE" >&2
t chroot-checks "$t0"

log "built $IMAGE (${times[*]})"
echo "$(date -u +%FT%TZ) ${times[*]}" >> "$IMAGE_DIR/build-times.log"
echo "$IMAGE"
