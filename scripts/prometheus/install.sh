#!/usr/bin/env bash
# Installs Prometheus' promtool and server from Debian's `prometheus` package,
# unpacked (not installed) into the cache, so reruns are instant and nothing
# outside the cache changes. Prints the directory holding the binaries.
set -euo pipefail
CACHE_ROOT=${TASKGATE_CACHE:-$HOME/.cache/taskgate}
dest="$CACHE_ROOT/prometheus"
bin="$dest/root/usr/bin"
if [[ -x $bin/promtool && -x $bin/prometheus ]]; then
  echo "$bin"
  exit 0
fi
command -v apt-get >/dev/null || { echo "install.sh: apt-get is needed to fetch the prometheus package" >&2; exit 1; }
mkdir -p "$dest/debs"
cd "$dest/debs"
if ! ls prometheus_*.deb >/dev/null 2>&1; then
  if ! apt-get download prometheus >&2 2>"$dest/download.log"; then
    # The package lists may be missing on a fresh machine.
    if [[ $(id -u) == 0 ]]; then apt-get update -qq >&2; fi
    apt-get download prometheus >&2
  fi
fi
rm -rf "$dest/root.tmp"
dpkg-deb -x prometheus_*.deb "$dest/root.tmp"
mv -T "$dest/root.tmp" "$dest/root"
"$bin/promtool" --version >&2
echo "$bin"
