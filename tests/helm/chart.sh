#!/usr/bin/env bash
# Checks the Helm chart deploy/helm/taskgate with the real tools, on the control
# plane of scripts/k8s/cluster-up.sh (admin kubeconfig in TASKGATE_KUBECONFIG):
#
#   1. `helm lint --strict` with the default values and each ci/*-values.yaml;
#   2. values that would put a secret in the ConfigMap are refused;
#   3. `helm template | kubectl apply --dry-run=server` for each values file
#      (the API server validates every object; a ServiceMonitor only when its
#      CRD is installed, otherwise it is rendered and left out);
#   4. `helm install --wait` in a namespace of its own: the objects exist, the
#      Deployment's pods are Ready (kwok), the Role equals deploy/rbac.yaml's;
#   5. `taskgate check-config` on the installed ConfigMap, in the view of one of
#      the installed pods (scripts/k8s/as-pod.sh: its ServiceAccount token bound
#      to that pod, the namespace's CA, the seal key Secret at its mount path):
#      the config parses, the Role suffices, the Job template passes a server-side
#      dry run.
#
# Prints "chart: N passed, M failed". Without a cluster or helm it skips, unless
# TASKGATE_REQUIRE_E2E=1 (then it fails).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
chart=deploy/helm/taskgate
export TASKGATE_CACHE="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"

log() { printf '[chart] %s\n' "$*" >&2; }
unavailable() {
  if [[ "${TASKGATE_REQUIRE_E2E:-}" == 1 ]]; then log "FAILED: $* (TASKGATE_REQUIRE_E2E=1)"; exit 1; fi
  log "skipped: $*"; exit 0
}
passed=0 failed=0
ok() { passed=$((passed + 1)); log "ok: $*"; }
bad() { failed=$((failed + 1)); log "FAILED: $*"; }
check() { # description, command...
  local what=$1; shift
  local out
  if out=$("$@" 2>&1); then ok "$what"; else bad "$what"; printf '%s\n' "$out" | tail -n 30 >&2; fi
}

[[ -n "${TASKGATE_KUBECONFIG:-}" && -f "${TASKGATE_KUBECONFIG:-}" ]] \
  || unavailable "TASKGATE_KUBECONFIG is not set (scripts/k8s/cluster-up.sh prints it)"
export KUBECONFIG="$TASKGATE_KUBECONFIG"
helm=$(scripts/helm/install.sh) || unavailable "helm could not be built (scripts/helm/install.sh)"
kubectl="$TASKGATE_CACHE/k8s/bin/kubectl"
[[ -x "$kubectl" ]] || kubectl=$(command -v kubectl) || unavailable "no kubectl"
bin="${TASKGATE_BIN:-$root/target/debug/taskgate}"
[[ -x "$bin" ]] || unavailable "no taskgate binary at $bin (cargo build)"
kc() { "$kubectl" --request-timeout=20s "$@"; }
# Helm keeps its own caches and config out of $HOME.
export HELM_CACHE_HOME="$TASKGATE_CACHE/helm/cache" HELM_CONFIG_HOME="$TASKGATE_CACHE/helm/config"
export HELM_DATA_HOME="$TASKGATE_CACHE/helm/data"

