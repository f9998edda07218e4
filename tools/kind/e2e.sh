#!/usr/bin/env bash
# `make e2e`: the kind e2e tier end to end.
#   1. up.sh: the engine (installed and started by hand if none answers), the node image
#      (kind's standard one, or built offline), the cluster;
#   2. the project image (tools/image/build.sh; OFFLINE_BASE=1 on the offline path), tagged
#      brokergroup:e2e-<image id> and loaded into the node with `kind load docker-image`;
#   3. with E2E_AUDIT=1 (`make e2e-audit`), the audit image (AUDIT=1 tools/image/build.sh),
#      loaded the same way;
#   4. pytest -m e2e tests/e2e (BROKERGROUP_E2E=1): each test installs charts/brokergroup in a
#      namespace of its own and runs an operator scenario in real containers (the audit test:
#      spark-submit --master k8s://, tools/kind/audit/spark-audit.sh).
# When no engine can start, the tests run anyway and skip with that reason (exit 0). On a
# failure the cluster's logs are exported to $KIND_CACHE/cluster/logs. The cluster stays up
# (for debugging) until `make e2e-down`.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
root=$(cd "$here/../.." && pwd)
PYTEST=${PYTEST:-$root/.venv/bin/pytest}
PYTHON=${PYTHON:-$root/.venv/bin/python}
start=$(date +%s)
export BROKERGROUP_E2E=1
out=$(mktemp)
"$here/up.sh" >"$out"
rc=$?
envfile=$(tail -1 "$out")
rm -f "$out"
if [ "$rc" = 2 ]; then
  export BROKERGROUP_E2E_SKIP="no container engine could start here (tools/kind/engine.sh; see above)"
  exec "$PYTEST" -q -p no:cacheprovider -m e2e "$root/tests/e2e" "$@"
elif [ "$rc" != 0 ]; then
  die "$rc" "bringing up the kind cluster failed (rc $rc)"
fi
. "$envfile"
up=$(($(date +%s) - start))

t=$(date +%s)
offline=0
[ "$BROKERGROUP_E2E_PATH" = offline ] && offline=1
log "building the project image (OFFLINE_BASE=$offline)"
IMAGE=brokergroup:e2e-build OFFLINE_BASE=$offline PYTHON=$PYTHON "$root/tools/image/build.sh" >&2 \
  || die 1 "building the project image failed"
id=$(docker image inspect -f '{{.Id}}' brokergroup:e2e-build | sed 's/^sha256://' | cut -c1-12)
export BROKERGROUP_E2E_IMAGE=brokergroup:e2e-$id
docker tag brokergroup:e2e-build "$BROKERGROUP_E2E_IMAGE"
log "kind load docker-image $BROKERGROUP_E2E_IMAGE"
"$BROKERGROUP_E2E_BIN/kind" load docker-image "$BROKERGROUP_E2E_IMAGE" --name "$BROKERGROUP_E2E_CLUSTER" >&2 \
  || die 1 "kind load docker-image failed"
# The audit image (brokergroup[audit] and a JRE: tests/e2e/test_audit_k8s.py runs the audit
# through Spark's Kubernetes scheduler) only with E2E_AUDIT=1 (`make e2e-audit`): its build,
# the 1.3 GB load and the Spark run add about 15 min, more than CI's 90 min leave.
if [ "${E2E_AUDIT:-0}" = 1 ]; then
  log "building the audit image"
  AUDIT=1 IMAGE=brokergroup-audit:e2e-build OFFLINE_BASE=$offline PYTHON=$PYTHON "$root/tools/image/build.sh" >&2 \
    || die 1 "building the audit image failed"
  id=$(docker image inspect -f '{{.Id}}' brokergroup-audit:e2e-build | sed 's/^sha256://' | cut -c1-12)
  export BROKERGROUP_E2E_AUDIT_IMAGE=brokergroup-audit:e2e-$id
  docker tag brokergroup-audit:e2e-build "$BROKERGROUP_E2E_AUDIT_IMAGE"
  "$BROKERGROUP_E2E_BIN/kind" load docker-image "$BROKERGROUP_E2E_AUDIT_IMAGE" --name "$BROKERGROUP_E2E_CLUSTER" >&2 \
    || die 1 "kind load docker-image (audit image) failed"
else
  export BROKERGROUP_E2E_AUDIT_SKIP="the audit on Kubernetes runs with E2E_AUDIT=1 (make e2e-audit)"
fi
# The stock RocketMQ image of spec.engine rocketmq (tools/rocketmq/image.sh: the cached Maven
# Central jars on a debootstrap JRE base). Its scenario skips with the reason when it cannot
# be built here (no Java/Maven for the jars).
log "building the RocketMQ image"
if IMAGE=brokergroup-rocketmq:e2e-build "$root/tools/rocketmq/image.sh" >&2; then
  rid=$(docker image inspect -f '{{.Id}}' brokergroup-rocketmq:e2e-build | sed 's/^sha256://' | cut -c1-12)
  export BROKERGROUP_E2E_ROCKETMQ_IMAGE=brokergroup-rocketmq:e2e-$rid
  docker tag brokergroup-rocketmq:e2e-build "$BROKERGROUP_E2E_ROCKETMQ_IMAGE"
  "$BROKERGROUP_E2E_BIN/kind" load docker-image "$BROKERGROUP_E2E_ROCKETMQ_IMAGE" --name "$BROKERGROUP_E2E_CLUSTER" >&2 \
    || die 1 "kind load docker-image $BROKERGROUP_E2E_ROCKETMQ_IMAGE failed"
else
  export BROKERGROUP_E2E_ROCKETMQ_SKIP="the RocketMQ image could not be built here (tools/rocketmq/image.sh, see above)"
fi
image=$(($(date +%s) - t))

# The groups' volumes (local-path) live on the filesystem of the engine's data root, and a
# broker refuses writes above diskFullRatio (95 % by default, as df counts it): on a nearly
# full disk every group would wait for a master that no broker can become. Say so at once.
data_root=$(docker info -f '{{.DockerRootDir}}' 2>/dev/null) || data_root=$KIND_CACHE
[ -d "$data_root" ] || data_root=$KIND_CACHE
used=$(df --output=pcent "$data_root" | tail -1 | tr -dc 0-9)
if [ "${used:-0}" -ge 90 ]; then
  df -h "$data_root" >&2
  die 1 "the disk of $data_root is $used% used: brokers refuse writes above diskFullRatio (95%), so no group could get a master; free space and run again"
fi

t=$(date +%s)
"$PYTEST" -q -p no:cacheprovider -m e2e "$root/tests/e2e" "$@"
rc=$?
tests=$(($(date +%s) - t))
if [ "$rc" != 0 ]; then
  rm -rf "$KIND_CACHE/cluster/logs"
  "$BROKERGROUP_E2E_BIN/kind" export logs "$KIND_CACHE/cluster/logs" --name "$BROKERGROUP_E2E_CLUSTER" >/dev/null 2>&1
  log "tests failed; cluster logs exported to $KIND_CACHE/cluster/logs"
fi
log "e2e ($BROKERGROUP_E2E_PATH path): cluster ${up} s, image ${image} s, tests ${tests} s, total $(($(date +%s) - start)) s"
exit "$rc"
