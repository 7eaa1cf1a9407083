#!/usr/bin/env bash
# Installs (once) the TypeScript SDK client tests' dependencies, pinned by
# tests/clients/ts-sdk1/package-lock.json (@modelcontextprotocol/sdk 1.32.x),
# outside the repository (see npm-install.sh). Prints the node_modules folder as
# its last line. Run the tests with scripts/clients/ts-run.sh (which calls this first).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/npm-install.sh"
install_npm_client ts-sdk1 @modelcontextprotocol/sdk
(cd "$src" && node --input-type=module -e 'await import("@modelcontextprotocol/sdk/client/index.js")') >&2
echo "$dest/node_modules"