scratch=$(mktemp -d)
ns="tg-e2e-helm-$$-$RANDOM"
cleanup() {
  "$helm" uninstall tg -n "$ns" --wait=false >/dev/null 2>&1
  kc delete namespace "$ns" --wait=false >/dev/null 2>&1
  rm -rf "$scratch"
}
trap cleanup EXIT
values=("$chart"/ci/*-values.yaml)

# ------------------------------------------------------------------ 1. lint --
check "helm lint --strict (default values)" "$helm" lint --strict "$chart"
for v in "${values[@]}"; do
  check "helm lint --strict -f $(basename "$v")" "$helm" lint --strict "$chart" -f "$v"
done

# --------------------------------------------------- 2. no secrets in values --
refused() { # description, expected message fragment, helm args...
  local what=$1 want=$2; shift 2
  local out
  if out=$("$helm" template tg "$chart" "$@" 2>&1); then
    bad "$what: rendered anyway"
  elif [[ "$out" == *"$want"* ]]; then
    ok "$what"
  else
    bad "$what: unexpected error: $out"
  fi
}
refused "an inline seal key is refused" "config.keys" --set 'config.keys.seal[0].id=k1'
refused "a dev_secret anywhere is refused" "secrets do not belong in values" \
  --set 'config.engines.gh.kind=github' --set 'config.engines.gh.dev_secret=x'
refused "a token under an engine is refused" "config.engines.gh.token" \
  --set 'config.engines.gh.kind=github' --set 'config.engines.gh.token=ghp_x'
refused "an unknown mode is refused" "mode must be standalone or sidecar" --set mode=daemon

# The rendered TOML keeps integers integers and escapes strings.
toml=$("$helm" template tg "$chart" -f "$chart/ci/standalone-values.yaml" --show-only templates/configmap.yaml \
  | "$kubectl" create --dry-run=client -o jsonpath='{.data.taskgate\.toml}' -f - 2>&1)
if grep -q '^max_body_bytes = 1048576$' <<<"$toml" && grep -q 'maximum = 1000,' <<<"$toml" \
   && grep -q 'maximum = 0.5' <<<"$toml" && grep -q '^log_lines\|log_lines = 50' <<<"$toml"; then
  ok "values become TOML integers and floats"
else
  bad "values become TOML integers and floats"; printf '%s\n' "$toml" >&2
fi

# ------------------------------------------------- 3. server-side dry runs --
kc create namespace "$ns" >/dev/null && kc label namespace "$ns" taskgate.io/e2e=true >/dev/null \
  || { bad "create namespace $ns"; exit 1; }
has_servicemonitor=""
kc api-resources --api-group=monitoring.coreos.com -o name 2>/dev/null | grep -q '^servicemonitors' && has_servicemonitor=1
for v in default "${values[@]}"; do
  args=()
  [[ "$v" != default ]] && args=(-f "$v")
  name=$([[ "$v" == default ]] && echo "default values" || basename "$v")
  if ! "$helm" template tg "$chart" -n "$ns" "${args[@]}" > "$scratch/rendered.yaml" 2>"$scratch/err"; then
    bad "helm template ($name)"; cat "$scratch/err" >&2; continue
  fi
  if [[ -z "$has_servicemonitor" ]] && grep -q '^kind: ServiceMonitor$' "$scratch/rendered.yaml"; then
    log "no ServiceMonitor CRD in this cluster: dry-running the other objects of $name"
    awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} !/\nkind: ServiceMonitor\n/' "$scratch/rendered.yaml" > "$scratch/r2.yaml"
    mv "$scratch/r2.yaml" "$scratch/rendered.yaml"
  fi
  check "kubectl apply --dry-run=server ($name)" kc apply --dry-run=server -n "$ns" -f "$scratch/rendered.yaml"
done

# deploy/sidecar.yaml (the hand-written sidecar example), in this namespace.
sed "s/namespace: taskgate$/namespace: $ns/" deploy/sidecar.yaml > "$scratch/sidecar.yaml"
check "kubectl apply --dry-run=server (deploy/sidecar.yaml)" kc apply --dry-run=server -f "$scratch/sidecar.yaml"

# ------------------------------------------------------------- 4. install --
kc -n "$ns" create secret generic taskgate-keys --from-literal=k1="$(head -c 32 /dev/urandom | base64)" >/dev/null
kc -n "$ns" create secret generic taskgate-tokens --from-literal=ci-bot="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >/dev/null
sm_args=()
[[ -z "$has_servicemonitor" ]] && sm_args=(--set serviceMonitor.enabled=false)
if "$helm" install tg "$chart" -n "$ns" -f "$chart/ci/standalone-values.yaml" "${sm_args[@]}" \
     --wait --timeout 120s > "$scratch/install.log" 2>&1; then
  ok "helm install --wait (2 replicas Ready)"
else
  bad "helm install --wait"; cat "$scratch/install.log" >&2
  kc -n "$ns" get all >&2
fi
for obj in deployment/tg-taskgate service/tg-taskgate serviceaccount/tg-taskgate \
           role/tg-taskgate rolebinding/tg-taskgate configmap/tg-taskgate; do
  check "$obj exists after install" kc -n "$ns" get "$obj"
done
ready=$(kc -n "$ns" get deployment tg-taskgate -o jsonpath='{.status.readyReplicas}')
[[ "$ready" == 2 ]] && ok "2 ready replicas" || bad "ready replicas: '$ready'"

# The pod spec as the API server stored it.
jp() { kc -n "$ns" get deployment tg-taskgate -o jsonpath="$1"; }
sc=$(jp '{.spec.template.spec.securityContext.runAsNonRoot} {.spec.template.spec.securityContext.runAsUser} {.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation} {.spec.template.spec.containers[0].securityContext.capabilities.drop}')
[[ "$sc" == 'true 10001 true false ["ALL"]' ]] && ok "securityContext: non-root, read-only root, no escalation, no capabilities" \
  || bad "securityContext is '$sc'"
probes=$(jp '{.spec.template.spec.containers[0].livenessProbe.httpGet.path} {.spec.template.spec.containers[0].readinessProbe.httpGet.path}')
[[ "$probes" == "/healthz /healthz" ]] && ok "liveness and readiness on /healthz" || bad "probes: '$probes'"
[[ "$(jp '{.spec.template.spec.serviceAccountName}')" == tg-taskgate ]] && ok "pods run as ServiceAccount tg-taskgate" \
  || bad "serviceAccountName"

# The chart's Role is deploy/rbac.yaml's Role.
chart_rules=$(kc -n "$ns" get role tg-taskgate -o jsonpath='{.rules}')
# (the ServiceAccount and RoleBinding have no rules: only the Role's print)
file_rules=$(kc create --dry-run=client -o jsonpath='{.rules}' -f deploy/rbac.yaml)
[[ -n "$chart_rules" && "$chart_rules" == "$file_rules" ]] && ok "the chart's Role has deploy/rbac.yaml's rules" \
  || bad "Role rules differ: chart $chart_rules, deploy/rbac.yaml $file_rules"

# -------------------------------------- 5. check-config in an installed pod's view --
pod=$(kc -n "$ns" get pods -l app.kubernetes.io/instance=tg -o jsonpath='{.items[0].metadata.name}')
uid=$(kc -n "$ns" get pod "$pod" -o jsonpath='{.metadata.uid}')
mkdir -p "$scratch/sa" "$scratch/keys" "$scratch/tokens" "$scratch/config/jobs"
kc -n "$ns" create token tg-taskgate --bound-object-kind Pod --bound-object-name "$pod" \
  --bound-object-uid "$uid" --duration 1h > "$scratch/sa/token"
kc -n "$ns" get configmap kube-root-ca.crt -o jsonpath='{.data.ca\.crt}' > "$scratch/sa/ca.crt"
printf '%s' "$ns" > "$scratch/sa/namespace"
kc -n "$ns" get secret taskgate-keys -o jsonpath='{.data.k1}' | base64 -d > "$scratch/keys/k1"
kc -n "$ns" get secret taskgate-tokens -o jsonpath='{.data.ci-bot}' | base64 -d > "$scratch/tokens/ci-bot"
kc -n "$ns" get configmap tg-taskgate -o jsonpath='{.data.taskgate\.toml}' > "$scratch/config/taskgate.toml"
kc -n "$ns" get configmap tg-taskgate -o jsonpath='{.data.job-report\.yaml}' > "$scratch/config/jobs/report.yaml"
server=$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')
# The image's working folder is /etc/taskgate, where the ConfigMap is mounted.
if out=$(cd "$scratch/config" && "$root/scripts/k8s/as-pod.sh" \
      --mount "$scratch/keys:/run/secrets/taskgate/keys" --mount "$scratch/tokens:/run/secrets/taskgate/tokens" \
      "$scratch/sa" "$server" -- "$bin" check-config --config taskgate.toml 2>&1); then
  printf '%s\n' "$out" | sed 's/^/[check-config] /' >&2
  if grep -q "engine cluster (kubernetes): ok" <<<"$out" && grep -q "in namespace $ns" <<<"$out" \
     && grep -q "tool nightly_report: ok" <<<"$out"; then
    ok "check-config on the installed ConfigMap, in-cluster as the chart's ServiceAccount"
  else
    bad "check-config output lacks the engine/namespace/tool lines"
  fi
else
  bad "check-config on the installed ConfigMap"; printf '%s\n' "$out" >&2
fi

if "$helm" uninstall tg -n "$ns" --wait --timeout 60s >/dev/null 2>&1; then
  ok "helm uninstall"
else
  bad "helm uninstall"
fi

echo "chart: $passed passed, $failed failed"
[[ "$failed" == 0 ]]
