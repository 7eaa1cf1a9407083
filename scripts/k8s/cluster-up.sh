#!/usr/bin/env bash
# Start (or reuse) a real Kubernetes control plane with a kwok fake node:
# etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok-controller,
# all local processes started by `kwokctl --runtime binary`, all bound to 127.0.0.1.
#
# Usage: scripts/k8s/cluster-up.sh        -> prints the kubeconfig path on stdout
# Writes:
#   $K8S_DIR/kubeconfig    admin kubeconfig (client certs, https://127.0.0.1:<port>)
#   $K8S_DIR/cluster.env   KUBECONFIG=..., KUBECTL=..., TASKGATE_K8S_BIN=..., TASKGATE_K8S_LOG_FILE=...,
#                          TASKGATE_K8S_AUDIT_LOG=... (the API server's audit log, one line a request)
# where K8S_DIR=${TASKGATE_CACHE:-$HOME/.cache/taskgate}/k8s
#
# Idempotent: if the cluster exists, was made from the same config and is healthy
# it is reused (takes ~1s); otherwise it is deleted and created again.
# Env: TASKGATE_K8S_CLUSTER (default taskgate-e2e), TASKGATE_K8S_APISERVER_PORT
#      (default: kwokctl picks a free port counting down from 32767, never 8808),
#      TASKGATE_K8S_RECREATE=1 forces a fresh cluster.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$SCRIPT_DIR/../.." && pwd)"
CACHE_ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
K8S_DIR="$CACHE_ROOT/k8s"
CLUSTER="${TASKGATE_K8S_CLUSTER:-taskgate-e2e}"
STAGES="$REPO_DIR/tests/k8s/stages.yaml"
NODE_NAME="kwok-node-0"

log() { printf '[cluster-up] %s\n' "$*" >&2; }

BIN_DIR="$("$SCRIPT_DIR/build-tools.sh")"
KUBECTL="$BIN_DIR/kubectl"
KWOKCTL="$BIN_DIR/kwokctl"
KUBE_VERSION="$(sed -n 's/.*kube=\([^ ]*\).*/\1/p' "$BIN_DIR/.stamp")"

export KWOK_WORKDIR="$K8S_DIR/kwok"
CLUSTER_DIR="$KWOK_WORKDIR/clusters/$CLUSTER"
KUBECONFIG_OUT="$K8S_DIR/kubeconfig"
ENV_OUT="$K8S_DIR/cluster.env"
CONFIG="$K8S_DIR/kwokctl-$CLUSTER.yaml"
LOG_FILE="$K8S_DIR/pod-logs.log"
mkdir -p "$K8S_DIR" "$KWOK_WORKDIR"

