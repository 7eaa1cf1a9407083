#!/usr/bin/env bash
# Run the Argo Workflows controller (built by scripts/argo/build.sh) against the
# tests' Kubernetes control plane (scripts/k8s/cluster-up.sh): install Argo's CRDs
# (from the same module version), make the controller's namespace and configmap,
# start the controller as a local process (out of cluster, on the admin
# kubeconfig, leader election off), and wait until it has run a Workflow.
#
# Usage: scripts/argo/up.sh [KUBECONFIG]   (default: $TASKGATE_KUBECONFIG, else $KUBECONFIG)
#   -> prints the controller's env file (ARGO_NAMESPACE=..., ARGO_PID=..., ARGO_LOG=...)
# Idempotent: a controller already running for this kubeconfig is reused.
#
# SECURITY: the controller build (v4.0.5) has reported security flaws; it only runs
# here, against the throw-away loopback cluster of the tests.
#
# Env: TASKGATE_ARGO_NAMESPACE (default argo: the controller's configmap and the
#      readiness probe live there; it manages Workflows in every namespace),
#      TASKGATE_ARGO_READY_TIMEOUT (seconds, default 180).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$SCRIPT_DIR/../.." && pwd)"
KCFG="${1:-${TASKGATE_KUBECONFIG:-${KUBECONFIG:-}}}"
[[ -n "$KCFG" && -f "$KCFG" ]] || { echo "[argo-up] no kubeconfig (argument, TASKGATE_KUBECONFIG or KUBECONFIG)" >&2; exit 1; }
KCFG="$(cd "$(dirname "$KCFG")" && pwd)/$(basename "$KCFG")"
NS="${TASKGATE_ARGO_NAMESPACE:-argo}"
READY_TIMEOUT="${TASKGATE_ARGO_READY_TIMEOUT:-180}"

log() { printf '[argo-up] %s\n' "$*" >&2; }

BIN_DIR="$("$SCRIPT_DIR/build.sh")"
ARGO_DIR="$(dirname "$BIN_DIR")"
K8S_BIN="$("$REPO_DIR/scripts/k8s/build-tools.sh")"
kc() { "$K8S_BIN/kubectl" --kubeconfig "$KCFG" --request-timeout=10s "$@"; }

# One controller per kubeconfig (per cluster).
RUN_DIR="$ARGO_DIR/run-$(printf '%s' "$KCFG" | sha256sum | cut -c1-12)"
mkdir -p "$RUN_DIR"
PID_FILE="$RUN_DIR/controller.pid"
LOG="$RUN_DIR/controller.log"
ENV_OUT="$RUN_DIR/argo.env"
exec 7>"$RUN_DIR/.lock"
flock -w 600 7 || { log "timed out waiting for $RUN_DIR/.lock"; exit 1; }

running() { [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

START_MS=$(date +%s%3N)
kc apply --server-side --force-conflicts -f "$ARGO_DIR/crds/" >&2
kc wait --for=condition=Established --timeout=60s -f "$ARGO_DIR/crds/" >&2
kc get namespace "$NS" >/dev/null 2>&1 || kc create namespace "$NS" >&2
# The controller's configuration: no metrics listener (no port to collide on).
kc -n "$NS" apply -f - >&2 <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: workflow-controller-configmap
data:
  metricsConfig: |
    enabled: false
  telemetryConfig: |
    enabled: false
YAML

if running; then
  log "reusing the controller (pid $(cat "$PID_FILE"))"
else
  log "starting workflow-controller $(basename "$ARGO_DIR")"
  # Detached from our fds (see scripts/k8s/cluster-up.sh), in its own session.
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd="${fd##*/}"
      if (( fd > 2 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    LEADER_ELECTION_DISABLE=true exec setsid "$BIN_DIR/workflow-controller" \
      --kubeconfig "$KCFG" --namespace "$NS" \
      --configmap workflow-controller-configmap \
      --executor-image argoexec:not-pulled-under-kwok \
      --workflow-workers 4 --pod-cleanup-workers 2 --workflow-ttl-workers 1 \
      --cron-workflow-workers 1 --workflow-archive-workers 1 \
      --qps 50 --burst 100 \
      </dev/null >"$LOG" 2>&1
  ) &
  echo $! > "$PID_FILE"
fi

# Ready = the controller ran a Workflow to its end (a suspend step: no pod).
probe="argo-ready-$(date +%s)"
kc -n "$NS" create -f - >&2 <<YAML
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: $probe
spec:
  entrypoint: ready
  templates:
  - name: ready
    suspend:
      duration: "0"
YAML
deadline=$(( $(date +%s) + READY_TIMEOUT ))
until [[ "$(kc -n "$NS" get workflow "$probe" -o jsonpath='{.status.phase}' 2>/dev/null)" == Succeeded ]]; do
  if ! running; then log "the controller exited; its log: $LOG"; tail -20 "$LOG" >&2; exit 1; fi
  if (( $(date +%s) > deadline )); then log "timed out waiting for the controller; its log: $LOG"; exit 1; fi
  sleep 0.5
done
kc -n "$NS" delete workflow "$probe" --wait=false >/dev/null 2>&1 || true
ms=$(( $(date +%s%3N) - START_MS ))
log "controller ready in $((ms / 1000)).$(printf %03d $((ms % 1000)))s (pid $(cat "$PID_FILE"), log $LOG)"
cat > "$ENV_OUT" <<ENV
ARGO_NAMESPACE=$NS
ARGO_PID=$(cat "$PID_FILE")
ARGO_LOG=$LOG
ARGO_VERSION=$(basename "$ARGO_DIR")
ENV
echo "$ENV_OUT"
