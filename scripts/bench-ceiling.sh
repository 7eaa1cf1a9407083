#!/usr/bin/env bash
# The ceiling of taskgate's design on this machine: scripts/bench.sh against a
# scratch build of the committed HEAD whose exec engine read costs nothing
# (scripts/bench/free-engine-read.patch: the first snapshot read answers every
# read after it). Everything else a tasks/get does is as in the real build —
# HTTP, JSON-RPC, the handle opened and checked, the dialect's checks, the
# gateway's layers (budget, single-flight, retry, deadline), the reply — so the
# gap between these rows and the baseline is the protocol work alone, and the
# gap between these rows and scripts/bench.sh's is what the engine read costs.
# Never a build to run: it answers every task with one stale snapshot.
#
#   scripts/bench-ceiling.sh                          # 16 and 64 connections, 5 s per run
#   BENCH_CONNS="1 16 64" BENCH_SECONDS=15 scripts/bench-ceiling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scratch=$(mktemp -d)
cleanup() {
    git -C "$root" worktree remove --force "$scratch/tree" >/dev/null 2>&1 || true
    rm -rf "$scratch"
}
trap cleanup EXIT
git worktree add --detach --quiet "$scratch/tree" HEAD
git -C "$scratch/tree" apply "$root/scripts/bench/free-engine-read.patch"
# Its own target folder (kept between runs), so the real build is left alone.
target="${TASKGATE_CACHE:-$HOME/.cache/taskgate}/ceiling-target"
echo "building the free-read taskgate (HEAD $(git rev-parse --short HEAD) + free-engine-read.patch)" >&2
CARGO_TARGET_DIR="$target" cargo build --release --quiet \
    --manifest-path "$scratch/tree/Cargo.toml" --bin taskgate
echo "free engine read: the rows named tasks/get read no engine after the first" >&2
BENCH_TASKGATE="$target/release/taskgate" \
    BENCH_CONNS="${BENCH_CONNS:-16 64}" \
    BENCH_SECONDS="${BENCH_SECONDS:-5}" \
    BENCH_MILLION=0 \
    "$root/scripts/bench.sh"
