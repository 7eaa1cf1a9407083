#!/usr/bin/env bash
# Runs the MCP Inspector 2.12 CLI tests (tests/clients/inspector) against the
# built binary (TASKGATE_BIN, default target/debug/taskgate), on the Node 22
# binary that scripts/clients/inspector-setup.sh installs (called first).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
node22="$("$repo/scripts/clients/inspector-setup.sh" | tail -n 1)"
export TASKGATE_BIN="${TASKGATE_BIN:-$repo/target/debug/taskgate}"
export TASKGATE_INSPECTOR_NODE="$node22"
cd "$repo/tests/clients/inspector"
exec "$node22" --test --test-concurrency=1 test/*.test.mjs
