#!/usr/bin/env bash
# Creates (once) the virtual environment of the Python SDK 1.x client tests
# (tests/clients/python-mcp1): the official MCP Python SDK mcp==1.30.0 and
# pytest, under ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/py-mcp1, outside the
# repository. Idempotent: rebuilds only when the wanted packages change.
# Prints the environment's python as its last line:
#
#   py=$(scripts/clients/python1-setup.sh | tail -n 1)
#   TASKGATE_BIN=target/debug/taskgate "$py" -m pytest tests/clients/python-mcp1
set -euo pipefail
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
venv="$cache/py-mcp1"
stamp="$venv/.taskgate-requirements"
want="mcp==1.30.0 pytest>=8,<10"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$cache"
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q $want >&2
    printf '%s' "$want" > "$stamp"
fi
"$venv/bin/python" -c 'import importlib.metadata as m, pytest; assert m.version("mcp") == "1.30.0"' >&2
echo "$venv/bin/python"
