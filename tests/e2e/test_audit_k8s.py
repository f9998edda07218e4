"""`brokergroup audit` on Kubernetes through Spark's own scheduler (issue 21 item 2,
docs/audit.md "Kubernetes"): spark-submit from this host with `--master k8s://<kind's API
server> --deploy-mode cluster`, so the driver and two executors are pods of the audit
image (tools/kind/audit/spark-audit.sh: the driver's ServiceAccount and Role, the store
copied into the kind node and mounted into every pod as a hostPath volume).

The store: two groups of two replicas written by the broker's encoder, one replica of
group b with a torn last record (a TORN_TAIL finding, and replicas that differ in
length). The summary the pods wrote must equal the one a local[2] session computes from
the same files on this host; the driver pod must have Succeeded with two executor pods.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from brokergroup_broker.store.message_encode import encode_run
from tests.e2e.kind_env import KindCluster

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "kind" / "audit" / "spark-audit.sh"
#: Pods of a 1.4 GB image starting on a shared 2-core node, three JVMs, one small audit.
SUBMIT_TIMEOUT_S = 900


def write_replica(store: Path, group: str, broker_id: int, messages: int, torn: bool) -> None:
    (store / "commitlog").mkdir(parents=True)
    (store / ".broker.meta").write_text(
        f"clusterName=C\nbrokerName={group}\nbrokerId={broker_id}\n"
    )
    bodies = [f"{group}-body-{i}".encode() * 20 for i in range(messages)]
    run = encode_run(
        "AuditK8s", 0, bodies, [{"KEYS": f"{group}-{i}"} for i in range(messages)], flag=0,
        born_timestamp_ms=1, born_host=("127.0.0.1", 1), start_offset=0,
        segment_bytes=1 << 20, store_host=("127.0.0.1", 10911), store_timestamp_ms=2,
        first_queue_offset=0, max_message_bytes=1 << 20,
    )  # fmt: skip
    data = bytes(run.data)
    if torn:
        data += bytes(run.data[:40])  # the first 40 bytes of a record: cut mid-way
    (store / "commitlog" / f"{0:020d}").write_bytes(data)


@pytest.mark.timeout(SUBMIT_TIMEOUT_S + 300)  # and a local[2] session afterwards
def test_kubernetes_audit_gives_the_local_summary(
    kind_cluster: KindCluster, tmp_path: Path
) -> None:
    image = os.environ.get("BROKERGROUP_E2E_AUDIT_IMAGE")
    if not image:
        pytest.skip(
            os.environ.get("BROKERGROUP_E2E_AUDIT_SKIP")
            or "e2e tier: no audit image loaded (tools/kind/e2e.sh builds brokergroup-audit)"
        )
    stores = tmp_path / "stores"
    for group in ("a", "b"):
        for broker_id in (1, 2):
            write_replica(stores / group / f"broker-{broker_id}", group, broker_id, 400,
                          torn=(group, broker_id) == ("b", 2))  # fmt: skip
    namespace = f"audit-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "out"
    try:
        submit = subprocess.run(
            [str(SCRIPT), namespace, str(stores), str(out), "--split-mib", "1"],
            capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S,
            env={**os.environ, "AUDIT_IMAGE": image},
        )  # fmt: skip
        driver_log = (out / "driver.log").read_text() if (out / "driver.log").exists() else ""
        assert submit.returncode == 0, submit.stderr[-4000:] + driver_log[-4000:]
        assert "2 executor pods" in submit.stderr, submit.stderr[-2000:]
        remote = json.loads((out / "summary.json").read_text())
    finally:
        kind_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        subprocess.run(
            ["docker", "exec", f"{kind_cluster.name}-control-plane", "rm", "-rf",
             f"/var/local/brokergroup-audit/{namespace}"],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip

    from brokergroup_audit.job import run_audit
    from brokergroup_audit.result import comparable_summary
    from brokergroup_audit.session import spark_session

    spark = spark_session("local[2]")
    try:
        local = run_audit(spark, str(stores), split_bytes=1 << 20).summary
    finally:
        spark.stop()
    assert local["findingCounts"]["TORN_TAIL"] == 1, local["findingCounts"]
    remote.pop("findings", None)
    assert comparable_summary(remote) == json.loads(
        json.dumps(comparable_summary(local), sort_keys=True)
    )
