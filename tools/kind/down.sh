#!/usr/bin/env bash
# `make e2e-down`: delete the e2e kind cluster and stop the dockerd engine.sh started (by PID),
# undoing its host changes. Images, node binaries and the rootfs stay cached in $KIND_CACHE
# (remove that directory to reclaim the space). An engine this tier did not start is left alone.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
envfile=$KIND_CACHE/cluster/env
if [ -f "$envfile" ]; then
  . "$envfile"
  if [ -x "$BROKERGROUP_E2E_BIN/kind" ] && docker info >/dev/null 2>&1; then
    log "kind delete cluster $BROKERGROUP_E2E_CLUSTER"
    "$BROKERGROUP_E2E_BIN/kind" delete cluster --name "$BROKERGROUP_E2E_CLUSTER" >&2
  fi
  rm -f "$envfile"
fi
"$here/engine.sh" stop
