#!/usr/bin/env bash
# Installs (once) the dependencies of the TypeScript MCP client 2.x tests
# (tests/clients/ts-client2: @modelcontextprotocol/client 2.4.x and
# @modelcontextprotocol/ext-tasks 0.2.x, pinned by its package-lock.json) outside
# the repository (see npm-install.sh). Prints the node_modules folder as its last
# line. Run the tests with scripts/clients/ts2-run.sh (which calls this first).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/npm-install.sh"
install_npm_client ts-client2 @modelcontextprotocol/ext-tasks
(cd "$src" && node --input-type=module -e '
await import("@modelcontextprotocol/client");
await import("@modelcontextprotocol/client/stdio");
await import("@modelcontextprotocol/ext-tasks/client");') >&2
echo "$dest/node_modules"
