#!/usr/bin/env bash
# Runs a command the way a container in a pod sees the cluster, without a kubelet:
#   - the ServiceAccount files (token, ca.crt, namespace) of SA_DIR, read-only, at
#     /var/run/secrets/kubernetes.io/serviceaccount, in a private mount namespace
#     (a fresh tmpfs on /run, as a container's own /run would be; the rest of the
#     host's file system is unchanged);
#   - KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT from API_URL;
#   - an environment of PATH, HOME=/nonexistent (as in taskgate's image), and the
#     NAME=VALUE pairs given, nothing else: no KUBECONFIG, no ~/.kube/config.
# The command replaces this script's process (same pid: killing it kills the
# command; the mount namespace goes with it).
#
# Usage: scripts/k8s/as-pod.sh [--mount SRC:DST ...] SA_DIR API_URL [NAME=VALUE ...] -- COMMAND [ARG ...]
#   --mount SRC:DST  also mounts folder SRC read-only at DST, which must be under
#                    /run (a Secret volume, say /run/secrets/taskgate/keys).
#   API_URL is https://HOST:PORT (an IP or a name; the API server's certificate
#   must name it, as it names the kubernetes Service's ClusterIP in a real pod).
# Needs root (or CAP_SYS_ADMIN) for the mount namespace; exits 125 if it cannot
# make one, else with the command's status.
set -euo pipefail

if [[ "${1:-}" == --inside ]]; then
  shift
  sa_dir=$1 run_dir=$2 mounts=$3
  shift 3
  mount --make-rprivate /
  mount -t tmpfs -o mode=0755,size=4m tmpfs "$run_dir"
  ro_bind() { mkdir -p "$2"; mount --bind "$1" "$2"; mount -o remount,bind,ro "$2"; }
  ro_bind "$sa_dir" "$run_dir/secrets/kubernetes.io/serviceaccount"
  while IFS=: read -r src dst; do
    [[ -n "$src" ]] && ro_bind "$src" "$run_dir/${dst#/run/}"
  done <<<"$mounts"
  exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/nonexistent "$@"
fi

mounts=""
while [[ "${1:-}" == --mount ]]; do
  [[ "${2:-}" =~ ^([^:]+):(/run/[^:]+)$ ]] || { echo "$0: --mount takes SRC:DST with DST under /run, not ${2:-}" >&2; exit 2; }
  mounts+="$(cd "${BASH_REMATCH[1]}" && pwd):${BASH_REMATCH[2]}"$'\n'
  shift 2
done
(( $# >= 4 )) || { echo "usage: $0 SA_DIR API_URL [NAME=VALUE ...] -- COMMAND [ARG ...]" >&2; exit 2; }
sa_dir="$(cd "$1" && pwd)"
api="$2"
shift 2
for f in token ca.crt namespace; do
  [[ -s "$sa_dir/$f" ]] || { echo "$0: $sa_dir/$f is missing or empty" >&2; exit 2; }
done
[[ "$api" =~ ^https://(\[[0-9a-fA-F:]+\]|[^:/]+):([0-9]+)/?$ ]] || {
  echo "$0: API_URL must be https://HOST:PORT, not $api" >&2; exit 2; }
host="${BASH_REMATCH[1]}" port="${BASH_REMATCH[2]}"
host="${host#[}" host="${host%]}"
vars=("KUBERNETES_SERVICE_HOST=$host" "KUBERNETES_SERVICE_PORT=$port" "KUBERNETES_SERVICE_PORT_HTTPS=$port")
while (( $# > 0 )) && [[ "$1" != -- ]]; do
  [[ "$1" == *=* ]] || { echo "$0: expected NAME=VALUE or --, got $1" >&2; exit 2; }
  vars+=("$1")
  shift
done
[[ "${1:-}" == -- ]] || { echo "$0: missing -- before the command" >&2; exit 2; }
shift
(( $# > 0 )) || { echo "$0: no command" >&2; exit 2; }

# /var/run is usually a link to /run: mount where it really points.
run_dir="$(readlink -f /var/run)"
unshare --mount --propagation private true 2>/dev/null || {
  echo "$0: cannot make a mount namespace (needs root or CAP_SYS_ADMIN)" >&2; exit 125; }
exec unshare --mount --propagation private "$0" --inside "$sa_dir" "$run_dir" "$mounts" "${vars[@]}" "$@"
