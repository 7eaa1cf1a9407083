#!/usr/bin/env bash
# Upstream cost of many listeners, per engine, with 1 and 3 replicas: one command.
#
#   BENCH_UPSTREAM_ENGINE=stepfunctions scripts/bench-upstream.sh   # moto: eval "$(scripts/moto/up.sh)"
#   BENCH_UPSTREAM_ENGINE=kubernetes scripts/bench-upstream.sh      # Jobs: TASKGATE_KUBECONFIG, TASKGATE_K8S_AUDIT_LOG
#   BENCH_UPSTREAM_ENGINE=argo scripts/bench-upstream.sh            # + the Argo controller (scripts/argo/up.sh)
#   BENCH_UPSTREAM_ENGINE=temporal scripts/bench-upstream.sh        # eval "$(scripts/temporal/up.sh)"
#   BENCH_UPSTREAM_ENGINE=airflow scripts/bench-upstream.sh         # eval "$(scripts/airflow/up.sh)"
#   BENCH_UPSTREAM_REPLICAS="1 3"  BENCH_UPSTREAM_SHAPES="shared own"  BENCH_UPSTREAM_N=100
#   BENCH_UPSTREAM_WINDOW=60s  BENCH_UPSTREAM_POLL=5s  BENCH_UPSTREAM_SETTLE=15s
#   BENCH_TASKGATE=/path/to/taskgate   # measure another build (default: a release build here)
#
# For each replica count R and shape, R fresh taskgate replicas (one config, one
# key, their own loopback ports; a release build) and the driver
# scripts/bench/upstream (Go standard library, the scripts/bench module; built here):
#
#   shared  one run, N listen streams on it, stream i on replica i mod R
#   own     N runs, one stream each, run and stream i on replica i mod R
#
# After the streams are open and BENCH_UPSTREAM_SETTLE has passed (every watch
# in its steady cycle), the requests the engine received during the quiet
# window are counted from the engine's own side:
#
#   stepfunctions  moto's access log (one line per request; every request of
#                  taskgate's in the window is a DescribeExecution): the log
#                  file is BENCH_UPSTREAM_MOTO_LOG, by default the one
#                  scripts/moto/up.sh writes for TASKGATE_MOTO_URL's port
#   kubernetes,    the API server's audit log (TASKGATE_K8S_AUDIT_LOG of
#   argo           scripts/k8s/cluster-up.sh: one event per request at Metadata
#                  level): requests of the bench's ServiceAccount, by verb and
#                  resource (a watch counted when it is received)
#   temporal       the frontend's Prometheus endpoint (TASKGATE_TEMPORAL_METRICS):
#                  service_requests_total in the bench's namespace, by
#                  operation, for the operations taskgate sends
#   airflow        the API server's access log (api-server.log in
#                  TASKGATE_AIRFLOW_HOME, one line a request): every request
#                  but the workers' (/execution/…), by method and path shape
#                  (ids as *, so anything unexpected has a row of its own),
#                  by when the request came (each count waits 5 s for the
#                  lines of the requests then in flight)
#
# and beside it what the replicas counted themselves (taskgate_engine_calls_total
# on their /metrics). Then the runs are cancelled. The engine's runs:
# stepfunctions a Standard state machine whose Wait state lasts an hour;
# kubernetes a Job whose kwok pod runs an hour (tests/k8s/stages.yaml);
# argo a Workflow whose one pod does; temporal a workflow on a task queue no
# worker polls (it stays Running); airflow a run of tg_bench_hold
# (tests/airflow/dags/taskgate_bench_dags.py), which stays running with its
# task never queued. The Kubernetes engines run as a fresh
# namespace's ServiceAccount with deploy/rbac.yaml (plus workflows for argo).
# Numbers belong in the engine READMEs and issue notes, never in test assertions.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
engine=${BENCH_UPSTREAM_ENGINE:?set BENCH_UPSTREAM_ENGINE: stepfunctions, kubernetes, argo, temporal or airflow}
replica_counts=${BENCH_UPSTREAM_REPLICAS:-1 3}
shapes=${BENCH_UPSTREAM_SHAPES:-shared own}
n=${BENCH_UPSTREAM_N:-100}
window=${BENCH_UPSTREAM_WINDOW:-60s}
poll=${BENCH_UPSTREAM_POLL:-5s}
settle=${BENCH_UPSTREAM_SETTLE:-15s}
cache=${TASKGATE_CACHE:-$HOME/.cache/taskgate}

