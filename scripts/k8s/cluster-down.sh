#!/usr/bin/env bash
# Stop and delete the kwok cluster started by scripts/k8s/cluster-up.sh.
# Keeps the built binaries (build-tools.sh cache); removes the cluster workdir,
# the kubeconfig and cluster.env. Safe to run when no cluster exists.
set -euo pipefail

CACHE_ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
K8S_DIR="$CACHE_ROOT/k8s"
CLUSTER="${TASKGATE_K8S_CLUSTER:-taskgate-e2e}"
export KWOK_WORKDIR="$K8S_DIR/kwok"
CLUSTER_DIR="$KWOK_WORKDIR/clusters/$CLUSTER"
KWOKCTL="$K8S_DIR/bin/kwokctl"

log() { printf '[cluster-down] %s\n' "$*" >&2; }

mkdir -p "$K8S_DIR"
exec 8>"$K8S_DIR/.cluster.lock"   # same lock as cluster-up.sh
flock -w 120 8 || log "lock $K8S_DIR/.cluster.lock still busy after 120s; going on anyway"

if [[ -d "$CLUSTER_DIR" ]]; then
  pids=()
  for f in "$CLUSTER_DIR"/pids/*.pid; do
    [[ -f "$f" ]] && pids+=("$(cat "$f")")
  done
  if [[ -x "$KWOKCTL" ]]; then
    log "deleting cluster $CLUSTER"
    HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost \
      "$KWOKCTL" delete cluster --name "$CLUSTER" </dev/null >&2 8>&- || log "kwokctl delete failed; killing pids"
  fi
  # kwokctl sends SIGTERM and returns at once: wait for the processes to go
  # (so ports are free for the next cluster-up), then SIGKILL leftovers.
  for _ in $(seq 1 100); do
    alive=()
    for pid in "${pids[@]}"; do
      [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && alive+=("$pid")
    done
    (( ${#alive[@]} == 0 )) && break
    [[ -x "$KWOKCTL" ]] || kill "${alive[@]}" 2>/dev/null || true
    sleep 0.1
  done
  for pid in "${alive[@]}"; do
    log "killing leftover pid $pid"
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$CLUSTER_DIR"
else
  log "no cluster $CLUSTER"
fi
rm -f "$K8S_DIR/kubeconfig" "$K8S_DIR/cluster.env"
