#!/usr/bin/env bash
# Build the cluster tier's Kubernetes binaries from the Go module proxy (DESIGN.md §10):
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl v1.33.13, etcd v3.5.21
# (all from this directory's pinned go.mod/go.sum) and helm v3.18.6 (its own module).
#
# Output: $BROKERGROUP_K8S_BIN, default ${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/k8s/<key>/bin,
# where <key> hashes go.sum and the pinned versions, so a changed pin builds a new directory.
# Binaries already there are kept (a warm run takes seconds). Go's own caches (GOMODCACHE,
# GOCACHE) are used as configured, so a second checkout rebuilds by relinking only.
# Cold: ~8-15 min on 2 cores, ~4 GB of Go cache; see docs/development.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
bin=$("$here/bin-dir.sh")
mkdir -p "$bin"
# go.sum is complete: a build never rewrites it (the cache key hashes it).
export GOFLAGS=-mod=readonly GOTOOLCHAIN=${GOTOOLCHAIN:-local}
if ! command -v go >/dev/null 2>&1; then
  echo "tools/k8s/build.sh: Go is not installed; the cluster tier cannot be built" >&2
  exit 3
fi
K8S=v1.33.13
HELM=v3.18.6
LD="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD="$LD -X $p.gitVersion=$K8S -X $p.gitMajor=1 -X $p.gitMinor=33 -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
missing() { for b in "$@"; do [ -x "$bin/$b" ] || return 0; done; return 1; }
start=$(date +%s)
if missing kube-apiserver kube-controller-manager kube-scheduler kubectl; then
  echo "building kube-apiserver kube-controller-manager kube-scheduler kubectl $K8S into $bin" >&2
  go build -trimpath -ldflags="$LD" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
fi
if missing etcd; then
  echo "building etcd into $bin" >&2
  # The main package is the module root of go.etcd.io/etcd/server/v3; -o names it etcd.
  go build -trimpath -ldflags="-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
fi
if missing helm; then
  echo "building helm $HELM into $bin" >&2
  GOBIN="$bin" go install -trimpath \
    -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM" \
    "helm.sh/helm/v3/cmd/helm@$HELM"
fi
echo "k8s tools in $bin ($(( $(date +%s) - start )) s):" >&2
"$bin/kube-apiserver" --version >&2
"$bin/kubectl" version --client 2>/dev/null | sed -n 1p >&2
"$bin/etcd" --version 2>/dev/null | sed -n 1p >&2
"$bin/helm" version --short >&2
echo "$bin"
