#!/usr/bin/env bash
# Stop the Argo Workflows controller that scripts/argo/up.sh started for KUBECONFIG
# (by its recorded pid only). The CRDs and the objects stay (the cluster is the
# tests' own; scripts/k8s/cluster-down.sh removes it).
# Usage: scripts/argo/down.sh [KUBECONFIG]   (default: $TASKGATE_KUBECONFIG, else $KUBECONFIG)
set -euo pipefail
KCFG="${1:-${TASKGATE_KUBECONFIG:-${KUBECONFIG:-}}}"
[[ -n "$KCFG" ]] || { echo "[argo-down] no kubeconfig" >&2; exit 1; }
KCFG="$(cd "$(dirname "$KCFG")" && pwd)/$(basename "$KCFG")"
ARGO_VERSION="${TASKGATE_ARGO_VERSION:-v4.0.5}"
RUN_DIR="${TASKGATE_CACHE:-$HOME/.cache/taskgate}/argo/$ARGO_VERSION/run-$(printf '%s' "$KCFG" | sha256sum | cut -c1-12)"
PID_FILE="$RUN_DIR/controller.pid"
if [[ -f "$PID_FILE" ]] && pid="$(cat "$PID_FILE")" && kill -0 "$pid" 2>/dev/null; then
  kill "$pid"
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
  echo "[argo-down] stopped the controller (pid $pid)" >&2
fi
rm -f "$PID_FILE" "$RUN_DIR/argo.env"