command -v go >/dev/null || { echo "bench-upstream needs a Go toolchain for its driver" >&2; exit 1; }
bin="${BENCH_TASKGATE:-$root/target/release/taskgate}"
if [ -z "${BENCH_TASKGATE:-}" ]; then
    cargo build --release --quiet --bin taskgate
fi

work=$(mktemp -d)
replica_pids=()
ns=
kubectl_cmd=()
# A command that ends the runs a failed driver left running (where an engine
# needs one): run after a failed shape and on exit.
end_runs=
stop_replicas() {
    local p
    for p in "${replica_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${replica_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    replica_pids=()
}
cleanup() {
    stop_replicas
    if [ -n "$end_runs" ]; then sh -c "$end_runs" || true; fi
    if [ -n "$ns" ]; then "${kubectl_cmd[@]}" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
(cd scripts/bench && go build -o "$work/upstream" ./upstream)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tag="tg-bench-upstream-$$"

case "$engine" in
stepfunctions)
    : "${TASKGATE_MOTO_URL:?needs TASKGATE_MOTO_URL (eval \"\$(scripts/moto/up.sh)\")}"
    export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-testing} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-testing}
    export AWS_REGION=${AWS_REGION:-us-east-1} AWS_EC2_METADATA_DISABLED=true
    moto_log=${BENCH_UPSTREAM_MOTO_LOG:-$cache/moto-${TASKGATE_MOTO_URL##*:}.log}
    [ -f "$moto_log" ] || { echo "no moto log at $moto_log (BENCH_UPSTREAM_MOTO_LOG)" >&2; exit 1; }
    # moto takes any credentials: the JSON protocol by hand is enough here.
    definition='{"StartAt":"Idle","States":{"Idle":{"Type":"Wait","Seconds":3600,"End":true}}}'
    arn=$(curl -fsS --max-time 10 -X POST "$TASKGATE_MOTO_URL/" \
        -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: AWSStepFunctions.CreateStateMachine' \
        -H "Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/$AWS_REGION/states/aws4_request, SignedHeaders=host, Signature=0" \
        -d "$(python3 -c 'import json,sys; print(json.dumps({"name":sys.argv[1],"definition":sys.argv[2],"roleArn":"arn:aws:iam::123456789012:role/bench","type":"STANDARD"}))' "$tag" "$definition")" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["stateMachineArn"])')
    engine_toml=$(cat <<TOML
[engines.aws]
kind = "stepfunctions"
region = "$AWS_REGION"
endpoint_url = "$TASKGATE_MOTO_URL"

[[tools]]
name = "bench_tool"
engine = "aws"
mode = "async"
poll_interval = "$poll"
target = { state_machine_arn = "$arn" }
TOML
)
    # Every request moto served (werkzeug's access log: one line each).
    count="awk '/\"POST \\/ HTTP/ {c++} END {print \"requests\", c+0}' '$moto_log'"
    ;;
kubernetes | argo)
    : "${TASKGATE_KUBECONFIG:?needs TASKGATE_KUBECONFIG (the admin kubeconfig of scripts/k8s/cluster-up.sh)}"
    : "${TASKGATE_K8S_AUDIT_LOG:?needs TASKGATE_K8S_AUDIT_LOG (cluster.env of scripts/k8s/cluster-up.sh)}"
    if [ -n "${TASKGATE_K8S_BIN:-}" ]; then kubectl_cmd=("$TASKGATE_K8S_BIN/kubectl"); else kubectl_cmd=(kubectl); fi
    kubectl_cmd+=(--kubeconfig "$TASKGATE_KUBECONFIG" --request-timeout=20s)
    kc() { "${kubectl_cmd[@]}" "$@"; }
    ns=$tag
    kc create namespace "$ns" >/dev/null
    kc label namespace "$ns" taskgate.io/e2e=true >/dev/null
    sed "s/namespace: taskgate/namespace: $ns/" deploy/rbac.yaml | kc apply -f - >/dev/null
    checks=("create jobs.batch")
    if [ "$engine" = argo ]; then
        kc create role taskgate-workflows -n "$ns" --verb=create,get,list,watch,patch --resource=workflows.argoproj.io >/dev/null
        kc create rolebinding taskgate-workflows -n "$ns" --role=taskgate-workflows --serviceaccount="$ns:taskgate" >/dev/null
        checks+=("create workflows.argoproj.io")
    fi
    # The RBAC authorizer sees a new binding a moment after its create: wait (deadline) until it does.
    for check in "${checks[@]}"; do
        until_ts=$(( $(date +%s) + 60 ))
        # shellcheck disable=SC2086
        until [ "$(kc auth can-i $check -n "$ns" --as "system:serviceaccount:$ns:taskgate" 2>/dev/null)" = yes ]; do
            [ "$(date +%s)" -lt "$until_ts" ] || { echo "RBAC for the bench ServiceAccount not in force after 60 s" >&2; exit 1; }
            sleep 0.2
        done
    done
    token=$(kc create token taskgate -n "$ns" --duration=2h)
    server=$(kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
    ca=$(kc config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
    cat > "$work/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: bench, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: bench, user: {token: "$token"}}]
contexts: [{name: bench, context: {cluster: bench, user: bench, namespace: "$ns"}}]
current-context: bench
YAML
    chmod 600 "$work/kubeconfig"
    if [ "$engine" = kubernetes ]; then
        cat > "$work/job.yaml" <<'YAML'
apiVersion: batch/v1
kind: Job
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations: {taskgate.test/duration: "1h"}
    spec:
      restartPolicy: Never
      containers: [{name: main, image: "busybox:fake", command: ["sleep", "3600"]}]
YAML
        target="{ template_file = \"$work/job.yaml\" }"
    else
        cat > "$work/workflow.yaml" <<'YAML'
apiVersion: argoproj.io/v1alpha1
kind: Workflow
spec:
  entrypoint: main
  templates:
  - name: main
    metadata:
      annotations: {taskgate.test/duration: "1h"}
    container: {image: "busybox:fake", command: ["sleep", "3600"]}
YAML
        target="{ preset = \"argo-workflow\", template_file = \"$work/workflow.yaml\" }"
    fi
    engine_toml=$(cat <<TOML
[engines.k8s]
kind = "kubernetes"
kubeconfig = "$work/kubeconfig"
namespace = "$ns"

[[tools]]
name = "bench_tool"
engine = "k8s"
mode = "async"
poll_interval = "$poll"
target = $target
TOML
)
    # Requests of the bench's ServiceAccount the API server logged so far, by
    # verb and resource (each request once, by its audit id).
    cat > "$work/count.py" <<'PY'
import json, sys
path, user = sys.argv[1], sys.argv[2]
seen = {}
needle = '"username":"%s"' % user
with open(path, errors="replace") as f:
    for line in f:
        if needle not in line:
            continue
        e = json.loads(line)
        ref = e.get("objectRef", {})
        res = ref.get("resource", "?") + ("/" + ref["subresource"] if ref.get("subresource") else "")
        seen[e["auditID"]] = "%s_%s" % (e["verb"], res)
counts = {}
for k in seen.values():
    counts[k] = counts.get(k, 0) + 1
for k, v in sorted(counts.items()):
    print(k, v)
PY
    count="python3 '$work/count.py' '$TASKGATE_K8S_AUDIT_LOG' 'system:serviceaccount:$ns:taskgate'"
    ;;
temporal)
    : "${TASKGATE_TEMPORAL_ADDRESS:?needs TASKGATE_TEMPORAL_ADDRESS (eval \"\$(scripts/temporal/up.sh)\")}"
    : "${TASKGATE_TEMPORAL_METRICS:?needs TASKGATE_TEMPORAL_METRICS (eval \"\$(scripts/temporal/up.sh)\")}"
    tns=${TASKGATE_TEMPORAL_NAMESPACE:-taskgate-test}
    engine_toml=$(cat <<TOML
[engines.temporal]
kind = "temporal"
address = "$TASKGATE_TEMPORAL_ADDRESS"
namespace = "$tns"

[[tools]]
name = "bench_tool"
engine = "temporal"
mode = "async"
poll_interval = "$poll"
# No worker polls this queue: the workflow stays Running.
target = { workflow_type = "BenchIdle", task_queue = "$tag" }
TOML
)
    cat > "$work/count.py" <<'PY'
import re, sys, urllib.request
url, ns = sys.argv[1], sys.argv[2]
ops = {"StartWorkflowExecution", "DescribeWorkflowExecution", "GetWorkflowExecutionHistory",
       "PollWorkflowExecutionHistory", "QueryWorkflow", "UpdateWorkflowExecution",
       "SignalWorkflowExecution", "RequestCancelWorkflowExecution", "TerminateWorkflowExecution"}
counts = {}
text = urllib.request.urlopen(url, timeout=10).read().decode()
for line in text.splitlines():
    if not line.startswith("service_requests_total{"):
        continue
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line[:line.rindex("}")]))
    if labels.get("namespace") != ns or labels.get("operation") not in ops:
        continue
    counts[labels["operation"]] = counts.get(labels["operation"], 0) + float(line.split()[-1])
