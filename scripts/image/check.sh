#!/usr/bin/env bash
# Checks a built taskgate image's root file system the way a container runtime
# would run it, without a runtime (this machine cannot run containers): the
# image's files, read-only, in a private mount namespace, with a tmpfs on each
# declared volume, the example config mounted at /etc/taskgate (as a ConfigMap
# would be, with the example's tool scripts beside it), and `chroot` as the image's own user, environment, working folder
# and entrypoint (all read from the image's config).
#
# Asserts: the OCI labels; a numeric non-root user; `--version`; `check-config`
# on config.example.toml passing (spool volume writable); `serve` answering
# /healthz; then `serve` as a container reachable from other hosts runs it: on
# 0.0.0.0, with its seal key and a bearer token read from 0400 files under
# /run/secrets (a tmpfs, as a runtime mounts secrets), refusing a request without
# the token (401) and answering one with it. Any failure exits non-zero.
#
# Usage: scripts/image/check.sh [IMAGE]     (default localhost/taskgate:<version>)
set -euo pipefail
source "$(dirname "$0")/common.sh"

fail() { log "FAILED: $*"; exit 1; }

if [[ "${1:-}" == --inside ]]; then
  # ------------------------------------------ in the private mount namespace --
  shift
  root=$1 uid=$2 gid=$3 workdir=$4 confdir=$5 volumes=$6 envfile=$7 epfile=$8
  mapfile -t envs <"$envfile"
  mapfile -t entrypoint <"$epfile"
  mount --make-rprivate /
  mount --bind "$root" "$root"
  mount -o remount,bind,ro "$root"
  for v in $volumes; do
    mount -t tmpfs -o "mode=0700,uid=$uid,gid=$gid,size=16m" tmpfs "$root$v"
  done
  mount --bind "$confdir" "$root/etc/taskgate"
  mount -o remount,bind,ro "$root/etc/taskgate"
  mount --rbind /dev "$root/dev"
  mount -t proc proc "$root/proc" 2>/dev/null || mount --rbind /proc "$root/proc"
  # As the image's user, with exactly the image's environment (and the example's
  # sealing key) and working folder.
  image_cmd=(chroot --userspec="$uid:$gid" --groups="$gid" "$root" /usr/bin/env -i -C "$workdir" "${envs[@]}")
  as_image() { "${image_cmd[@]}" "$@"; }

  grep -q ' ro[, ]' <(findmnt -no OPTIONS --target "$root" | sed 's/^/ /;s/$/ /') \
    || fail "the root file system is not mounted read-only"
  [[ "$(as_image /usr/bin/id -u)" == "$uid" ]] || fail "not running as uid $uid"

  out="$(as_image "${entrypoint[@]}" --version)" || fail "--version exited $?"
  log "--version: $out"
  [[ "$out" == "taskgate $VERSION" ]] || fail "--version printed '$out', expected 'taskgate $VERSION'"

  if ! out="$(as_image "${entrypoint[@]}" check-config 2>&1)"; then
    printf '%s\n' "$out" >&2; fail "check-config failed"
  fi
  printf '%s\n' "$out" | sed 's/^/[check-config] /' >&2
  grep -q "configuration is valid" <<<"$out" || fail "check-config did not validate the config"
  grep -q "spool folder /var/lib/taskgate/spool is writable" <<<"$out" \
    || fail "check-config did not find the spool volume writable"

  # serve: bind a free port, wait for the address in the log, ask /healthz.
  log_file="$(mktemp)"
  # (chroot execs env, which execs taskgate: $! is taskgate itself.)
  "${image_cmd[@]}" "${entrypoint[@]}" serve --listen 127.0.0.1:0 </dev/null >/dev/null 2>"$log_file" &
  pid=$!
  trap 'kill -KILL "$pid" 2>/dev/null; rm -f "$log_file"' EXIT
  deadline=$(( $(date +%s) + 20 ))
  url=""
  while [[ -z "$url" ]]; do
    url="$(sed -n 's#.*listening on \(http://[0-9.:]*\)/mcp.*#\1#p' "$log_file" | head -n 1)"
    kill -0 "$pid" 2>/dev/null || { cat "$log_file" >&2; fail "serve exited"; }
    (( $(date +%s) < deadline )) || { cat "$log_file" >&2; fail "serve did not listen within 20s"; }
    [[ -n "$url" ]] || sleep 0.2
  done
  health="$(curl -fsS --max-time 5 "$url/healthz")" || fail "GET $url/healthz failed"
  [[ "$health" == ok ]] || fail "/healthz answered '$health'"
  log "serve: $url/healthz -> $health"
  kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
  trap - EXIT
  rm -f "$log_file"

  # As a container reachable from other hosts: never anonymous. The secrets are
  # files only the image's user may read, on a tmpfs at /run as a runtime makes it.
  [[ -d "$root/run" ]] || fail "the image has no /run to mount secrets under"
  mount -t tmpfs -o mode=0755,size=1m tmpfs "$root/run"
  mkdir -p "$root/run/secrets/taskgate"
  cp "$confdir/../secrets/k1" "$confdir/../secrets/ci-bot" "$root/run/secrets/taskgate/"
  chown "$uid:$gid" "$root/run/secrets/taskgate"/*
  chmod 0400 "$root/run/secrets/taskgate"/*
  log_file="$(mktemp)"
  "${image_cmd[@]}" "${entrypoint[@]}" serve --config container.toml </dev/null >/dev/null 2>"$log_file" &
  pid=$!
  trap 'kill -KILL "$pid" 2>/dev/null; rm -f "$log_file"' EXIT
  deadline=$(( $(date +%s) + 20 ))
  port=""
  while [[ -z "$port" ]]; do
    port="$(sed -n 's#.*listening on http://0\.0\.0\.0:\([0-9]*\)/mcp.*#\1#p' "$log_file" | head -n 1)"
    kill -0 "$pid" 2>/dev/null || { cat "$log_file" >&2; fail "serve on 0.0.0.0 with a bearer token exited"; }
    (( $(date +%s) < deadline )) || { cat "$log_file" >&2; fail "serve on 0.0.0.0 did not listen within 20s"; }
    [[ -n "$port" ]] || sleep 0.2
  done
  init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"image-check","version":"1"}}}'
  post() { curl -sS -o /dev/null -w '%{http_code}' --max-time 5 -X POST "http://127.0.0.1:$port/mcp" \
             -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' "$@" -d "$init"; }
  code="$(post)" || fail "POST /mcp without a token failed"
  [[ "$code" == 401 ]] || fail "POST /mcp without a token answered $code, not 401"
  code="$(post -H "authorization: Bearer $(cat "$confdir/../secrets/ci-bot")")" || fail "POST /mcp with the token failed"
  [[ "$code" == 200 ]] || { cat "$log_file" >&2; fail "POST /mcp with the token answered $code, not 200"; }
  log "serve on 0.0.0.0:$port: no token -> 401, bearer token -> 200"
  kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
  trap - EXIT
  rm -f "$log_file"
  exit 0
fi

# ------------------------------------------------------------------ outside --
image="${1:-$IMAGE}"
ensure_commands buildah:buildah unshare:util-linux curl:curl
[[ $(id -u) == 0 ]] || unavailable "the chroot checks need root (mount namespace, chroot)"
fmt() { "${BUILDAH[@]}" inspect --type image --format "$1" "$image"; }
fmt '{{.FromImageID}}' >/dev/null || fail "no image $image (run scripts/image/build.sh)"

for label in title description version revision created licenses; do
  value="$(fmt "{{index .OCIv1.Config.Labels \"org.opencontainers.image.$label\"}}")"
  [[ -n "$value" && "$value" != "<no value>" ]] || fail "label org.opencontainers.image.$label is missing"
done
[[ "$(fmt '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}')" == "$VERSION" ]] \
  || fail "label org.opencontainers.image.version is not $VERSION"

user="$(fmt '{{.OCIv1.Config.User}}')"
[[ "$user" =~ ^([0-9]+):([0-9]+)$ ]] || fail "the image's user '$user' is not numeric uid:gid"
uid=${BASH_REMATCH[1]} gid=${BASH_REMATCH[2]}
(( uid != 0 )) || fail "the image runs as root"
workdir="$(fmt '{{.OCIv1.Config.WorkingDir}}')"
volumes="$(fmt '{{range $k, $v := .OCIv1.Config.Volumes}}{{$k}} {{end}}')"
[[ " $volumes " == *" /var/lib/taskgate/spool "* ]] || fail "/var/lib/taskgate/spool is not a volume"

scratch="$(mktemp -d)"
ctr=""
cleanup() {
  [[ -n "$ctr" ]] && "${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1
  rm -rf "$scratch"
}
trap cleanup EXIT
fmt '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' | sed '/^$/d' >"$scratch/env"
# The example config ships no sealing key: it names TASKGATE_SEAL_KEY, given a
# fresh one here (as an operator's secret would be).
printf 'TASKGATE_SEAL_KEY=%s\n' "$(head -c 32 /dev/urandom | base64)" >>"$scratch/env"
fmt '{{range .OCIv1.Config.Entrypoint}}{{println .}}{{end}}' | sed '/^$/d' >"$scratch/entrypoint"
[[ -s "$scratch/entrypoint" ]] || fail "the image has no entrypoint"
mkdir -p "$scratch/config/examples"
cp "$REPO_DIR/config.example.toml" "$scratch/config/taskgate.toml"
# The example's tools, at the path the config names (relative to its folder).
cp -r "$REPO_DIR/examples/tools" "$scratch/config/examples/"
# A container's configuration: reachable from other hosts, so callers authenticate;
# the seal key and the token are files (mounted under /run/secrets inside).
cat > "$scratch/config/container.toml" <<'EOF'
[server]
listen = "0.0.0.0:0"

[keys]
seal = [{ id = "k1", secret_file = "/run/secrets/taskgate/k1" }]

[auth]
bearer = [{ caller = "ci-bot", token_file = "/run/secrets/taskgate/ci-bot" }]
default_access = [{ callers = ["ci-bot"] }]
EOF
mkdir -p "$scratch/secrets"
head -c 48 /dev/urandom | base64 -w0 > "$scratch/secrets/k1"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$scratch/secrets/ci-bot"
chmod 0700 "$scratch/secrets"
chmod -R a+rX "$scratch/config"

ctr="$("${BUILDAH[@]}" from --pull=never "$image")"
root="$("${BUILDAH[@]}" mount "$ctr")"
log "checking $image (user $uid:$gid, workdir $workdir, volumes $volumes) at $root"
unshare --mount --propagation private "$0" --inside "$root" "$uid" "$gid" "$workdir" \
  "$scratch/config" "$volumes" "$scratch/env" "$scratch/entrypoint"
log "all checks passed for $image"
