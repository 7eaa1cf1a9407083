#!/usr/bin/env bash
# Creates (once) the virtual environment of the Temporal test workers
# (tests/temporal/worker.py) and the fixture capture (scripts/temporal/capture-fixtures.py):
# the Temporal Python SDK, pinned, under ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/py-temporal.
# Prints the environment's python as its last line:
#
#   py=$(scripts/temporal/python-setup.sh | tail -n 1)
#   "$py" tests/temporal/worker.py --address 127.0.0.1:17233 --namespace taskgate-test --task-queue q
#
# Concurrent runs are serialised (flock); the stamp is written only after the SDK imports,
# and a rerun that finds it with the same pins does nothing more.
set -euo pipefail
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
venv="$cache/py-temporal"
stamp="$venv/.taskgate-requirements"
want="temporalio==1.35.0"
mkdir -p "$cache"
exec 9>"$cache/.py-temporal.lock"
flock 9
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $want >&2
    "$venv/bin/python" -c 'import temporalio.worker, temporalio.client' >&2
    printf '%s' "$want" > "$stamp"
fi
echo "$venv/bin/python"