for k, v in sorted(counts.items()):
    print(k, int(v))
PY
    count="python3 '$work/count.py' '$TASKGATE_TEMPORAL_METRICS' '$tns'"
    ;;
airflow)
    : "${TASKGATE_AIRFLOW_URL:?needs TASKGATE_AIRFLOW_URL (eval \"\$(scripts/airflow/up.sh)\")}"
    : "${TASKGATE_AIRFLOW_USERNAME:?needs TASKGATE_AIRFLOW_USERNAME (eval \"\$(scripts/airflow/up.sh)\")}"
    : "${TASKGATE_AIRFLOW_PASSWORD:?needs TASKGATE_AIRFLOW_PASSWORD (eval \"\$(scripts/airflow/up.sh)\")}"
    : "${TASKGATE_AIRFLOW_HOME:?needs TASKGATE_AIRFLOW_HOME (eval \"\$(scripts/airflow/up.sh)\")}"
    access_log="$TASKGATE_AIRFLOW_HOME/api-server.log"
    [ -f "$access_log" ] || { echo "no api-server log at $access_log" >&2; exit 1; }
    # The replicas read the password from the environment they inherit, and
    # end-runs.py (below) all three.
    export TASKGATE_AIRFLOW_URL TASKGATE_AIRFLOW_USERNAME TASKGATE_AIRFLOW_PASSWORD
    engine_toml=$(cat <<TOML
[engines.airflow]
kind = "airflow"
base_url = "$TASKGATE_AIRFLOW_URL"
username = "$TASKGATE_AIRFLOW_USERNAME"
password_env = "TASKGATE_AIRFLOW_PASSWORD"
# A read slowed by the burst of a cycle's reads finishes rather than being sent
# again (the bench counts calls per cycle, not Airflow's latency).
read_timeout = "120s"

[[tools]]
name = "bench_tool"
engine = "airflow"
mode = "async"
poll_interval = "$poll"
# Its run stays running: its one task waits for a pool that does not exist.
target = { dag_id = "tg_bench_hold" }
TOML
)
    # The API server's requests taken before this count was called, by method
    # and path shape: ids become * (GET_dags/*/dagRuns/*/taskInstances); the
    # workers' execution API is left out. A request's line is written once it is
    # over, so a line's place says nothing of when its request came
    # (tests/common/airflow.rs): the count waits a few seconds for the requests
    # in flight when it was called, then takes those whose start (the line's
    # time less its duration_us) came before the call.
    cat > "$work/count.py" <<'PY'
