#!/usr/bin/env bash
# Checks the Helm chart deploy/helm/taskgate with the real tools, on the control
# plane of scripts/k8s/cluster-up.sh (admin kubeconfig in TASKGATE_KUBECONFIG):
#
#   1. `helm lint --strict` with each ci/*-values.yaml, and with the default
#      values plus a bearer caller;
#   2. values that would put a secret in the ConfigMap are refused, and so is a
#      deployment other pods can reach without bearer tokens or OAuth (the
#      default values: no anonymous callers from the network); what the least-
#      privilege values render (secret files 0400, the ServiceAccount token and
#      the Role only for a kubernetes engine, the NetworkPolicy's ports and
#      peers, /metrics on its own port); the options for real clusters
#      (HorizontalPodAutoscaler, PodDisruptionBudget, topology spread, the
#      Grafana dashboard ConfigMap): off by default, what they render, the
#      values refused;
#   3. `helm template | kubectl apply --dry-run=server` for each values file
#      (the API server validates every object; a ServiceMonitor only when its
#      CRD is installed, otherwise it is rendered and left out);
#   4. `helm install --wait` in a namespace of its own, which enforces Pod
#      Security "restricted", with the ValidatingAdmissionPolicy on: the objects
#      exist, the Deployment's pods are Ready (kwok), the Role equals
#      deploy/rbac.yaml's, the NetworkPolicy names the API server's address;
#   5. `taskgate check-config` on the installed ConfigMap, in the view of one of
#      the installed pods (scripts/k8s/as-pod.sh: its ServiceAccount token bound
#      to that pod, the namespace's CA, the seal key Secret at its mount path):
#      the config parses, the Role suffices, the Job template passes a server-side
#      dry run;
#   6. the admission policy on the real API server: a taskgate-labelled Job with
#      an image or a ServiceAccount not allowed is refused, also when made by
#      taskgate's ServiceAccount without the label; an allowed one is admitted;
#      Jobs that are not taskgate's are left alone.
#
# Prints "chart: N passed, M failed". Without a cluster or helm it skips, unless
# TASKGATE_REQUIRE_E2E=1 (then it fails).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
chart="${TASKGATE_CHART:-deploy/helm/taskgate}"  # another copy of the chart, to compare
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
# The default values name no caller: they are refused (section 2); with one they lint.
with_caller=(--set auth.existingSecret=taskgate-tokens --set 'auth.bearer[0].caller=ci-bot'
             --set 'auth.bearer[0].secretKey=ci-bot')
check "helm lint --strict (default values and a bearer caller)" "$helm" lint --strict "$chart" "${with_caller[@]}"
for v in "${values[@]}"; do
  check "helm lint --strict -f $(basename "$v")" "$helm" lint --strict "$chart" -f "$v"
done

# Resource targets: the Role grants each resource a tool runs, once.
role=$("$helm" template tg "$chart" "${with_caller[@]}" -f tests/helm/resource-targets-values.yaml \
       --show-only templates/rbac.yaml 2>&1 || true)
if [[ "$(grep -c 'resources: \["workflows"\]' <<<"$role")" == 1 \
      && "$role" == *'apiGroups: ["ray.io"]'*'resources: ["rayjobs"]'*'verbs: ["create", "get", "list", "watch", "patch"]'* ]]; then
  ok "the Role grants the resources of the tools' resource targets"
else
  bad "the Role for resource targets: $role"
fi

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
refused "an unknown logFormat is refused" "neither json nor text" "${with_caller[@]}" --set logFormat=pretty

# No anonymous callers from the network (item 1): standalone, or any address other
# pods reach, needs bearer tokens or OAuth.
refused "standalone without bearer tokens or OAuth is refused" "no way to tell callers apart"
refused "a sidecar on a pod address without auth is refused" "no way to tell callers apart" \
  --set mode=sidecar --set listenAddress=0.0.0.0
check "a sidecar on loopback renders without auth" "$helm" template tg "$chart" --set mode=sidecar
check "standalone with OAuth renders" "$helm" template tg "$chart" \
  --set config.auth.oauth.resource=https://taskgate.example.com/mcp \
  --set 'config.auth.oauth.issuers[0].issuer=https://id.example.com'
