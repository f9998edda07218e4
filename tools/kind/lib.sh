# Shared settings of tools/kind/*.sh (sourced, not run).
# Everything lives under $BROKERGROUP_KIND_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/brokergroup/kind:
#   docker/     the hand-started dockerd: socket, data root, exec root, pid, log
#   <key>/bin   node binaries (build-node-bins.sh), <key> hashes every pin below
#   rootfs/     the debootstrapped Debian rootfs of the node base image
#   cluster/    kind config, kubeconfig, exported logs
K8S_VERSION=v1.33.13
KIND_VERSION=v0.33.0
# kind v0.33.0's standard node image for v1.33 (the registry path; see kind's release notes).
KIND_STANDARD_IMAGE=${KIND_STANDARD_IMAGE:-kindest/node:v1.33.4}
KIND_CLUSTER=${KIND_CLUSTER:-brokergroup-e2e}
KIND_CACHE=${BROKERGROUP_KIND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/kind}
KIND_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "[kind-e2e $(date -u +%H:%M:%S)] $*" >&2; }
die() { local rc=$1; shift; log "$*"; exit "$rc"; }
timed() { local s; s=$(date +%s); "$@"; log "  $(($(date +%s) - s)) s"; }
# docker build, quiet: the legacy builder's deprecation notice only when the build fails.
dbuild() {
  local err rc=0
  err=$(docker build -q "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 0 ] || { echo "$err" >&2; return "$rc"; }
}
missing() { local d=$1 b; shift; for b in "$@"; do [ -x "$d/$b" ] || return 0; done; return 1; }

# Keys: the binaries hash every Go pin (tools/k8s, tools/kind/go/*); the node image also hashes
# the files it is assembled from, so an edit there rebuilds the image but relinks nothing.
kind_bin_key() {
  (cd "$KIND_HERE/.." && cat k8s/go.sum k8s/build.sh kind/go/*/go.sum kind/pause.go \
    kind/build-node-bins.sh) | sha256sum | cut -c1-12
}
kind_bin_dir() { echo "$KIND_CACHE/$K8S_VERSION-$(kind_bin_key)/bin"; }
kind_image_key() {
  (kind_bin_key; cd "$KIND_HERE" && cat build-node-image.sh node/base.Dockerfile node/repack-images.py) | sha256sum | cut -c1-12
}
