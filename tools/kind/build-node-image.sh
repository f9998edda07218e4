#!/usr/bin/env bash
# Build kind's node image for Kubernetes $K8S_VERSION without any container registry:
#   1. a Debian bookworm rootfs (debootstrap from the apt mirror; cached in $KIND_CACHE/rootfs),
#      imported as the OS image;
#   2. kind's base image from it: kind's own images/base/files (from the kind module) and the
#      node binaries of build-node-bins.sh (node/base.Dockerfile);
#   3. a kubernetes-server tarball whose image archives hold every image kubeadm and kind
#      would otherwise pull (apiserver, controller-manager, scheduler, kube-proxy, etcd,
#      coredns, pause, local-path-provisioner/helper, and a placeholder for kindnetd, which is
#      not on the Go module proxy: the cluster uses a static bridge CNI instead, single node);
#   4. `kind build node-image --type file`.
# The result is tagged brokergroup/kind-node:$K8S_VERSION-<key> (lib.sh kind_image_key); an
# existing tag is reused. Prints the tag on the last line. Needs DOCKER_HOST (engine.sh start).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
key=$(kind_image_key)
IMAGE=brokergroup/kind-node:$K8S_VERSION-$key
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "node image $IMAGE already built"
  echo "$IMAGE"
  exit 0