refused "metricsPort equal to port is refused" "must differ from port" "${with_caller[@]}" --set metricsPort=8808
refused "an admission policy allowing no image is refused" "admissionPolicy.allowedImages" \
  "${with_caller[@]}" --set admissionPolicy.enabled=true

# What the least-privilege values render (item 13), read back by kubectl.
# (kubectl reads back every kind but the ServiceMonitor, which may have no CRD here:
# that one is kept aside in sm.yaml.)
render() {
  "$helm" template tg "$chart" "$@" > "$scratch/all.yaml" 2>"$scratch/err" || { cat "$scratch/err" >&2; return 1; }
  awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} !/\nkind: ServiceMonitor\n/' "$scratch/all.yaml" > "$scratch/r.yaml"
  awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} /\nkind: ServiceMonitor\n/' "$scratch/all.yaml" > "$scratch/sm.yaml"
}
field() { # kind, jsonpath: the field of the rendered object of that kind ("" if none)
  awk -v k="$1" 'BEGIN{RS="\n---\n"; ORS="\n---\n"} $0 ~ ("\nkind: " k "\n")' "$scratch/r.yaml" > "$scratch/one.yaml"
  [[ -s "$scratch/one.yaml" ]] || return 0
  "$kubectl" create --dry-run=client -o jsonpath="$2" -f "$scratch/one.yaml"
}
expect() { # description, wanted, actual
  if [[ "$2" == "$3" ]]; then ok "$1"; else bad "$1: wanted '$2', got '$3'"; fi
}
if render -f "$chart/ci/standalone-values.yaml" --set 'secretMounts[0].name=gh' \
     --set 'secretMounts[0].secretName=gh' --set 'secretMounts[0].mountPath=/run/secrets/gh'; then
  expect "every secret volume (keys, tokens, secretMounts) is mode 0400" "256 256 256" \
    "$(field Deployment '{range .spec.template.spec.volumes[*]}{.secret.defaultMode}{" "}{end}' | xargs)"
  expect "a kubernetes engine on the ServiceAccount: its token is mounted" "true true" \
    "$(field Deployment '{.spec.template.spec.automountServiceAccountToken}') $(field ServiceAccount '{.automountServiceAccountToken}')"
  expect "/metrics on its own port, probes there, the ServiceMonitor there" "9808 metrics metrics metrics" \
    "$(field Deployment '{.spec.template.spec.containers[0].ports[?(@.name=="metrics")].containerPort} {.spec.template.spec.containers[0].livenessProbe.httpGet.port} {.spec.template.spec.containers[0].readinessProbe.httpGet.port}') $(sed -n 's/^  - port: //p' "$scratch/sm.yaml")"
  expect "JSON logs by default (the container's first arguments)" "--log-format json serve" \
    "$(field Deployment '{.spec.template.spec.containers[0].args[0]} {.spec.template.spec.containers[0].args[1]} {.spec.template.spec.containers[0].args[2]}')"
  toml=$(field ConfigMap '{.data.taskgate\.toml}')
  grep -q '^metrics_listen = "0.0.0.0:9808"$' <<<"$toml" && ok "server.metrics_listen in the config" \
    || bad "no metrics_listen in: $toml"
  expect "NetworkPolicy: ingress to MCP (8808) from the namespace's pods only; metrics from nobody" \
    '8808:[{"podSelector":{}}];' \
    "$(field NetworkPolicy '{range .spec.ingress[*]}{.ports[0].port}:{.from}{";"}{end}')"
  expect "NetworkPolicy: egress to DNS and the API server only (no engine outside the cluster)" \
    '53,53|443,6443|' \
    "$(field NetworkPolicy '{range .spec.egress[*]}{.ports[*].port}{"|"}{end}' | tr ' ' ,)"
else
  bad "helm template (standalone values, secretMounts)"
