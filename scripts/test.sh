#!/usr/bin/env bash
# Runs every taskgate test: the Rust workspace (unit, engine and end-to-end tests),
# the real MCP client suites (Python and TypeScript SDKs), the official
# conformance suite, and the deployment checks (container image, Helm chart).
# Installs and starts what they need (moto, Airflow, ORY Hydra, a Kubernetes control
# plane with kwok nodes, a Temporal server and its Python workers, SDK environments)
# under ${TASKGATE_CACHE:-$HOME/.cache/taskgate} so reruns on the same machine are fast.
#
#   scripts/test.sh            # everything
#   TASKGATE_REQUIRE_E2E=1 scripts/test.sh   # as CI runs it: a missing emulator fails
#
# Prints one closing line "N passed, M failed; K skipped" over the suites it ran,
# K counting every test or suite that did not run for want of an emulator or tool.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export TASKGATE_CACHE="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
mkdir -p "$TASKGATE_CACHE"

passed=0
failed=0
failures=()
started_at=$(date +%s)

step() { echo; echo "==== $* ($(( $(date +%s) - started_at ))s)"; }
skipped=0
skips=()
suite() {
    local name=$1
    shift
    echo
    echo "==== suite: $name"
    local t0=$(date +%s) out="$TASKGATE_CACHE/suite-output.log" n
    if "$@" 2>&1 | tee "$out"; then
        passed=$((passed + 1))
        echo "---- $name: ok ($(( $(date +%s) - t0 ))s)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "---- $name: FAILED ($(( $(date +%s) - t0 ))s)"
    fi
    # Tests that returned early for want of an emulator or a tool say so
    # ("skipping: …", "skipped: …", pytest's "N skipped"): count them.
    n=$(grep -cE '(^|\] )skipp(ing|ed)[: ]|[0-9]+ skipped' "$out" || true)
    if [ "${n:-0}" -gt 0 ]; then
        skipped=$((skipped + n))
        skips+=("$name: $n")
    fi
}
skip_suite() {
    echo
    echo "==== suite: $1: SKIPPED ($2)"
    skipped=$((skipped + 1))
    skips+=("$1: the whole suite ($2)")
}

