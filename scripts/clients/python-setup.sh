#!/usr/bin/env bash
# Creates (once) the virtual environment of the Python SDK client tests: the
# official MCP Python SDK 2.3.x and pytest, under
# ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/py-mcp2. Prints the environment's
# python as its last line:
#
#   py=$(scripts/clients/python-setup.sh | tail -n 1)
#   TASKGATE_BIN=target/debug/taskgate "$py" -m pytest tests/clients/python
set -euo pipefail
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
venv="$cache/py-mcp2"
stamp="$venv/.taskgate-requirements"
want="mcp>=2.3,<2.4 pytest>=8,<10"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$cache"
    python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q $want >&2
    printf '%s' "$want" > "$stamp"
fi
"$venv/bin/python" -c 'import mcp, pytest' >&2
echo "$venv/bin/python"