fi
# No kubernetes engine: no API token, no Role; an engine outside the cluster: HTTPS out;
# a Prometheus allowed in on the metrics port.
if render "${with_caller[@]}" --set logFormat=text --set config.engines.cluster=null --set config.engines.gh.kind=github \
     --set config.engines.gh.token_env=GITHUB_TOKEN \
     --set 'networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring'; then
  expect "no kubernetes engine: no ServiceAccount token is mounted" "false false" \
    "$(field Deployment '{.spec.template.spec.automountServiceAccountToken}') $(field ServiceAccount '{.automountServiceAccountToken}')"
  expect "logFormat=text: text logs" "--log-format text" \
    "$(field Deployment '{.spec.template.spec.containers[0].args[0]} {.spec.template.spec.containers[0].args[1]}')"
  expect "no kubernetes engine: no Role, no RoleBinding" "" "$(field Role '{.metadata.name}')$(field RoleBinding '{.metadata.name}')"
  expect "NetworkPolicy: metrics port from the monitoring namespace" \
    '8808:;9808:monitoring;' \
    "$(field NetworkPolicy '{range .spec.ingress[*]}{.ports[0].port}{range .from[*]}:{.namespaceSelector.matchLabels.kubernetes\.io/metadata\.name}{end}{";"}{end}')"
  expect "NetworkPolicy: egress to DNS and HTTPS, not to the API server" '53,53|443|' \
    "$(field NetworkPolicy '{range .spec.egress[*]}{.ports[*].port}{"|"}{end}' | tr ' ' ,)"
else
  bad "helm template (a github engine, no kubernetes engine)"
fi

# The rendered TOML keeps integers integers and escapes strings.
toml=$("$helm" template tg "$chart" -f "$chart/ci/standalone-values.yaml" --show-only templates/configmap.yaml \
  | "$kubectl" create --dry-run=client -o jsonpath='{.data.taskgate\.toml}' -f - 2>&1)
if grep -q '^max_body_bytes = 1048576$' <<<"$toml" && grep -q 'maximum = 1000,' <<<"$toml" \
   && grep -q 'maximum = 0.5' <<<"$toml" && grep -q '^log_lines\|log_lines = 50' <<<"$toml"; then
  ok "values become TOML integers and floats"
else
  bad "values become TOML integers and floats"; printf '%s\n' "$toml" >&2
fi

# The chart for real clusters (ci/scaling-values.yaml turns each option on; that
# file is linted above and dry-run on the API server below): all off by default.
if render "${with_caller[@]}"; then
  expect "by default: no HorizontalPodAutoscaler, PodDisruptionBudget, spread or dashboard" \
    "1||||" \
    "$(field Deployment '{.spec.replicas}|{.spec.template.spec.topologySpreadConstraints}')|$(field HorizontalPodAutoscaler '{.metadata.name}')|$(field PodDisruptionBudget '{.metadata.name}')|$(grep -c 'grafana_dashboard' "$scratch/r.yaml" | sed 's/^0$//')"
else
  bad "helm template (default values and a caller)"
fi
if render -f "$chart/ci/scaling-values.yaml"; then
  selector=$(field Deployment '{.spec.selector.matchLabels}')
  expect "autoscaling: the HPA scales the Deployment on CPU and memory; the Deployment names no replicas" \
    "Deployment/tg-taskgate 2-6 cpu:70,memory:80, |" \
    "$(field HorizontalPodAutoscaler '{.spec.scaleTargetRef.kind}/{.spec.scaleTargetRef.name} {.spec.minReplicas}-{.spec.maxReplicas} {range .spec.metrics[*]}{.resource.name}:{.resource.target.averageUtilization},{end}') |$(field Deployment '{.spec.replicas}')"
  expect "the PodDisruptionBudget: minAvailable 1, the Deployment's selector" \
    "1 $selector" "$(field PodDisruptionBudget '{.spec.minAvailable} {.spec.selector.matchLabels}')"
  expect "topology spread across nodes and zones, each by the chart's selector labels" \
    "kubernetes.io/hostname:ScheduleAnyway:$selector;topology.kubernetes.io/zone:DoNotSchedule:$selector;" \
    "$(field Deployment '{range .spec.template.spec.topologySpreadConstraints[*]}{.topologyKey}:{.whenUnsatisfiable}:{.labelSelector.matchLabels}{";"}{end}')"
  awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} /\n  name: tg-taskgate-dashboard\n/' "$scratch/r.yaml" > "$scratch/dash.yaml"
  expect "the dashboard ConfigMap carries Grafana's sidecar label" "1 taskgate" \
    "$("$kubectl" create --dry-run=client -o jsonpath='{.metadata.labels.grafana_dashboard} {.metadata.annotations.grafana_folder}' -f "$scratch/dash.yaml")"
  "$kubectl" create --dry-run=client -o jsonpath='{.data.taskgate\.json}' -f "$scratch/dash.yaml" > "$scratch/dash.json"
  if [[ "$(cat "$scratch/dash.json")" == "$(cat deploy/grafana/taskgate.json)" ]]; then
    ok "the dashboard ConfigMap holds deploy/grafana/taskgate.json"
  else
    bad "the dashboard ConfigMap differs from deploy/grafana/taskgate.json"
  fi