fi
start=$(date +%s)
BIN=$("$here/build-node-bins.sh" | tail -1)
KIND_SRC=$(cd "$here/go/kind" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' sigs.k8s.io/kind)
[ -d "$KIND_SRC/images/base/files" ] || die 1 "kind sources not found in the module cache ($KIND_SRC)"
OS_IMAGE=brokergroup/kind-os:bookworm

# 1. rootfs
rootfs=$KIND_CACHE/rootfs
if [ ! -x "$rootfs/usr/lib/systemd/systemd" ]; then
  MIRROR=${MIRROR:-$(sed -n 's/^URIs: *\(http[^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
  log "debootstrap bookworm (systemd, iptables, ...) into $rootfs from $MIRROR"
  rm -rf "$rootfs" "$rootfs.tmp" && mkdir -p "$rootfs.tmp"
  timed debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,iproute2,iptables,nftables,ca-certificates,procps,kmod,mount,util-linux,conntrack,ethtool,socat,ebtables,jq,pigz,curl,libseccomp2,e2fsprogs,bash \
    bookworm "$rootfs.tmp" "$MIRROR" >"$KIND_CACHE/debootstrap.log" 2>&1 \
    || die 1 "debootstrap failed; see $KIND_CACHE/debootstrap.log"
  rm -rf "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/*
  mv "$rootfs.tmp" "$rootfs"
fi
if ! docker image inspect "$OS_IMAGE" >/dev/null 2>&1; then
  tar -C "$rootfs" -c . | docker import - "$OS_IMAGE" >/dev/null
fi

# 2. base image
work=$(mktemp -d "$KIND_CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
ctx=$work/base
mkdir -p "$ctx/bin" "$ctx/cni"
cp -a "$KIND_SRC/images/base/files" "$ctx/files" && chmod -R u+w "$ctx/files"
for b in containerd containerd-shim-runc-v2 ctr crictl; do cp "$BIN/$b" "$ctx/bin/"; done
cp "$BIN/runc" "$ctx/runc"
for b in host-local loopback ptp portmap bridge; do cp "$BIN/$b" "$ctx/cni/"; done
cp "$here/node/base.Dockerfile" "$ctx/Dockerfile"
BASE=brokergroup/kind-base:$key
log "building $BASE"
timed dbuild --build-arg BASE_OS="$OS_IMAGE" -t "$BASE" "$ctx"

# 3. kubernetes-server tarball with every image inside
tb=$work/tarball
B=$tb/kubernetes/server/bin
mkdir -p "$B"
echo "$K8S_VERSION" >"$tb/kubernetes/version"
for b in kubeadm kubelet kubectl; do cp -L "$BIN/$b" "$B/"; done
img() { # tag binary path-in-image base
  local d; d=$(mktemp -d "$work/img.XXXXXX")
  cp -L "$BIN/$2" "$d/bin"
  printf 'FROM %s\nCOPY bin %s\nENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nENTRYPOINT ["%s"]\n' \
    "$4" "$3" "$3" >"$d/Dockerfile"
  dbuild -t "$1" "$d"
  rm -rf "$d"
}
list=$("$B/kubeadm" config images list --kubernetes-version "$K8S_VERSION")
name() { echo "$list" | grep -E "/$1:"; }
log "images for the node: $(echo $list)"
# The control-plane binaries and etcd come from tools/k8s (cgo, dynamically linked against
# glibc only): they run on a scratch image holding the rootfs's glibc files they load (a few MB,
# not the whole OS in every archive). coredns, pause and local-path-provisioner are static.
GLIBC=brokergroup/kind-glibc:$key
g=$work/glibc
mkdir -p "$g/lib/x86_64-linux-gnu" "$g/lib64"
for f in $(for b in kube-apiserver kube-controller-manager kube-scheduler etcd; do ldd "$BIN/$b"; done \
  | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i}' | sort -u); do
  mkdir -p "$g$(dirname "$f")" && cp -L "$rootfs$f" "$g$f"
done
printf 'FROM scratch\nCOPY lib/ /lib/\nCOPY lib64/ /lib64/\nENV LD_LIBRARY_PATH=/lib/x86_64-linux-gnu\n' >"$g/Dockerfile"
dbuild -t "$GLIBC" "$g"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  img "$(name $c)" $c /usr/local/bin/$c "$GLIBC"
  docker save -o "$B/$c.tar" "$(name $c)"
done
img "$(name kube-proxy)" kube-proxy /usr/local/bin/kube-proxy "$OS_IMAGE"
extra=$(echo "$list" | grep -E '/(etcd|coredns|pause):')
sandbox=$(sed -n 's/^ *sandbox_image *= *"\(.*\)"/\1/p' "$KIND_SRC/images/base/files/etc/containerd/config.toml")
kindimgs=$(grep -hoE '"[a-z0-9.]+/kindest/(kindnetd|local-path-provisioner|local-path-helper):[^"]+"' \
  "$KIND_SRC"/pkg/build/nodeimage/const_*.go | tr -d '"' | sort -u)
all="$(name kube-proxy)"
for t in $(printf "%s\n" $extra $sandbox $kindimgs | sort -u); do
  case "$t" in
    */etcd:*) img "$t" etcd /usr/local/bin/etcd "$GLIBC" ;;  # tools/k8s's etcd v3.5.21
    */coredns:*) img "$t" coredns /coredns scratch ;;
    */pause:*) img "$t" pause /pause scratch ;;
    */local-path-provisioner:*) img "$t" local-path-provisioner /usr/local/bin/local-path-provisioner scratch ;;
    */local-path-helper:*) docker tag "$OS_IMAGE" "$t" ;;  # runs sh, mkdir, rm
    *) img "$t" pause /pause scratch ;;  # kindnetd: a placeholder, never run (disableDefaultCNI)
  esac
  all="$all $t"
done
# kind reads only the first image's tags from an archive's manifest.json: repack with a
# `repositories` entry first so every image in it is seen and none is pulled.
docker save -o "$work/multi.tar" $all
python3 "$here/node/repack-images.py" "$work/multi.tar" "$B/kube-proxy.tar" $all >/dev/null
rm -f "$work/multi.tar"
tar -C "$tb" -czf "$work/kubernetes-server-linux-amd64.tar.gz" kubernetes
rm -rf "$tb"

# 4. node image
log "kind build node-image $IMAGE"
timed "$BIN/kind" build node-image --type file "$work/kubernetes-server-linux-amd64.tar.gz" \
  --base-image "$BASE" --image "$IMAGE" >&2
log "node image $IMAGE built in $(($(date +%s) - start)) s"
echo "$IMAGE"
