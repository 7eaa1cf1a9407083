#!/usr/bin/env bash
# Stops the hydra that scripts/hydra/up.sh started (by its recorded pid).
set -euo pipefail
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_HYDRA_PORT:-4444}"
exec "$(dirname "$0")/../lib/stop-recorded.sh" hydra "$cache/hydra-$port.pid"