else
  bad "helm template (ci/scaling-values.yaml)"
fi
expect "the sidecar's label is configurable" 'yes' \
  "$("$helm" template tg "$chart" "${with_caller[@]}" --set grafanaDashboard.enabled=true \
     --set grafanaDashboard.label=dashboards --set grafanaDashboard.labelValue=taskgate \
     --show-only templates/dashboard.yaml | grep -q '^    dashboards: "taskgate"$' && echo yes)"
refused "a PodDisruptionBudget with both minAvailable and maxUnavailable is refused" "exactly one of" \
  "${with_caller[@]}" --set podDisruptionBudget.enabled=true --set podDisruptionBudget.minAvailable=1
refused "autoscaling with maxReplicas below minReplicas is refused" "below autoscaling.minReplicas" \
  "${with_caller[@]}" --set autoscaling.enabled=true --set autoscaling.maxReplicas=1
refused "a CPU target without a CPU request is refused" "resources.requests.cpu" \
  "${with_caller[@]}" --set autoscaling.enabled=true --set resources.requests.cpu=null
refused "autoscaling a sidecar is refused" "scale your own pod" --set mode=sidecar --set autoscaling.enabled=true

# ------------------------------------------------- 3. server-side dry runs --
# The namespace enforces Pod Security "restricted", as README advises for the Jobs'.
kc create namespace "$ns" >/dev/null && kc label namespace "$ns" taskgate.io/e2e=true \
     pod-security.kubernetes.io/enforce=restricted >/dev/null \
  || { bad "create namespace $ns"; exit 1; }
has_servicemonitor=""
kc api-resources --api-group=monitoring.coreos.com -o name 2>/dev/null | grep -q '^servicemonitors' && has_servicemonitor=1
for v in default "${values[@]}"; do
  args=("${with_caller[@]}" --set admissionPolicy.enabled=true
        --set 'admissionPolicy.allowedImages[0]=registry.example.com/reports@sha256:*')
  [[ "$v" != default ]] && args=(-f "$v")
  name=$([[ "$v" == default ]] && echo "default values, a caller, the admission policy" || basename "$v")
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
     --set admissionPolicy.enabled=true --wait --timeout 120s > "$scratch/install.log" 2>&1; then
  ok "helm install --wait (2 replicas Ready, admitted under Pod Security restricted)"
else
  bad "helm install --wait"; cat "$scratch/install.log" >&2
  kc -n "$ns" get all >&2
fi
for obj in deployment/tg-taskgate service/tg-taskgate serviceaccount/tg-taskgate \
           role/tg-taskgate rolebinding/tg-taskgate configmap/tg-taskgate networkpolicy/tg-taskgate; do
  check "$obj exists after install" kc -n "$ns" get "$obj"
done
vap="tg-taskgate-$ns-jobs"
vap="${vap:0:63}"; vap="${vap%-}"
for obj in "validatingadmissionpolicy/$vap" "validatingadmissionpolicybinding/$vap"; do
  check "$obj exists after install" kc get "$obj"
done
# The NetworkPolicy lets taskgate reach the API server at the address its
# EndpointSlice names (read by the chart at install).
api_ip=$(kc get endpointslice -n default kubernetes -o jsonpath='{.endpoints[0].addresses[0]}')
api_port=$(kc get endpointslice -n default kubernetes -o jsonpath='{.ports[0].port}')
np_api=$(kc -n "$ns" get networkpolicy tg-taskgate \
  -o jsonpath='{range .spec.egress[*]}{range .to[*]}{.ipBlock.cidr}{end}|{.ports[*].port};{end}')
