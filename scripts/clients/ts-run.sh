#!/usr/bin/env bash
# Runs the TypeScript SDK 1.32 client tests (tests/clients/ts-sdk1) against the
# built binary (TASKGATE_BIN, default target/debug/taskgate), installing the SDK
# first if needed (scripts/clients/ts-setup.sh).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
"$repo/scripts/clients/ts-setup.sh" >/dev/null
export TASKGATE_BIN="${TASKGATE_BIN:-$repo/target/debug/taskgate}"
cd "$repo/tests/clients/ts-sdk1"
exec node --test --test-concurrency=1 test/