import re, sys, time
from datetime import datetime
called = time.time()
time.sleep(float(sys.argv[2]))
ids_after = {"dags", "dagRuns", "taskInstances", "tasks", "xcomEntries", "logs"}
counts = {}
with open(sys.argv[1], errors="replace") as f:
    for line in f:
        if "[http.access]" not in line:
            continue
        method = re.search(r" method=(\S+)", line)
        path = re.search(r" path=(\S+)", line)
        took = re.search(r" duration_us=(\d+)", line)
        if not method or not path or not took:
            sys.exit("an access line this counter cannot read: " + line)
        if datetime.fromisoformat(line.split()[0]).timestamp() - int(took.group(1)) / 1e6 >= called:
            continue
        parts = path.group(1).strip("/").split("/")
        if parts[0] == "execution":
            continue
        if parts[:2] == ["api", "v2"]:
            parts = parts[2:]
        shape = [("*" if i > 0 and parts[i - 1] in ids_after else p) for i, p in enumerate(parts)]
        key = method.group(1) + "_" + "/".join(shape)
        counts[key] = counts.get(key, 0) + 1
for k, v in sorted(counts.items()):
    print(k, v)
PY
    count="python3 '$work/count.py' '$access_log' 5"
    # A driver that fails leaves its runs running (and the scheduler looking
    # at them until dagrun_timeout): mark them failed, one at a time.
    cat > "$work/end-runs.py" <<'PY'
