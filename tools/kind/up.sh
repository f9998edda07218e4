#!/usr/bin/env bash
# Bring up the kind cluster of the e2e tier (single node, named $KIND_CLUSTER) and write the
# tier's settings to $KIND_CACHE/cluster/env (sourced by e2e.sh, read by tests/e2e).
#
# Which node image ("path"), BROKERGROUP_KIND_PATH=auto|standard|offline (default auto):
#   standard  kind's standard node image $KIND_STANDARD_IMAGE (pulled from the registry) and
#             kind's default CNI (kindnetd): a machine with Docker and registry access;
#   offline   the node image built here from the Go module proxy and the Debian mirror
#             (build-node-image.sh), a static bridge CNI instead of kindnetd.
#   auto      standard when the image is present or `docker pull` gets it, else offline.
# An existing cluster of that name is reused. Exit 2 with the reason when no engine can run.
# `up.sh --prepare` (.ci/run, while lint and the test tiers' caches build) stops before the
# cluster: the engine, the path, the node image and the tools; prints the path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
start=$(date +%s)
envs=$("$here/engine.sh" start) || exit $?
eval "$envs"
state=$KIND_CACHE/cluster
mkdir -p "$state"

# The Go-built tools: kubectl and helm from tools/k8s (the cluster tier's), kind pinned here.
path=${BROKERGROUP_KIND_PATH:-auto}
if [ "$path" = auto ]; then
  if docker image inspect "$KIND_STANDARD_IMAGE" >/dev/null 2>&1 \
    || timeout 900 docker pull -q "$KIND_STANDARD_IMAGE" >/dev/null 2>&1; then
    path=standard
  else
    path=offline
  fi
fi
case "$path" in
  standard)
    log "path: standard (kind's node image $KIND_STANDARD_IMAGE from the registry)"
    docker image inspect "$KIND_STANDARD_IMAGE" >/dev/null 2>&1 || docker pull -q "$KIND_STANDARD_IMAGE" >&2
    node_image=$KIND_STANDARD_IMAGE
    k8sbin=$("$here/../k8s/build.sh" | tail -1)
    bin=$KIND_CACHE/standard-bin
    mkdir -p "$bin"
    if ! [ -x "$bin/kind" ]; then
      (cd "$here/go/kind" && GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' \
        -o "$bin/kind" sigs.k8s.io/kind)
    fi
    for b in kubectl helm; do ln -sf "$k8sbin/$b" "$bin/$b"; done
    ;;
  offline)
    log "path: offline (no registry: node image built from the Go module proxy and the Debian mirror)"
    node_image=$("$here/build-node-image.sh" | tail -1)
    bin=$(kind_bin_dir)
    ;;
  *) die 64 "BROKERGROUP_KIND_PATH must be auto, standard or offline (got $path)" ;;
esac
KIND=$bin/kind
if [ "${1:-}" = --prepare ]; then
  log "prepared the $path path ($node_image) in $(($(date +%s) - start)) s; no cluster"
  echo "$path"
  exit 0
fi

# The cluster config: one node; the containerd and kubelet settings this kind of host needs
# (harmless elsewhere); for the offline path a static bridge CNI in place of kindnetd.
cfg=$state/kind-config.yaml
{
  echo "kind: Cluster"
  echo "apiVersion: kind.x-k8s.io/v1alpha4"
  if [ "$path" = offline ]; then
    cp "$here/node/10-bridge.conflist" "$state/10-bridge.conflist"
    echo "networking:"
    echo "  disableDefaultCNI: true   # kindnetd is not on the Go module proxy"
  fi
  echo "nodes:"
  echo "- role: control-plane"
  echo "  image: $node_image"
  if [ "$path" = offline ]; then
    echo "  extraMounts:"
    echo "  - hostPath: $state/10-bridge.conflist"
    echo "    containerPath: /etc/cni/net.d/10-bridge.conflist"
    echo "    readOnly: true"
  fi
  cat "$here/node/kind-config-patches.yaml"
} >"$cfg"

kubeconfig=$state/kubeconfig
if "$KIND" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER" \
  && "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then
  log "cluster $KIND_CLUSTER already up"
else
  "$KIND" delete cluster --name "$KIND_CLUSTER" >/dev/null 2>&1 || true
  log "kind create cluster $KIND_CLUSTER ($node_image)"
  timed "$KIND" create cluster --name "$KIND_CLUSTER" --config "$cfg" --kubeconfig "$kubeconfig" --wait 5m >&2
fi
"$bin/kubectl" --kubeconfig "$kubeconfig" wait --for=condition=Ready node --all --timeout=300s >&2
cat >"$state/env" <<ENV
export DOCKER_HOST=${DOCKER_HOST:-}
export BROKERGROUP_E2E_PATH=$path
export BROKERGROUP_E2E_CLUSTER=$KIND_CLUSTER
export BROKERGROUP_E2E_NODE_IMAGE=$node_image
export BROKERGROUP_E2E_KUBECONFIG=$kubeconfig
export BROKERGROUP_E2E_BIN=$bin
ENV
log "cluster $KIND_CLUSTER ready in $(($(date +%s) - start)) s; settings in $state/env"
echo "$state/env"
