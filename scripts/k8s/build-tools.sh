#!/usr/bin/env bash
# Build a real Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), etcd, kwok and kwokctl from source via the Go module
# proxy, into ${TASKGATE_CACHE:-$HOME/.cache/taskgate}/k8s/bin.
#
# Idempotent: a stamp file records the versions built; a rerun with the same
# versions (and all binaries present) only prints the bin dir.
#
# Usage: scripts/k8s/build-tools.sh            -> prints the bin dir on stdout
# Env:   TASKGATE_CACHE      cache root (default $HOME/.cache/taskgate)
#        TASKGATE_KUBE_VERSION / TASKGATE_ETCD_VERSION / TASKGATE_KWOK_VERSION
#        TASKGATE_K8S_FORCE=1 rebuild even if the stamp matches
# All progress goes to stderr; only the bin dir goes to stdout.
set -euo pipefail

KUBE_VERSION="${TASKGATE_KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${TASKGATE_ETCD_VERSION:-v3.7.3}"
KWOK_VERSION="${TASKGATE_KWOK_VERSION:-v0.8.0}"

CACHE_ROOT="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
K8S_DIR="$CACHE_ROOT/k8s"
BIN_DIR="$K8S_DIR/bin"
BUILD_DIR="$K8S_DIR/build"
STAMP="$BIN_DIR/.stamp"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl)

log() { printf '[build-tools] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
GO_VERSION="$(go env GOVERSION)"
STAMP_CONTENT="kube=$KUBE_VERSION etcd=$ETCD_VERSION kwok=$KWOK_VERSION go=$GO_VERSION layout=1"

all_present() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

if [[ "${TASKGATE_K8S_FORCE:-0}" != 1 && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_CONTENT" ]] && all_present; then
  echo "$BIN_DIR"
  exit 0
fi

mkdir -p "$BIN_DIR" "$BUILD_DIR"
# Serialise concurrent builds (e.g. two test runs starting at once).
exec 9>"$K8S_DIR/.build.lock"
flock 9
if [[ "${TASKGATE_K8S_FORCE:-0}" != 1 && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_CONTENT" ]] && all_present; then
  echo "$BIN_DIR"
  exit 0
fi
rm -f "$STAMP"

export GOTOOLCHAIN=local          # never fetch another toolchain
export GOFLAGS="-mod=mod -buildvcs=false"
export GOWORK=off
export CGO_ENABLED=0
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

START_ALL=$(date +%s)

# Per-component stamps so an interrupted cold build resumes where it stopped.
comp_done() { [[ -f "$BUILD_DIR/.$1.stamp" && "$(cat "$BUILD_DIR/.$1.stamp")" == "$2 $GO_VERSION" ]]; }
comp_mark() { echo "$2 $GO_VERSION" > "$BUILD_DIR/.$1.stamp"; }

# ---------------------------------------------------------------- kwok ------
if ! comp_done kwok "$KWOK_VERSION" || [[ ! -x "$BIN_DIR/kwok" || ! -x "$BIN_DIR/kwokctl" ]]; then
  log "building kwok + kwokctl $KWOK_VERSION"
  t0=$(date +%s)
  GOBIN="$BIN_DIR" go install -trimpath \
    -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION" >&2
  comp_mark kwok "$KWOK_VERSION"
  log "kwok done in $(( $(date +%s) - t0 ))s"
fi

# ---------------------------------------------------------------- etcd ------
# etcd's server/v3 go.mod has replace directives, so `go install` refuses it;
# build it from a scratch module instead.
if ! comp_done etcd "$ETCD_VERSION" || [[ ! -x "$BIN_DIR/etcd" ]]; then
  log "building etcd $ETCD_VERSION"
  t0=$(date +%s)
  d="$BUILD_DIR/etcd"
  rm -rf "$d"; mkdir -p "$d"
  cat > "$d/go.mod" <<EOF
module taskgate.local/etcdbuild

go 1.26.0

require (
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
	go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
)
EOF
  (cd "$d" && go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/etcd" go.etcd.io/etcd/server/v3) >&2
  comp_mark etcd "$ETCD_VERSION"
  log "etcd done in $(( $(date +%s) - t0 ))s"
fi

# ---------------------------------------------------------- kubernetes ------
if ! comp_done kube "$KUBE_VERSION" || [[ ! -x "$BIN_DIR/kube-apiserver" || ! -x "$BIN_DIR/kube-controller-manager" \
      || ! -x "$BIN_DIR/kube-scheduler" || ! -x "$BIN_DIR/kubectl" ]]; then
  log "building kubernetes $KUBE_VERSION"
  t0=$(date +%s)
  d="$BUILD_DIR/kubernetes"
  rm -rf "$d"; mkdir -p "$d"
  # Fetch the tag's own go.mod to learn which k8s.io/* modules it replaces with ./staging.
  info="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION")"
  kmod="$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$kmod" ]] || { log "cannot find go.mod of k8s.io/kubernetes@$KUBE_VERSION: $info"; exit 1; }
  staging_version="v0.${KUBE_VERSION#v1.}"
  mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s.io/[A-Za-z0-9._-]*\) => ./staging/.*#\1#p' "$kmod")
  [[ ${#staging[@]} -gt 0 ]] || { log "no staging replaces found in $kmod"; exit 1; }
  {
    echo "module taskgate.local/kubebuild"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kmod")"
    echo
    echo "godebug default=go$(sed -n 's/^go \([0-9]*\.[0-9]*\).*$/\1/p' "$kmod")"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do
      # A few staging modules (sample-*) are not published on the proxy; they are
      # never imported by the binaries, and replace lines for modules outside the
      # build graph are ignored, so keeping them is harmless.
      printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"
    done
    echo ")"
  } > "$d/go.mod"
  major="${KUBE_VERSION#v}"; major="${major%%.*}"
  minor="${KUBE_VERSION#v*.}"; minor="${minor%%.*}"
  ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (
    cd "$d"
    go mod download k8s.io/kubernetes >&2
    go build -trimpath -tags "selinux,notest,grpcnotrace" -ldflags "$ld" -o "$BIN_DIR/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl
  ) >&2
  comp_mark kube "$KUBE_VERSION"
  log "kubernetes done in $(( $(date +%s) - t0 ))s"
fi

all_present || { log "some binaries are missing in $BIN_DIR"; exit 1; }
echo "$STAMP_CONTENT" > "$STAMP"
log "all tools built in $(( $(date +%s) - START_ALL ))s ($STAMP_CONTENT)"
echo "$(date -u +%FT%TZ) $STAMP_CONTENT total=$(( $(date +%s) - START_ALL ))s" >> "$K8S_DIR/build-times.log"
echo "$BIN_DIR"
