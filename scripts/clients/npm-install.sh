# Sourced by the Node client setup scripts: installs (once) a client's npm
# dependencies, pinned by tests/clients/<name>/package-lock.json, outside the
# repository under ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/<name>, and links
# tests/clients/<name>/node_modules to them (the link is gitignored).
# Reinstalls only when package.json or the lockfile changed.
#
#   install_npm_client NAME PATH...   # PATHs (relative to the install's node_modules)
#                                     # must exist, or it installs
# Sets: src (the client's folder), dest (the install folder).
install_npm_client() {
    local name=$1
    shift
    local repo
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    src="$repo/tests/clients/$name"
    dest="${TASKGATE_CACHE:-$HOME/.cache/taskgate}/$name"
    local stamp="$dest/.taskgate-stamp"
    local want
    want="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)"
    local missing=""
    for path in "$@"; do
        [ -e "$dest/node_modules/$path" ] || missing=1
    done
    if [ -n "$missing" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        mkdir -p "$dest"
        cp "$src/package.json" "$src/package-lock.json" "$dest/"
        (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error) >&2
        printf '%s' "$want" > "$stamp"
    fi
    local link="$src/node_modules"
    if [ "$(readlink "$link" 2>/dev/null)" != "$dest/node_modules" ]; then
        if [ -e "$link" ] && [ ! -L "$link" ]; then
            echo "$name setup: $link exists and is not a link; remove it first" >&2
            return 1
        fi
        ln -sfn "$dest/node_modules" "$link"
    fi
}
