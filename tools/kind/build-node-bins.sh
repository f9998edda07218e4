#!/usr/bin/env bash
# Build every binary an offline kind node needs, from the Go module proxy only (no registry):
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd: tools/k8s/build.sh
#     (the cluster tier's binaries, reused as they are);
#   - kubelet, kubeadm, kube-proxy: tools/kind/go/k8s-node, a sibling of tools/k8s/go.mod with the
#     same k8s.io/kubernetes version and replaces (every module both use resolves to the same
#     version) built with the same flags, so Go's build cache shares every package already
#     compiled for the cluster tier;
#   - containerd, runc, CNI plugins, crictl, coredns, local-path-provisioner, kind: one small
#     pinned wrapper module each under tools/kind/go/ (their go.sum is committed; -mod=readonly);
#   - pause: tools/kind/pause.go.
# Output: the directory printed on the last line (tools/kind/lib.sh: kind_bin_dir). Binaries
# already there are kept, so a warm run only prints versions.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
command -v go >/dev/null 2>&1 || die 3 "Go is not installed; the offline kind node cannot be built"
export GOFLAGS=-mod=readonly GOTOOLCHAIN=${GOTOOLCHAIN:-local}
out=$(kind_bin_dir)
mkdir -p "$out"
start=$(date +%s)

k8sbin=$("$here/../k8s/build.sh" | tail -1)
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd helm; do
  [ -x "$out/$b" ] || ln -sf "$k8sbin/$b" "$out/$b"
done

if missing "$out" kubelet kubeadm kube-proxy; then
  log "building kubelet kubeadm kube-proxy $K8S_VERSION (tools/kind/go/k8s-node)"
  # The same -trimpath and -ldflags as tools/k8s/build.sh: compiled packages come from its cache.
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=33 -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  timed bash -c "cd '$here/go/k8s-node' && go build -trimpath -ldflags='$ld' -o '$out/' \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy"
fi

# wrapper module, output names, packages (same order)
gobuild() {
  local mod=$1 cgo=$2 tags=$3; shift 3
  local n=$(($# / 2)) names=("${@:1:$(($# / 2))}") pkgs=("${@:$(($# / 2 + 1))}")
  missing "$out" "${names[@]}" || return 0
  log "building ${names[*]} (tools/kind/go/$mod)"
  local i
  for ((i = 0; i < n; i++)); do
    timed bash -c "cd '$here/go/$mod' && CGO_ENABLED=$cgo go build -trimpath -ldflags='-s -w' -tags '$tags' \
      -o '$out/${names[i]}' '${pkgs[i]}'"
  done
}
C=github.com/containerd/containerd/v2/cmd
gobuild containerd 1 "no_aufs no_zfs no_btrfs no_devmapper" containerd containerd-shim-runc-v2 ctr \
  $C/containerd $C/containerd-shim-runc-v2 $C/ctr
# runc needs cgo and libseccomp (Debian: libseccomp-dev); the node image has libseccomp2.
gobuild runc 1 "seccomp urfave_cli_no_docs" runc github.com/opencontainers/runc
P=github.com/containernetworking/plugins/plugins
gobuild cni 0 "" host-local loopback ptp bridge portmap \
  $P/ipam/host-local $P/main/loopback $P/main/ptp $P/main/bridge $P/meta/portmap
gobuild crictl 0 "" crictl sigs.k8s.io/cri-tools/cmd/crictl
gobuild coredns 0 "" coredns github.com/coredns/coredns
gobuild lpp 0 "" local-path-provisioner github.com/rancher/local-path-provisioner
gobuild kind 0 "" kind sigs.k8s.io/kind
if missing "$out" pause; then
  tmp=$(mktemp -d)
  cp "$here/pause.go" "$tmp/main.go" && printf 'module local/pause\n\ngo 1.24.0\n' >"$tmp/go.mod"
  (cd "$tmp" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/pause" .)
  rm -rf "$tmp"
fi
log "node binaries in $out ($(($(date +%s) - start)) s): kind $("$out/kind" version | cut -d' ' -f2)," \
  "$("$out/kubelet" --version), containerd $("$out/containerd" --version | cut -d' ' -f3)," \
  "runc $("$out/runc" --version | sed -n 's/^runc version //p')"
echo "$out"
