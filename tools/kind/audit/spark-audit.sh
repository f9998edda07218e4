#!/usr/bin/env bash
# `brokergroup audit` on the kind cluster through Spark's Kubernetes scheduler
# (docs/audit.md "Kubernetes"): spark-submit on this host, --deploy-mode cluster, so the
# driver and the executors are pods of the audit image; this host only talks to the API
# server (kind's port on 127.0.0.1).
#
#   tools/kind/audit/spark-audit.sh NAMESPACE STORE_DIR OUT_DIR [brokergroup audit options]
#
# The store is copied into the kind node (/var/local/brokergroup-audit/NAMESPACE/stores) and
# mounted into the driver (read-write: --out goes next to it) and the executors (read-only)
# as a hostPath volume at /audit. The namespace gets the driver's ServiceAccount and Role
# (spark-rbac.yaml). The audit's outputs are copied back to OUT_DIR. Settings: the cluster's
# env file (tools/kind/up.sh), AUDIT_IMAGE (default brokergroup-audit:dev, loaded into kind),
# EXECUTORS (2), EXECUTOR_MEMORY (1g), DRIVER_MEMORY (1g), PYTHON (.venv/bin/python: its
# pyspark is SPARK_HOME). Prints `spark-submit: N s` and exits with the driver's status.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
root=$(cd "$here/../../.." && pwd)
[ $# -ge 3 ] || die 64 "usage: $0 NAMESPACE STORE_DIR OUT_DIR [audit options]"
ns=$1 store=$2 out=$3
shift 3
. "$KIND_CACHE/cluster/env"
export KUBECONFIG=$BROKERGROUP_E2E_KUBECONFIG
kubectl=$BROKERGROUP_E2E_BIN/kubectl
node=$BROKERGROUP_E2E_CLUSTER-control-plane
image=${AUDIT_IMAGE:-brokergroup-audit:dev}
PYTHON=${PYTHON:-$root/.venv/bin/python}
SPARK_HOME=$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
export SPARK_HOME

"$kubectl" get namespace "$ns" >/dev/null 2>&1 || "$kubectl" create namespace "$ns" >/dev/null
"$kubectl" -n "$ns" apply -f "$here/spark-rbac.yaml" >/dev/null
dir=/var/local/brokergroup-audit/$ns
docker exec "$node" sh -c "rm -rf '$dir' && mkdir -p '$dir/out'"
docker cp "$store" "$node:$dir/stores"
docker exec "$node" chown -R 10001:10001 "$dir"

api=$("$kubectl" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
vol() {  # hostPath volume "audit" for the driver or the executors
  echo "--conf spark.kubernetes.$1.volumes.hostPath.audit.options.path=$dir"
  echo "--conf spark.kubernetes.$1.volumes.hostPath.audit.mount.path=/audit"
  echo "--conf spark.kubernetes.$1.volumes.hostPath.audit.mount.readOnly=$2"
}
began=$(date +%s.%N)
rc=0
# Requests are below the cores given (two executors of one core each on a 2-core node
# that also runs the control plane): requests only decide scheduling, not the CPU a pod gets.
# The API calls get 60 s, not 10: on this loaded node the driver's first read of its own pod
# timed out once at 10 s (ExecutorPodsAllocator: TimeoutException).
# shellcheck disable=SC2046
"$SPARK_HOME/bin/spark-submit" --master "k8s://$api" --deploy-mode cluster --name "audit-$ns" \
  --conf spark.kubernetes.namespace="$ns" \
  --conf spark.kubernetes.container.image="$image" \
  --conf spark.kubernetes.container.image.pullPolicy=Never \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=spark \
  --conf spark.kubernetes.executor.deleteOnTermination=false \
  --conf spark.executor.instances="${EXECUTORS:-2}" --conf spark.executor.cores=1 \
  --conf spark.executor.memory="${EXECUTOR_MEMORY:-1g}" --conf spark.driver.memory="${DRIVER_MEMORY:-1g}" \
  --conf spark.kubernetes.driver.request.cores=0.2 --conf spark.kubernetes.executor.request.cores=0.5 \
  --conf spark.kubernetes.driver.requestTimeout=60000 --conf spark.kubernetes.driver.connectionTimeout=60000 \
  --conf spark.kubernetes.submission.requestTimeout=60000 --conf spark.kubernetes.submission.connectionTimeout=60000 \
  $(vol driver false) $(vol executor true) \
  local:///app/audit_job.py /audit/stores --out /audit/out --master "k8s://$api" "$@" \
  >&2 || rc=$?
echo "spark-submit: $(echo "$(date +%s.%N) - $began" | bc) s" >&2
rm -rf "$out" && mkdir -p "$out"
docker cp "$node:$dir/out/." "$out"
driver=$("$kubectl" -n "$ns" get pods -l spark-role=driver -o jsonpath='{.items[0].metadata.name}')
phase=$("$kubectl" -n "$ns" get pod "$driver" -o jsonpath='{.status.phase}')
executors=$("$kubectl" -n "$ns" get pods -l spark-role=executor -o name | wc -l)
log "driver $driver $phase; $executors executor pods; outputs in $out"
"$kubectl" -n "$ns" logs "$driver" >"$out/driver.log" 2>&1 || true
[ "$phase" = Succeeded ] || exit "${rc/#0/1}"
exit "$rc"
