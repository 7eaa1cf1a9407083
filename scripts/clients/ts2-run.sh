#!/usr/bin/env bash
# Runs the TypeScript MCP client 2.4 + ext-tasks 0.2 tests (tests/clients/ts-client2)
# against the built binary (TASKGATE_BIN, default target/debug/taskgate),
# installing the packages first if needed (scripts/clients/ts2-setup.sh).
# The Step Functions tests need TASKGATE_MOTO_URL (scripts/moto/up.sh); without
# it they skip, or fail when TASKGATE_REQUIRE_E2E=1; the Kubernetes test likewise needs
# TASKGATE_KUBECONFIG (scripts/k8s/cluster-up.sh).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
"$repo/scripts/clients/ts2-setup.sh" >/dev/null
export TASKGATE_BIN="${TASKGATE_BIN:-$repo/target/debug/taskgate}"
cd "$repo/tests/clients/ts-client2"
exec node --test --test-concurrency=1 test/