if [[ -n "$api_ip" && ";$np_api" == *";$api_ip/32|"*"$api_port"* ]]; then
  ok "NetworkPolicy egress to the API server's own address ($api_ip:$api_port)"
else
  bad "NetworkPolicy egress lacks the API server $api_ip:$api_port: $np_api"
fi
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
# Less deploy/rbac.yaml's CronJob rule, which the chart adds (as `get`) only for a
# tool with a `from_cronjob` target: `taskgate discover`, the rule's other user,
# runs from an operator's machine, not from the chart's pods.
file_rules=${file_rules/,\{\"apiGroups\":\[\"batch\"\],\"resources\":\[\"cronjobs\"\],\"verbs\":\[\"get\",\"list\"\]\}/}
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

# ------------------------------------------ 6. the admission policy, for real --
# Jobs as someone holding taskgate's token (or a changed template) would make them;
# the allowed image is the chart's Job template's, registry.example.com/reports:1.4.
job() { # name, image, labelled (yes|no), serviceAccountName ("" for none)
  printf 'apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: %s\n' "$1"
  [[ $3 == yes ]] && printf '  labels: {taskgate.io/tool: nightly_report}\n'
  printf 'spec:\n  template:\n    spec:\n      restartPolicy: Never\n'
  [[ -n $4 ]] && printf '      serviceAccountName: %s\n' "$4"
  printf '      securityContext: {runAsNonRoot: true, runAsUser: 10001, seccompProfile: {type: RuntimeDefault}}\n'
  printf '      containers:\n      - name: c\n        image: %s\n' "$2"
  printf '        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}\n'
}
make_job() { # name, image, labelled, sa, [kubectl args…]
  local spec; spec=$(job "$1" "$2" "$3" "$4"); shift 4
  kc -n "$ns" create "$@" -f - <<<"$spec" 2>&1
}
refused_job() { # description, message fragment, make_job args…
  local what=$1 want=$2 out; shift 2
  if out=$(make_job "$@"); then
    bad "$what: admitted"; kc -n "$ns" delete job "$1" --wait=false >/dev/null 2>&1
  elif [[ "$out" == *"$want"* ]]; then ok "$what"
  else bad "$what: refused for another reason: $out"
  fi
}
# The policy takes effect once the API server has loaded it: until a wrong image is
# refused (at most 60 s), a Job that got in is removed again.
deadline=$(( $(date +%s) + 60 )) active="" out=""
while (( $(date +%s) < deadline )); do
  if out=$(make_job vap-probe registry.example.com/evil:1 yes ""); then
    kc -n "$ns" delete job vap-probe --wait=false >/dev/null 2>&1
  elif [[ "$out" == *"images allowed by the taskgate chart"* ]]; then
    active=1; break
  fi
  sleep 0.5
done
if [[ -n "$active" ]]; then
  ok "a taskgate Job with an image not allowed is refused (ValidatingAdmissionPolicy)"
  refused_job "an allowed image under a ServiceAccount not allowed is refused" \
    "ServiceAccounts allowed by the taskgate chart" vap-sa registry.example.com/reports:1.4 yes admin
  refused_job "taskgate's ServiceAccount leaving the label off is refused all the same" \
    "images allowed by the taskgate chart" vap-unlabelled registry.example.com/evil:1 no "" \
    --as "system:serviceaccount:$ns:tg-taskgate"
  refused_job "an image that only starts like the allowed one is refused" \
    "images allowed by the taskgate chart" vap-lookalike registry.example.com/reports:1.4-evil yes ""
  check "a taskgate Job with the allowed image is admitted" \
    make_job vap-ok registry.example.com/reports:1.4 yes ""
  check "taskgate's ServiceAccount may still make an allowed Job" \
    make_job vap-ok-sa registry.example.com/reports:1.4 yes "" --as "system:serviceaccount:$ns:tg-taskgate"
  check "a Job that is not taskgate's is left alone" \
    make_job other-team registry.example.com/evil:1 no ""
else
  bad "the admission policy never refused a Job with an image not allowed: $out"
fi

if "$helm" uninstall tg -n "$ns" --wait --timeout 60s >/dev/null 2>&1; then
  ok "helm uninstall"
else
  bad "helm uninstall"
fi

echo "chart: $passed passed, $failed failed"
[[ "$failed" == 0 ]]