# Serialise cluster-up/cluster-down. kwokctl is always run through `detached`,
# which closes every fd above 2: the daemons kwokctl spawns inherit all
# non-CLOEXEC fds of their caller, and would otherwise hold this lock (and any
# pipe of whoever called us) for as long as the cluster lives.
detached() {
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd="${fd##*/}"
      if (( fd > 2 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec "$@" </dev/null
  )
}
exec 8>"$K8S_DIR/.cluster.lock"
flock -w 600 8 || { log "timed out waiting for $K8S_DIR/.cluster.lock"; exit 1; }

# kwokctl must never download anything: every binary it could want is either a
# local path or a path that does not exist (then it fails instead of fetching),
# and a dead proxy catches anything else (loopback is never proxied).
export KWOK_KUBECTL_BINARY="$KUBECTL"
export KWOK_QUIET_PULL=true
NOFETCH="$K8S_DIR/bin-not-available"
# kwokctl runs `kubectl` from PATH before its configured binary: put ours first.
no_download_env=(PATH="$BIN_DIR:$PATH" HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9
                 http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9
                 NO_PROXY=127.0.0.1,localhost,::1 no_proxy=127.0.0.1,localhost,::1)

# Canned container log (CRI log format) served for every pod via ClusterLogs.
cat > "$LOG_FILE" <<'EOF'
2024-01-01T00:00:00.000000000Z stdout F taskgate kwok pod log line 1
2024-01-01T00:00:01.000000000Z stdout F taskgate kwok pod log line 2
2024-01-01T00:00:02.000000000Z stderr F taskgate kwok pod log line 3 (stderr)
EOF

# The API server's audit policy: one Metadata-level event per request (no
# bodies), so tests can count the requests the API server received
# (tests/faults/main.rs); the log rotates at 100 MB, one old file kept. A change here changes the config hash: the next start
# recreates the cluster.
AUDIT_POLICY="$K8S_DIR/audit-policy.yaml"
cat > "$AUDIT_POLICY.new" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
EOF
mv "$AUDIT_POLICY.new" "$AUDIT_POLICY"
AUDIT_LOG="$CLUSTER_DIR/logs/audit.log"

port_line=""
if [[ -n "${TASKGATE_K8S_APISERVER_PORT:-}" ]]; then
  port_line="  kubeApiserverPort: ${TASKGATE_K8S_APISERVER_PORT}"
fi

{
  cat <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
$port_line
  kubeVersion: $KUBE_VERSION
  securePort: true
  quietPull: true
  cacheDir: $K8S_DIR/kwok-cache
  kubeApiserverBinary: $BIN_DIR/kube-apiserver
  kubeAuditPolicy: $AUDIT_POLICY
  kubeControllerManagerBinary: $BIN_DIR/kube-controller-manager
  kubeSchedulerBinary: $BIN_DIR/kube-scheduler
  kubectlBinary: $KUBECTL
  etcdBinary: $BIN_DIR/etcd
  kwokControllerBinary: $BIN_DIR/kwok
  etcdctlBinary: $NOFETCH/etcdctl
  etcdutlBinary: $NOFETCH/etcdutl
  kectlBinary: $NOFETCH/kectl
  prometheusBinary: $NOFETCH/prometheus
  jaegerBinary: $NOFETCH/jaeger
  metricsServerBinary: $NOFETCH/metrics-server
  kindBinary: $NOFETCH/kind
# No KwokConfiguration document here on purpose: kwokctl passes it through
# without defaulting, so a partial one zeroes enableDebuggingHandlers (no logs)
# and nodeLeaseParallelism (kwok exits). Tweak kwok via extraArgs instead.
componentsPatches:
- name: kube-apiserver
  extraArgs:
  - key: audit-log-maxsize
    value: "100"
  - key: audit-log-maxbackup
    value: "1"
- name: kwok-controller
  extraArgs:
  - key: node-ip
    value: 127.0.0.1
    override: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: taskgate-all-pods
spec:
  selector: {}
  logs:
  - logsFile: $LOG_FILE
    follow: false
EOF
  # The Stage set (kwok drops all its default stages once any Stage is given).
  echo "---"
  cat "$STAGES"
} > "$CONFIG.new"
mv "$CONFIG.new" "$CONFIG"

# kwok CRDs served by the API server: a test points one pod's container log at a
# file of its own with a `Logs` object (the ClusterLogs above serves every other pod).
KWOK_CRDS=Logs
CONFIG_HASH="$( { cat "$CONFIG"; cat "$BIN_DIR/.stamp"; echo "crds=$KWOK_CRDS"; } | sha256sum | cut -c1-16)"

kc() { "$KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig.yaml" --request-timeout=5s "$@"; }

healthy() {
  [[ -f "$CLUSTER_DIR/kubeconfig.yaml" ]] || return 1
  kc get --raw /readyz >/dev/null 2>&1 || return 1
  [[ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

write_outputs() {
  cp "$CLUSTER_DIR/kubeconfig.yaml" "$KUBECONFIG_OUT.tmp" && mv "$KUBECONFIG_OUT.tmp" "$KUBECONFIG_OUT"
  cat > "$ENV_OUT" <<EOF
KUBECONFIG=$KUBECONFIG_OUT
KUBECTL=$KUBECTL
TASKGATE_K8S_BIN=$BIN_DIR
TASKGATE_K8S_CLUSTER=$CLUSTER
TASKGATE_K8S_LOG_FILE=$LOG_FILE
TASKGATE_K8S_AUDIT_LOG=$AUDIT_LOG
EOF
  echo "$KUBECONFIG_OUT"
}

if [[ "${TASKGATE_K8S_RECREATE:-0}" != 1 && -f "$CLUSTER_DIR/.taskgate-hash" \
      && "$(cat "$CLUSTER_DIR/.taskgate-hash")" == "$CONFIG_HASH" ]]; then
  if healthy; then
    log "reusing healthy cluster $CLUSTER"
    write_outputs
    exit 0
  fi
  log "cluster $CLUSTER exists but is not healthy; recreating"
fi

START_MS=$(date +%s%3N)
if [[ -d "$CLUSTER_DIR" ]]; then
  log "deleting old cluster $CLUSTER"
  detached env "${no_download_env[@]}" "$KWOKCTL" delete cluster --name "$CLUSTER" >&2 || true
  rm -rf "$CLUSTER_DIR"
fi

log "creating cluster $CLUSTER (kube $KUBE_VERSION)"
if ! detached env "${no_download_env[@]}" "$KWOKCTL" create cluster \
      --name "$CLUSTER" \
      --runtime binary \
      --config "$CONFIG" \
      --enable-crds "$KWOK_CRDS" \
      --kubeconfig "" \
      --timeout 5m >&2; then
  log "kwokctl create cluster failed; component logs are in $CLUSTER_DIR/logs"
  exit 1
fi

deadline=$(( $(date +%s) + 180 ))
wait_for() { # description, command...
  local what="$1"; shift
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) > deadline )); then
      log "timed out waiting for $what; logs in $CLUSTER_DIR/logs"; exit 1
    fi
    sleep 0.5
  done
}

wait_for "apiserver /readyz" kc get --raw /readyz

# One fake node managed by kwok (kwokctl's binary runtime runs kwok with
# --manage-all-nodes=true, so any Node object is taken over by kwok).
kc apply -f - >&2 <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $NODE_NAME
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: $NODE_NAME
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
EOF

node_ready() {
  [[ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
wait_for "node $NODE_NAME Ready" node_ready
# Pods are rejected until the ServiceAccount admission finds the default SA.
wait_for "default service account" kc -n default get serviceaccount default

echo "$CONFIG_HASH" > "$CLUSTER_DIR/.taskgate-hash"
ms=$(( $(date +%s%3N) - START_MS )); ELAPSED="$((ms / 1000)).$(printf %03d $((ms % 1000)))"
log "cluster $CLUSTER ready in ${ELAPSED}s"
echo "$(date -u +%FT%TZ) cluster-up $CLUSTER ${ELAPSED}s" >> "$K8S_DIR/cluster-times.log"
write_outputs
