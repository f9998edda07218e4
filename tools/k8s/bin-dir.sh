#!/usr/bin/env bash
# Print the directory the cluster tier's Kubernetes binaries live in (see build.sh).
set -euo pipefail
if [ -n "${BROKERGROUP_K8S_BIN:-}" ]; then echo "$BROKERGROUP_K8S_BIN"; exit 0; fi
here=$(cd "$(dirname "$0")" && pwd)
key=$( (cat "$here/go.sum"; grep -E "^(K8S|HELM)=" "$here/build.sh") | sha256sum | cut -c1-12)
echo "${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/k8s/v1.33.13-$key/bin"