import json, os, sys, urllib.request
url = os.environ["TASKGATE_AIRFLOW_URL"]
def call(method, path, body=None, token=None):
    req = urllib.request.Request(url + path, method=method, data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)
token = call("POST", "/auth/token", {"username": os.environ["TASKGATE_AIRFLOW_USERNAME"],
                                     "password": os.environ["TASKGATE_AIRFLOW_PASSWORD"]})["access_token"]
ended = 0
for _ in range(20):
    runs = call("GET", "/api/v2/dags/tg_bench_hold/dagRuns?state=running&state=queued&limit=100", token=token)["dag_runs"]
    if not runs:
        break
    for run in runs:
        call("PATCH", "/api/v2/dags/tg_bench_hold/dagRuns/" + run["dag_run_id"],
             {"state": "failed", "note": "ended by bench-upstream after a failed shape"}, token=token)
        ended += 1
if ended:
    print("bench-upstream: marked %d run(s) of tg_bench_hold failed" % ended, file=sys.stderr)
PY
    end_runs="python3 '$work/end-runs.py'"
    ;;
*) echo "BENCH_UPSTREAM_ENGINE is stepfunctions, kubernetes, argo, temporal or airflow" >&2; exit 2 ;;
esac

cat > "$work/taskgate.toml" <<TOML
[server]
listen = "127.0.0.1:0"
# One driver is one caller (anonymous, loopback).
max_waits = $(( n + 64 ))
max_waits_per_caller = $(( n + 64 ))
max_watched_runs_per_caller = $(( n + 64 ))
max_starts_per_minute = 100000
max_listen = "1h"

[keys]
seal = [{ id = "bench", dev_secret = "wVz8RLS81B/TPaYZmQgbcH6AWttroN1dkll5HivLOCA=" }]

$engine_toml
TOML

# serve R: R replicas of one config and key, each on its own port.
serve() {
    local r=$1 i port
    urls=
    for (( i = 0; i < r; i++ )); do
        port=$(free_port)
        TASKGATE_LOG=warn "$bin" serve --config "$work/taskgate.toml" --listen "127.0.0.1:$port" \
            --audit-log off 2>"$work/replica-$i.log" &
        replica_pids+=($!)
        local until_ts=$(( $(date +%s) + 30 ))
        until curl -sf -o /dev/null "http://127.0.0.1:$port/healthz"; do
            [ "$(date +%s)" -lt "$until_ts" ] || { echo "replica $i did not start:" >&2; cat "$work/replica-$i.log" >&2; exit 1; }
            sleep 0.05
        done
        urls="${urls:+$urls,}http://127.0.0.1:$port/mcp"
    done
}

echo "taskgate $("$bin" --version | awk '{print $2}') — engine $engine, poll_interval $poll, $n streams, settle $settle, window $window, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $replica_counts; do
    for shape in $shapes; do
        serve "$r"
        if ! "$work/upstream" -urls "$urls" -n "$n" -shape "$shape" -tool bench_tool -settle "$settle" \
            -window "$window" -count "$count" -label "$engine" > "$work/out" 2>&1; then
            echo "$engine, $r replica(s), $shape: FAILED" >&2
            cat "$work/out" >&2
            tail -n 5 "$work"/replica-*.log >&2
            if [ -n "$end_runs" ]; then sh -c "$end_runs" || true; fi
        else
            grep -v '^BENCH ' "$work/out"
            grep '^BENCH ' "$work/out" >> "${BENCH_UPSTREAM_RAW:-/dev/null}" || true
        fi
        stop_replicas
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
