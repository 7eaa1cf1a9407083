#!/usr/bin/env bash
# Installs (once) the dependencies of the TypeScript MCP client 2.x tests
# (tests/clients/ts-client2: @modelcontextprotocol/client 2.4.x and
# @modelcontextprotocol/ext-tasks 0.2.x, pinned by its package-lock.json) outside
# the repository, under ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/ts-client2, and
# links tests/clients/ts-client2/node_modules to them (the link is gitignored).
# Idempotent: reinstalls only when package.json or the lockfile changed.
# Prints the node_modules folder as its last line. Run the tests with
# scripts/clients/ts2-run.sh (which calls this first).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$repo/tests/clients/ts-client2"
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
dest="$cache/ts-client2"
stamp="$dest/.taskgate-stamp"
want="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ ! -d "$dest/node_modules/@modelcontextprotocol/ext-tasks" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$dest"
    cp "$src/package.json" "$src/package-lock.json" "$dest/"
    (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error) >&2
    printf '%s' "$want" > "$stamp"
fi
link="$src/node_modules"
if [ "$(readlink "$link" 2>/dev/null)" != "$dest/node_modules" ]; then
    if [ -e "$link" ] && [ ! -L "$link" ]; then
        echo "ts2-setup: $link exists and is not a link; remove it first" >&2
        exit 1
    fi
    ln -sfn "$dest/node_modules" "$link"
fi
(cd "$src" && node --input-type=module -e '
await import("@modelcontextprotocol/client");
await import("@modelcontextprotocol/client/stdio");
await import("@modelcontextprotocol/ext-tasks/client");') >&2
echo "$dest/node_modules"
