#!/usr/bin/env bash
# Stops the moto_server that scripts/moto/up.sh started (by its recorded pid).
set -euo pipefail
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_MOTO_PORT:-5005}"
exec "$(dirname "$0")/../lib/stop-recorded.sh" moto_server "$cache/moto-$port.pid"
