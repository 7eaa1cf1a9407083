#!/usr/bin/env bash
# Smoke test of the kwok e2e cluster: checks that the stages in tests/k8s/stages.yaml
# and the real Job / TTL controllers behave as the taskgate Kubernetes engine tests expect.
# Usage: tests/k8s/smoke.sh   (starts the cluster via scripts/k8s/cluster-up.sh if needed)
# Prints one line per check and a closing "N passed, N failed" line.
set -uo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KUBECONFIG="$("$REPO_DIR/scripts/k8s/cluster-up.sh")" || { echo "cluster-up failed"; exit 1; }
export KUBECONFIG
# shellcheck disable=SC1090
source "$(dirname "$KUBECONFIG")/cluster.env"
k() { "$KUBECTL" --request-timeout=10s "$@"; }

NS="smoke-$(date +%s)-$$"
k create namespace "$NS" >/dev/null
# ServiceAccount admission needs the namespace's default SA before pods can be made.
for _ in $(seq 1 60); do k -n "$NS" get sa default >/dev/null 2>&1 && break; sleep 0.5; done
trap 'k delete namespace "$NS" --wait=false >/dev/null 2>&1' EXIT

pass=0; fail=0
ok()  { echo "ok   - $*"; pass=$((pass+1)); }
bad() { echo "FAIL - $*"; fail=$((fail+1)); }

job() { # name, extra spec yaml (indented 2), pod annotations yaml (indented 8)
  k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: $1
spec:
$2
  template:
    metadata:
      annotations:
$3
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:fake
        command: ["sh", "-c", "echo hi"]
EOF
}

# 1. parallelism 2 / completions 3, pods stay Running for 3s -> Complete
t0=$(date +%s%3N)
job par "  parallelism: 2
  completions: 3
  backoffLimit: 0" '        taskgate.test/duration: "3s"
        taskgate.test/termination-message: "all good"'
seen_running=0
for _ in $(seq 1 40); do
  n=$(k -n "$NS" get pods -l job-name=par --field-selector=status.phase=Running -o name 2>/dev/null | wc -l)
  (( n > seen_running )) && seen_running=$n
  (( seen_running >= 2 )) && break
  sleep 0.25
done
(( seen_running == 2 )) && ok "parallel job: saw 2 pods Running at once" || bad "parallel job: max Running pods seen = $seen_running"
if k -n "$NS" wait --for=condition=Complete job/par --timeout=60s >/dev/null; then
  ok "parallel job Complete after $(( ($(date +%s%3N) - t0) ))ms, succeeded=$(k -n "$NS" get job par -o jsonpath='{.status.succeeded}')"
else
  bad "parallel job not Complete: $(k -n "$NS" get job par -o jsonpath='{.status}')"
fi
msg=$(k -n "$NS" get pods -l job-name=par -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.message}')
[[ "$msg" == "all good" ]] && ok "success termination message: '$msg'" || bad "success termination message: '$msg'"

# 2. failing job, backoffLimit 0 -> Failed/BackoffLimitExceeded, exit code + message from annotations
job boom "  backoffLimit: 0" '        taskgate.test/duration: "1s"
        taskgate.test/fail: "true"
        taskgate.test/exit-code: "3"
        taskgate.test/termination-message: "kaboom: disk on fire"'
if k -n "$NS" wait --for=condition=Failed job/boom --timeout=60s >/dev/null; then
  reason=$(k -n "$NS" get job boom -o jsonpath='{.status.conditions[?(@.type=="Failed")].reason}')
  [[ "$reason" == BackoffLimitExceeded ]] && ok "failing job Failed reason=$reason" || bad "failing job reason=$reason"
else
  bad "failing job not Failed: $(k -n "$NS" get job boom -o jsonpath='{.status}')"
fi
term=$(k -n "$NS" get pods -l job-name=boom -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated}')
code=$(k -n "$NS" get pods -l job-name=boom -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.exitCode}')
msg=$(k -n "$NS" get pods -l job-name=boom -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.message}')
phase=$(k -n "$NS" get pods -l job-name=boom -o jsonpath='{.items[0].status.phase}')
[[ "$code" == 3 && "$msg" == "kaboom: disk on fire" && "$phase" == Failed ]] \
  && ok "failed pod: phase=$phase exitCode=$code message='$msg'" || bad "failed pod terminated=$term phase=$phase"

# 3. pod logs via the pods/log API (kwok serves the ClusterLogs file)
pod=$(k -n "$NS" get pods -l job-name=boom -o jsonpath='{.items[0].metadata.name}')
logs=$(k -n "$NS" logs "$pod" 2>&1)
[[ "$logs" == *"log line 1"* ]] && ok "kubectl logs: $(echo "$logs" | wc -l) lines" || bad "kubectl logs: $logs"

# 4. ttlSecondsAfterFinished -> Job deleted by the TTL-after-finished controller
job ttl "  ttlSecondsAfterFinished: 1" '        taskgate.test/duration: "500ms"'
k -n "$NS" wait --for=condition=Complete job/ttl --timeout=60s >/dev/null || bad "ttl job not Complete"
t0=$(date +%s%3N)
if k -n "$NS" wait --for=delete job/ttl --timeout=60s >/dev/null 2>&1; then
  ok "ttl job deleted $(( $(date +%s%3N) - t0 ))ms after Complete"
else
  bad "ttl job still present"
fi

# 5. suspended Job: no pods until spec.suspend=false
job susp "  suspend: true" '        taskgate.test/duration: "500ms"'
# The job controller marks the Job Suspended once it has handled it: from then on
# "no pods" means it chose not to make any (not that it has not got to it yet).
k -n "$NS" wait --for=condition=Suspended job/susp --timeout=60s >/dev/null || true
n=$(k -n "$NS" get pods -l job-name=susp -o name | wc -l)
cond=$(k -n "$NS" get job susp -o jsonpath='{.status.conditions[?(@.type=="Suspended")].status}')
(( n == 0 )) && [[ "$cond" == True ]] && ok "suspended job: 0 pods, Suspended=$cond" || bad "suspended job: pods=$n Suspended=$cond"
k -n "$NS" patch job susp --type=merge -p '{"spec":{"suspend":false}}' >/dev/null
if k -n "$NS" wait --for=condition=Complete job/susp --timeout=60s >/dev/null; then
  ok "resumed job Complete"
else
  bad "resumed job not Complete: $(k -n "$NS" get job susp -o jsonpath='{.status}')"
fi

echo "smoke: $pass passed, $fail failed"
(( fail == 0 ))