cleanup() {
    if [ -n "${prebuild_pid:-}" ]; then
        kill -TERM -- "-$prebuild_pid" 2>/dev/null || true
        wait "$prebuild_pid" 2>/dev/null || true
    fi
    [ -x scripts/moto/down.sh ] && scripts/moto/down.sh >/dev/null 2>&1 || true
    [ -x scripts/hydra/down.sh ] && scripts/hydra/down.sh >/dev/null 2>&1 || true
    [ -x scripts/temporal/down.sh ] && scripts/temporal/down.sh >/dev/null 2>&1 || true
    [ -x scripts/jaeger/down.sh ] && scripts/jaeger/down.sh >/dev/null 2>&1 || true
    if [ -n "${airflow_up_pid:-}" ]; then
        wait "$airflow_up_pid" 2>/dev/null || true
    fi
    [ -x scripts/airflow/down.sh ] && scripts/airflow/down.sh >/dev/null 2>&1 || true
    if [ -n "${TASKGATE_ARGO_ENV:-}" ] && [ -x scripts/argo/down.sh ]; then
        scripts/argo/down.sh "$TASKGATE_KUBECONFIG" >/dev/null 2>&1 || true
    fi
    if [ -n "${TASKGATE_K8S_STARTED:-}" ] && [ -x scripts/k8s/cluster-down.sh ]; then
        scripts/k8s/cluster-down.sh >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

# The Kubernetes binaries build (Go, long on a new machine, downloads included)
# alongside the Rust build.
k8s_build_pid=""
if [ -x scripts/k8s/build-tools.sh ]; then
    scripts/k8s/build-tools.sh >"$TASKGATE_CACHE/k8s-build-tools.log" 2>&1 &
    k8s_build_pid=$!
fi
# The Argo Workflows controller (Go, pinned v4.0.5, for the private cluster only)
# likewise; scripts/argo/up.sh waits on its lock.
argo_build_pid=""
if [ -x scripts/argo/build.sh ]; then
    nice -n 10 scripts/argo/build.sh >"$TASKGATE_CACHE/argo-build.log" 2>&1 &
    argo_build_pid=$!
fi
# Helm (Go, from its module) likewise; tests/helm/chart.sh waits on its lock.
if [ -x scripts/helm/install.sh ]; then
    scripts/helm/install.sh >"$TASKGATE_CACHE/helm-install.log" 2>&1 &
fi
# So does ORY Hydra, the authorization server of the OAuth tests.
hydra_build_pid=""
if [ -x scripts/hydra/install.sh ]; then
    scripts/hydra/install.sh >"$TASKGATE_CACHE/hydra-install.log" 2>&1 &
    hydra_build_pid=$!
fi

# The Temporal server (Go, from its module: a few CPU-minutes cold) and its Python
# workers' environment likewise; the services step waits for both.
temporal_build_pid=""
temporal_py_pid=""
jaeger_build_pid=""
if [ -x scripts/jaeger/build.sh ]; then
    scripts/jaeger/build.sh >"$TASKGATE_CACHE/jaeger-build.log" 2>&1 &
    jaeger_build_pid=$!
fi
if [ -x scripts/temporal/build.sh ]; then
    scripts/temporal/build.sh >"$TASKGATE_CACHE/temporal-build.log" 2>&1 &
    temporal_build_pid=$!
    scripts/temporal/python-setup.sh >"$TASKGATE_CACHE/temporal-python-setup.log" 2>&1 &
    temporal_py_pid=$!
fi

# Airflow installs (cold: about a minute) and starts (about a minute) alongside the
# Rust build; the services step waits for it.
airflow_up_pid=""
if [ -x scripts/airflow/up.sh ]; then
    scripts/airflow/up.sh >"$TASKGATE_CACHE/airflow-up.out" 2>"$TASKGATE_CACHE/airflow-up.log" &
    airflow_up_pid=$!
fi

step "build"
cargo build --workspace --all-targets || { echo "build failed"; exit 1; }
export TASKGATE_BIN="$root/target/debug/taskgate"

# The suites below mostly wait (on emulators, clients, servers); the CPU they leave
# idle builds ahead, in the background: the release binary the image suite needs
# (its target dir, which scripts/image/build.sh then finds fresh), then, when
# TASKGATE_PREBUILD_CLIPPY=1 (.ci/run sets it), the lint pass .ci/run makes after the
# tests (the same target dir, so that pass only replays it). Both run in the idle
# scheduling class: they get only CPU time nothing else wants, so a suite's servers
# keep their share. TASKGATE_PREBUILD=0 turns this off.
prebuild_pid=""
if [ "${TASKGATE_PREBUILD:-1}" = 1 ]; then
    idle=()
    chrt -i 0 true 2>/dev/null && idle+=(chrt -i 0)
    ionice -c 3 true 2>/dev/null && idle+=(ionice -c 3)
    [ ${#idle[@]} -gt 0 ] || idle=(nice -n 19)
    export TASKGATE_RELEASE_TARGET="${TASKGATE_RELEASE_TARGET:-$TASKGATE_CACHE/release-target}"
    export TASKGATE_CLIPPY_TARGET="${TASKGATE_CLIPPY_TARGET:-$TASKGATE_CACHE/clippy-target}"
    # Its own process group (setsid), so the exit trap stops all of it.
    setsid "${idle[@]}" bash -c '
        t0=$(date +%s)
        CARGO_TARGET_DIR="$TASKGATE_RELEASE_TARGET" cargo build --release --locked --bin taskgate
        rc=$?
        echo "prebuild: release build done ($(( $(date +%s) - t0 ))s, exit $rc)"
        if [ "${TASKGATE_PREBUILD_CLIPPY:-}" = 1 ]; then
            t0=$(date +%s)
            CARGO_TARGET_DIR="$TASKGATE_CLIPPY_TARGET" cargo clippy --workspace --all-targets -- -D warnings
            rc=$?
            echo "prebuild: clippy done ($(( $(date +%s) - t0 ))s, exit $rc)"
        fi' >"$TASKGATE_CACHE/prebuild.log" 2>&1 </dev/null &
    prebuild_pid=$!
fi

step "services"
if out=$(scripts/moto/up.sh); then
    eval "$out"
else
    echo "moto could not be started"
fi
if [ -n "$hydra_build_pid" ] && ! wait "$hydra_build_pid"; then
    echo "building hydra failed:"
    tail -n 30 "$TASKGATE_CACHE/hydra-install.log"
fi
if out=$(scripts/hydra/up.sh); then
    eval "$out"
else
    echo "hydra could not be started"
fi
if [ -n "$temporal_build_pid" ]; then
    temporal_ok=1
    if ! wait "$temporal_build_pid"; then
        echo "building the Temporal server failed:"
        tail -n 30 "$TASKGATE_CACHE/temporal-build.log"
        temporal_ok=0
    fi
    if ! wait "$temporal_py_pid"; then
        echo "setting up the Temporal workers' Python environment failed:"
        tail -n 30 "$TASKGATE_CACHE/temporal-python-setup.log"
        temporal_ok=0
    fi
    # up.sh exports TASKGATE_TEMPORAL_{ADDRESS,HTTP,METRICS,NAMESPACE,PYTHON,WORKER}.
    if [ "$temporal_ok" = 1 ]; then
        if out=$(scripts/temporal/up.sh 2>"$TASKGATE_CACHE/temporal-up.log"); then
            eval "$out"
        else
            echo "the Temporal server could not be started:"
            tail -n 30 "$TASKGATE_CACHE/temporal-up.log"
        fi
    fi
fi
if [ -n "$jaeger_build_pid" ]; then
    # up.sh exports TASKGATE_JAEGER_{URL,OTLP_GRPC,OTLP_HTTP} (tests/e2e/traces.rs).
    if ! wait "$jaeger_build_pid"; then
        echo "building Jaeger failed:"
        tail -n 30 "$TASKGATE_CACHE/jaeger-build.log"
    elif out=$(scripts/jaeger/up.sh 2>"$TASKGATE_CACHE/jaeger-up.log"); then
        eval "$out"
    else
        echo "Jaeger could not be started:"
        tail -n 30 "$TASKGATE_CACHE/jaeger-up.log"
    fi
fi
if [ -n "$airflow_up_pid" ]; then
    if wait "$airflow_up_pid"; then
        eval "$(cat "$TASKGATE_CACHE/airflow-up.out")"
    else
        echo "Airflow could not be started:"
        tail -n 30 "$TASKGATE_CACHE/airflow-up.log"
    fi
    airflow_up_pid=""
fi
if [ -n "$k8s_build_pid" ] && ! wait "$k8s_build_pid"; then
    echo "building the Kubernetes binaries failed:"
    tail -n 30 "$TASKGATE_CACHE/k8s-build-tools.log"
fi
if [ -x scripts/k8s/cluster-up.sh ]; then
    if kubeconfig=$(scripts/k8s/cluster-up.sh | tail -n 1) && [ -f "$kubeconfig" ]; then
        export TASKGATE_KUBECONFIG="$kubeconfig"
        export TASKGATE_K8S_STARTED=1
    else
        echo "the Kubernetes control plane could not be started"
    fi
fi
# The Argo controller on that control plane (tests/engines/engine_kubernetes_resources.rs).
if [ -n "${TASKGATE_KUBECONFIG:-}" ] && [ -x scripts/argo/up.sh ]; then
    if [ -n "$argo_build_pid" ] && ! wait "$argo_build_pid"; then
        echo "building the Argo controller failed:"
        tail -n 30 "$TASKGATE_CACHE/argo-build.log"
    elif argo_env=$(scripts/argo/up.sh "$TASKGATE_KUBECONFIG" 2>"$TASKGATE_CACHE/argo-up.log" | tail -n 1) \
            && [ -f "$argo_env" ]; then
        export TASKGATE_ARGO_ENV="$argo_env"
    else
        echo "the Argo controller could not be started:"
        tail -n 30 "$TASKGATE_CACHE/argo-up.log"
    fi
fi

if [ -n "${TASKGATE_KUBECONFIG:-}" ] && [ -x tests/k8s/smoke.sh ]; then
    suite "kubernetes control plane smoke" tests/k8s/smoke.sh
else
    skip_suite "kubernetes control plane smoke" "no control plane"
fi
# promtool (Prometheus' linter), unpacked from Debian's package into the cache;
# tests/e2e/metrics.rs runs it on a scrape taken under load, and runs the server
# (private port and data folder) scraping taskgate.
if [ -x scripts/prometheus/install.sh ] &&
    prom_bin=$(scripts/prometheus/install.sh 2>"$TASKGATE_CACHE/prometheus-install.log"); then
    export TASKGATE_PROMTOOL="$prom_bin/promtool" TASKGATE_PROMETHEUS="$prom_bin/prometheus"
fi
# (tests/engines/deploy_incluster.rs, the in-cluster credentials test, runs in here.)
suite "cargo test" cargo test --workspace --no-fail-fast
suite "metrics (labelled series, promtool check metrics under load, a Prometheus server)" cargo test --workspace --test e2e metrics::

if [ -x tests/helm/chart.sh ]; then
    suite "helm chart (lint, dry-run=server, install, in-cluster check-config)" tests/helm/chart.sh
fi

for setup in scripts/clients/*-setup.sh; do
    [ -x "$setup" ] || continue
    name=$(basename "$setup" -setup.sh)
    step "setup $name"
    "$setup" >/dev/null || echo "setup $name failed"
done

if [ -d tests/clients/python ]; then
    py=$("scripts/clients/python-setup.sh" 2>/dev/null | tail -n 1)
    suite "python mcp 2.3 clients" "$py" -m pytest -q tests/clients/python
fi
if [ -d tests/clients/python-oauth ]; then
    py=$("scripts/clients/python-setup.sh" 2>/dev/null | tail -n 1)
    suite "python mcp 2.3 oauth client (hydra)" "$py" -m pytest -q tests/clients/python-oauth
fi
if [ -d tests/clients/python-mcp1 ]; then
    py=$("scripts/clients/python1-setup.sh" 2>/dev/null | tail -n 1)
    suite "python mcp 1.30 clients" "$py" -m pytest -q tests/clients/python-mcp1
fi
if [ -x scripts/clients/ts-run.sh ]; then
    suite "typescript sdk clients" scripts/clients/ts-run.sh
fi
if [ -x scripts/clients/ts2-run.sh ]; then
    suite "typescript client 2.4 + ext-tasks clients" scripts/clients/ts2-run.sh
fi
if [ -x scripts/clients/inspector-run.sh ]; then
    suite "mcp inspector 2.12 cli clients" scripts/clients/inspector-run.sh
fi
if [ -x scripts/conformance/run.sh ]; then
    suite "conformance suite" bash -c 'scripts/conformance/setup.sh >/dev/null && scripts/conformance/run.sh'
fi

# Last, so the background release build has had the suites above to finish in.
if [ -x scripts/image/build.sh ]; then
    suite "container image (release build, buildah, chroot checks)" scripts/image/build.sh
fi

step "summary"
for f in "${failures[@]}"; do echo "failed: $f"; done
echo "total time: $(( $(date +%s) - started_at ))s"
for s in "${skips[@]}"; do echo "skipped: $s"; done
echo "suites: $passed passed, $failed failed; $skipped skipped (tests or suites that did not run)"
[ "$failed" -eq 0 ]
