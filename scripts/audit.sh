#!/usr/bin/env bash
# Dependency audit: every crate in Cargo.lock against the RustSec advisory database,
# offline, with cargo-audit at a pinned version. .ci/run calls it; a vulnerability
# fails it.
#
#   scripts/audit.sh            # install cargo-audit if needed, then audit Cargo.lock
#   scripts/audit.sh install    # only install (run in the background of the Rust build)
#   scripts/audit.sh path       # print the installed tool's path; exit 1 if not installed
#
# cargo-audit is built once (`cargo install --locked`) into
# ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/cargo-audit/<version>, so a new pinned
# version is a new folder and an old one is never reused by mistake.
#
# The database is a snapshot, never fetched: TASKGATE_ADVISORY_DB (default
# ../shared/advisory-db from the repository root; see its SNAPSHOT.md). A missing
# database fails the audit: no database would mean no check. The snapshot is copied
# to a scratch folder first (shared/ is read-only under CI).
#
# What fails: any vulnerability advisory, and any warning (unmaintained, unsound)
# that is not in ACCEPTED below with its reason. Yanked versions are not checked:
# that needs the package index, and this check is offline.
#
# Before Cargo.lock, a lockfile holding a crate version with a known vulnerability
# (tokio 1.8.0) is audited and must be refused: an empty, misplaced or unreadable
# database cannot pass for a clean audit.
#
# Env: TASKGATE_ADVISORY_DB, TASKGATE_AUDIT_LOCKFILE (default Cargo.lock),
#      TASKGATE_CACHE, TASKGATE_CARGO_AUDIT_VERSION.
# Prints "audit: ok" or "audit: FAILED" as its last line, with the time taken.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

AUDIT_VERSION="${TASKGATE_CARGO_AUDIT_VERSION:-0.22.2}"
CACHE_ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
AUDIT_DIR="$CACHE_ROOT/cargo-audit/$AUDIT_VERSION"
AUDIT_BIN="$AUDIT_DIR/bin/cargo-audit"
DB="${TASKGATE_ADVISORY_DB:-$root/../shared/advisory-db}"
LOCKFILE="${TASKGATE_AUDIT_LOCKFILE:-$root/Cargo.lock}"
# Advisories accepted, one `--ignore ID` each, with the reason on the line above.
# None today.
ACCEPTED=()

log() { printf '[audit] %s\n' "$*" >&2; }

install() {
  [[ -x "$AUDIT_BIN" ]] && return 0
  mkdir -p "$CACHE_ROOT/cargo-audit"
  # One build at a time (the background install and the audit may both get here).
  exec 9>"$CACHE_ROOT/cargo-audit/.build.lock"
  flock 9
  if [[ -x "$AUDIT_BIN" ]]; then exec 9>&-; return 0; fi
  log "building cargo-audit $AUDIT_VERSION into $AUDIT_DIR"
  local t0 tmp
  t0=$(date +%s)
  tmp="$AUDIT_DIR.tmp"
  rm -rf "$tmp"
  # Its own target folder (a scratch one of cargo's), never the project's.
  env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET_DIR \
    cargo install --locked --quiet --version "=$AUDIT_VERSION" --root "$tmp" cargo-audit >&2
  rm -rf "$AUDIT_DIR"
  mv "$tmp" "$AUDIT_DIR"
  log "cargo-audit $AUDIT_VERSION built in $(( $(date +%s) - t0 ))s"
  echo "$(date -u +%FT%TZ) cargo-audit=$AUDIT_VERSION total=$(( $(date +%s) - t0 ))s" \
    >> "$CACHE_ROOT/cargo-audit/build-times.log"
  exec 9>&-
}

case "${1:-audit}" in
  install) install; exit 0 ;;
  path) [[ -x "$AUDIT_BIN" ]] && echo "$AUDIT_BIN"; exit $? ;;
  audit) ;;
  *) log "usage: scripts/audit.sh [install|path]"; exit 2 ;;
esac

t0=$(date +%s%3N)
if [[ ! -d "$DB/crates" ]]; then
  log "no advisory database at $DB (set TASKGATE_ADVISORY_DB to a RustSec advisory-db tree)"
  echo "audit: FAILED (no advisory database)"
  exit 1
fi
install

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r "$DB" "$scratch/advisory-db"

# --no-fetch: never reach the network; the snapshot is as new as it is (its date is
# in SNAPSHOT.md), so a stale database is expected, not an error.
audit() { # lockfile
  "$AUDIT_BIN" audit --no-fetch --stale --no-yanked --color never --db "$scratch/advisory-db" \
    --file "$1" --deny warnings "${ACCEPTED[@]}"
}

# The canary: a known vulnerability must be found.
cat > "$scratch/canary.lock" <<'EOF'
version = 3

[[package]]
name = "tokio"
version = "1.8.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
EOF
if audit "$scratch/canary.lock" > "$scratch/canary.out" 2>&1 || ! grep -q 'tokio' "$scratch/canary.out"; then
  cat "$scratch/canary.out" >&2
  echo "audit: FAILED, the advisory check did not catch tokio 1.8.0's known vulnerability (is $DB a RustSec advisory-db?)"
  exit 1
fi

status=0
audit "$LOCKFILE" || status=$?
took="$(( $(date +%s%3N) - t0 )) ms"
if [[ $status == 0 ]]; then
  echo "audit: ok, no advisory applies to $(basename "$LOCKFILE") ($took)"
else
  echo "audit: FAILED, see the advisories above ($took)"
fi
exit "$status"
