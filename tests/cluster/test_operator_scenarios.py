"""The operator on a real API server (issue 11 item 5, DESIGN.md §8 cluster/).

Each test gets its own namespace, three controllers, the operator as a
process, and BrokerGroups whose pods the node runs as local broker
processes. Checked end to end, comparing content (BrokerIds, keys, order),
not counts:
- a 3-replica group comes up: one master label, status Available, printer
  columns' fields set;
- master pod deleted → a SyncStateSet member is labelled master, the old pod
  returns on a new IP with its old BrokerId as slave, every acknowledged key
  is still readable;
- broker process crashed in the master pod (same pod, container restart) →
  the same;
- every pod deleted at once → the same BrokerIds come back with the data;
- operator stopped, master pod deleted → the controller still fails over; the
  operator fixes labels and status when it returns;
- two operators with peering: killing the active one, the other takes over;
- scale 3→5→3 (the master on a removed pod is switched over first, removed
  ids cleaned from the controller); a user switchover;
- rolling update: slaves first, then switchover, the old master last, with
  writes flowing and none acknowledged lost;
- each CEL rule rejects a bad BrokerGroup with its message.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from tests.cluster.operator_env import (
    OperatorEnv,
    Writer,
    acked_keys,
    apply_crds,
    external_kubeconfig,
    iter_controller_blocks,
    wait_for,
)

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
_blocks = iter_controller_blocks()


def _kubeconfig(request: pytest.FixtureRequest) -> str:
    try:
        cluster = request.getfixturevalue("k8s_cluster")
    except pytest.FixtureLookupError:
        cluster = None
    if cluster is not None:
        return str(getattr(cluster, "kubeconfig", None) or cluster.admin_kubeconfig)
    path = external_kubeconfig()
    if path is None:
        pytest.skip(
            "no cluster: the cluster tier's k8s_cluster fixture is absent and "
            "BROKERGROUP_TEST_KUBECONFIG is not set"
        )
    return path


@pytest.fixture(scope="package")  # as long as k8s_cluster (tests/cluster/conftest.py)
def crds_applied(request: pytest.FixtureRequest) -> str:
    kubeconfig = _kubeconfig(request)
    apply_crds(kubeconfig)
    return kubeconfig


@pytest.fixture
def env(crds_applied: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[OperatorEnv]:
    with operator_env_in_namespace(request, tmp_path, crds_applied, "op") as e:
        yield e


@contextlib.contextmanager
def operator_env_in_namespace(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kubeconfig: str,
    prefix: str,
    env_class: type[OperatorEnv] = OperatorEnv,
) -> Iterator[OperatorEnv]:
    """A controller and operator (`env_class`) for a namespace of their own, `prefix-<hex>`,
    deleted afterwards; the cluster tier's host addresses when it has them."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    core.create_namespace({"metadata": {"name": namespace}})
    crash = None
    hosts = next(_blocks)
    try:
        cluster = request.getfixturevalue("k8s_cluster")
        crash = getattr(cluster, "crash_pod", None)
        # Addresses on this machine that both the test process and the pods reach
        # (pods in their own network namespaces do not see the host's loopback).
        pick = getattr(cluster, "host_addresses", None)
        if pick is not None:
            hosts = tuple(pick(3))
    except pytest.FixtureLookupError:
        pass
    e = env_class(kubeconfig, namespace, tmp_path, hosts, crash=crash)
    e.start()
    try:
        yield e
    finally:
        e.close()
        core.delete_namespace(namespace)


def _write_and_check(
    env: OperatorEnv, name: str, topic: str, tmp: Path, prefix: str, count: int = 200
) -> list[str]:
    address = wait_for("the client Service's endpoint", lambda: env.service_address(name), 30)
    summary = env.produce(address, topic, count, prefix, tmp / "acks.jsonl")
    assert summary.get("failed") == 0 and summary.get("acked") == count, summary
    return acked_keys(tmp / "acks.jsonl")


def _assert_nothing_lost(env: OperatorEnv, name: str, topic: str, acked: list[str]) -> None:
    address = wait_for("the client Service's endpoint", lambda: env.service_address(name), 30)
    read = env.consume_keys(address, topic)
    missing = sorted(set(acked) - set(read))
    assert missing == [], f"{len(missing)} acknowledged keys lost, e.g. {missing[:5]}"


def test_group_comes_up_with_one_master(env: OperatorEnv) -> None:
    env.create_group("orders", 3, ha={"minInSyncReplicas": 2})
    group = env.wait_available("orders", 3)
    status = group["status"]
    labels = env.labelled("orders")
    master = env.master_pod("orders")
    assert master is not None and status["master"]["pod"] == master.metadata.name
    assert status["master"]["brokerId"] == int(master.metadata.labels["brokergroup.io/broker-id"])
    assert sorted(int(b) for _, b, _ in labels.values()) == [1, 2, 3]
    assert status["masterEpoch"] >= 1 and status["inSync"] == "3/3" and status["ready"] == "3/3"
    assert [c["type"] for c in status["conditions"]] == [
        "Ready",
        "Available",
        "Progressing",
        "Degraded",
        "StorageResized",
    ]
    owned = {
        (o.kind, o.name)
        for o in (
            env.apps.read_namespaced_stateful_set("orders", env.namespace).metadata.owner_references
            or []
        )
    }
    assert owned == {("BrokerGroup", "orders")}
    for svc in ("orders", "orders-headless"):
        assert (
            env.core.read_namespaced_service(svc, env.namespace).metadata.owner_references[0].name
            == "orders"
        )


def test_no_master_on_a_full_disk_says_why_and_recovers_when_fixed(env: OperatorEnv) -> None:
    """A diskFullRatio below what any disk here uses: no broker can take writes, so none
    can become master, and the Available condition names the cause for each replica
    (before, "the controller has no live master" and nothing else: the kind e2e tier
    waited 4 minutes per group on a host whose disk was over the ratio). Raising the
    ratio again (a spec change, so a roll of a group that has no master) brings one."""
    # Forced cleaning off: it must start below diskFullRatio (docs/retention.md).
    env.create_group("full", 2, config={"diskFullRatio": 0.0001, "cleanFileForciblyEnable": False})

    def no_master_with_a_reason() -> dict[str, Any] | None:
        status = env.group("full").get("status") or {}
        available = {c["type"]: c for c in status.get("conditions") or []}.get("Available")
        rows = status.get("brokers") or []
        if (
            available is None
            or len(rows) != 2
            or not all("above diskFullRatio 0.0%" in (b.get("inactiveReason") or "") for b in rows)
        ):
            return None
        return available

    available = wait_for("NoMaster naming the full disks", no_master_with_a_reason, 90)
    assert (available["status"], available["reason"]) == ("False", "NoMaster")
    ids = sorted(b["brokerId"] for b in env.group("full")["status"]["brokers"])
    assert ids == [1, 2]
    for broker_id in ids:
        assert f"{broker_id} (store cannot take writes: disk usage " in available["message"]
    assert available["message"].startswith("the controller has no live master; not alive: 1 (")

    env.patch_group("full", {"spec": {"config": {"diskFullRatio": 0.95}}})
    group = env.wait_available("full", 2, 120)
    assert group["status"]["masterEpoch"] >= 1
    assert [b.get("inactiveReason") for b in group["status"]["brokers"]] == [None, None]


def _failover_after(env: OperatorEnv, tmp: Path, disrupt: str) -> None:
    env.create_group("orders", 3, ha={"minInSyncReplicas": 2})
    env.wait_available("orders", 3)
    acked = _write_and_check(env, "orders", "T", tmp, "before-")
    old = env.master_pod("orders")
    assert old is not None
    old_name, old_id, old_ip = (
        old.metadata.name,
        old.metadata.labels["brokergroup.io/broker-id"],
        old.status.pod_ip,
    )
    in_sync = set(env.group("orders")["status"]["syncStateSet"])
    if disrupt == "delete":
        env.delete_pod(old_name)
    else:
        env.crash_broker(old)

    def new_master() -> Any:
        pod = env.master_pod("orders")
        return (
            pod
            if pod is not None and pod.metadata.labels["brokergroup.io/broker-id"] != old_id
            else None
        )

    pod = wait_for("a new master labelled", new_master, 30)
    assert int(pod.metadata.labels["brokergroup.io/broker-id"]) in in_sync
    env.wait_available("orders", 3)
    role, broker_id, ip = env.labelled("orders")[old_name]
    assert (role, broker_id) == ("slave", old_id)
    if disrupt == "delete":
        assert ip != old_ip
    failover = wait_for(
        "status.lastFailover of this failover",
        lambda: (
            ((env.group("orders").get("status") or {}).get("lastFailover") or {}).get("from")
            == int(old_id)
            and env.group("orders")["status"]["lastFailover"]
        ),
        30,
    )
    assert failover["to"] == int(pod.metadata.labels["brokergroup.io/broker-id"])
    acked += _write_and_check(env, "orders", "T", tmp, "after-")
    _assert_nothing_lost(env, "orders", "T", acked)


def test_delete_master_pod(env: OperatorEnv, tmp_path: Path) -> None:
    _failover_after(env, tmp_path, "delete")


def test_crash_master_broker_process(env: OperatorEnv, tmp_path: Path) -> None:
    _failover_after(env, tmp_path, "crash")


def test_delete_all_pods_keeps_ids_and_data(env: OperatorEnv, tmp_path: Path) -> None:
    env.create_group("orders", 3)
    env.wait_available("orders", 3)
    acked = _write_and_check(env, "orders", "T", tmp_path, "all-")
    before = {name: (bid, ip) for name, (_, bid, ip) in env.labelled("orders").items()}
    env.core.delete_collection_namespaced_pod(
        env.namespace, label_selector="brokergroup.io/group=orders"
    )
    wait_for(
        "every pod replaced",
        lambda: (
            all(ip not in (None, before[n][1]) for n, (_, _, ip) in env.labelled("orders").items())
            and len(env.labelled("orders")) == 3
        ),
        90,
    )
    env.wait_available("orders", 3, 120)
    after = {name: bid for name, (_, bid, _) in env.labelled("orders").items()}
    assert after == {name: bid for name, (bid, _) in before.items()}
    _assert_nothing_lost(env, "orders", "T", acked)


def test_operator_down_controller_still_fails_over(env: OperatorEnv) -> None:
    env.create_group("orders", 3)
    env.wait_available("orders", 3)
    old = env.master_pod("orders")
    assert old is not None
    old_id = int(old.metadata.labels["brokergroup.io/broker-id"])
    for op in env.operators:
        op.stop()
    env.delete_pod(old.metadata.name)

    def elected() -> int | None:
        info = env.controllers.replica_info(env.namespace, "orders")
        master = info.get("masterBrokerId")
        return master if master not in (None, old_id) and info.get("masterAlive", True) else None

    new_id = wait_for("the controller to elect without the operator", elected, 30)
    # Labels are stale while no operator runs: the old master's replacement is unlabelled
    # or the label still points at no live pod.
    env.add_operator(9)
    pod = wait_for(
        "the returning operator to label the new master",
        lambda: (
            (p := env.master_pod("orders")) is not None
            and p.metadata.labels["brokergroup.io/broker-id"] == str(new_id)
            and p
        ),
        30,
    )
    assert pod.metadata.labels["brokergroup.io/broker-id"] == str(new_id)
    env.wait_available("orders", 3)
    # Status is written after the labels in the same pass: wait for it too.
    status = wait_for(
        "status to name the new master",
        lambda: (
            (st := env.group("orders").get("status") or {}).get("master", {}).get("brokerId")
            == new_id
            and st
        ),
        30,
    )
    assert status["masterEpoch"] > 1 and status["lastFailover"]["to"] == new_id


def test_standby_operator_takes_over(env: OperatorEnv) -> None:
    env.add_operator(1)  # two operators now, peering on KopfPeering/brokergroup

    def peers() -> int | None:
        body = env.custom.get_namespaced_custom_object(
            "kopf.dev", "v1", env.namespace, "kopfpeerings", "brokergroup"
        )
        n = len(body.get("status") or {})
        return n if n == 2 else None

    wait_for("both operators in the peering object", peers, 30)
    env.create_group("orders", 1)
    env.wait_available("orders", 1)

    def paused(op: Any) -> bool:
        # kopf starts paused and says nothing until it resumes; a replica that
        # resumed and then met a higher priority logs "Pausing operations".
        text = op.log_path.read_text()
        lines = [ln for ln in text.splitlines() if "kopf._core.engines.peering" in ln]
        return not lines or "Pausing operations" in lines[-1]

    def roles() -> tuple[Any, Any] | None:
        active = [op for op in env.operators if not paused(op)]
        standby = [op for op in env.operators if paused(op)]
        return (active[0], standby[0]) if len(active) == 1 and len(standby) == 1 else None

    active, standby = wait_for("one active and one paused operator", roles, 30)
    active.stop(signal.SIGKILL)
    env.create_group("second", 1)
    env.wait_available("second", 1, 90)
    assert "Handler 'group_changed' succeeded" in standby.log_path.read_text()


def test_scale_up_and_down_with_switchover(env: OperatorEnv) -> None:
    env.create_group("orders", 3)
    env.wait_available("orders", 3)
    env.custom.patch_namespaced_custom_object_scale(
        "brokergroup.io",
        "v1alpha1",
        env.namespace,
        "brokergroups",
        "orders",
        {"spec": {"replicas": 5}},
    )
    env.wait_available("orders", 5)
    ids = {name: int(bid) for name, (_, bid, _) in env.labelled("orders").items()}
    assert sorted(ids.values()) == [1, 2, 3, 4, 5]
    # Put the master on a pod that scale-down removes: the user switchover.
    target = ids["orders-4"]
    result = __import__("subprocess").run(
        [
            str(Path(__import__("sys").executable).parent / "brokergroup"),
            "kube",
            "switchover",
            "bg/orders",
            "--to",
            str(target),
            "-n",
            env.namespace,
            "--kubeconfig",
            env.kubeconfig,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert env.master_pod("orders").metadata.name == "orders-4"
    env.patch_group("orders", {"spec": {"replicas": 3}})
    env.wait_available("orders", 3, 90)
    master = env.master_pod("orders")
    assert master.metadata.name in {"orders-0", "orders-1", "orders-2"}
    wait_for(
        "removed ids cleaned from the controller",
        lambda: (
            sorted(
                b["brokerId"]
                for b in env.controllers.replica_info(env.namespace, "orders").get("brokers", [])
            )
            == sorted(ids[f"orders-{i}"] for i in range(3))
        ),
        60,
    )
    reasons = [r for r, _ in env.group_events("orders")]
    assert "Switchover" in reasons and "BrokerIdsCleaned" in reasons


def test_rolling_update_order_with_writes_flowing(env: OperatorEnv, tmp_path: Path) -> None:
    env.create_group("orders", 3, ha={"minInSyncReplicas": 2})
    env.wait_available("orders", 3)
    old_master = env.master_pod("orders").metadata.labels["brokergroup.io/broker-id"]
    ack_log = tmp_path / "acks.jsonl"
    observer = RollObserver(env, "orders")
    observer.start()
    old_revision = env.group("orders")["status"]["updateRevision"]

    def rolled() -> bool:
        g = env.group("orders")
        s = g.get("status") or {}
        return s.get("updateRevision") not in (None, "", old_revision) and all(
            (p.metadata.labels or {}).get("controller-revision-hash") == s["updateRevision"]
            for p in env.pods("orders")
        )

    with Writer(env, "orders", "R", "roll", ack_log) as writer:
        env.patch_group("orders", {"spec": {"config": {"maxPullMessages": 128}}})
        wait_for("every pod on the new template", lambda: rolled() or None, 180, 0.5)
        env.wait_available("orders", 3, 60)
    observer.stop()
    observer.assert_slaves_first(old_master, ("1", "2", "3"))
    reasons = [m for r, m in env.group_events("orders") if r == "RollingUpdate"]
    assert len(reasons) == 4, reasons
    acked = acked_keys(ack_log)
    assert acked, f"no write was acknowledged during the roll:\n{writer.report()}"
    _assert_nothing_lost(env, "orders", "R", acked)


class RollObserver(threading.Thread):
    """Watches the group's pods and writes down, in the API server's order, each
    broker whose pod was deleted ("restart ID") and each change of the labelled
    master ("master ID"). A watch, not polling: the operator moves the label and
    deletes the old master's pod milliseconds apart, and one poll seeing both could
    not tell which came first."""

    def __init__(self, env: OperatorEnv, name: str) -> None:
        super().__init__(daemon=True)
        self.env, self.name = env, name
        self._done = threading.Event()
        self._log: list[str] = []
        self._restarted: set[str] = set()  # uids already written down
        self._last: dict[str, tuple[str, str | None]] = {}  # pod name → (uid, broker-id)
        self._master: str | None = None

    def run(self) -> None:
        selector = f"app.kubernetes.io/name=brokergroup,brokergroup.io/group={self.name}"
        listed = self.env.core.list_namespaced_pod(self.env.namespace, label_selector=selector)
        for pod in listed.items:
            self._see(pod, deleted=False)
        version = listed.metadata.resource_version
        while not self._done.is_set():
            try:
                for event in watch.Watch().stream(
                    self.env.core.list_namespaced_pod, self.env.namespace,
                    label_selector=selector, resource_version=version, timeout_seconds=1,
                ):  # fmt: skip
                    version = event["object"].metadata.resource_version
                    self._see(event["object"], deleted=event["type"] == "DELETED")
                    if self._done.is_set():
                        break
            except ApiException as exc:
                if exc.status != 410:
                    raise
                self._log.append("watch expired")  # a gap: the transcript says so

    def _see(self, pod: Any, *, deleted: bool) -> None:
        labels = pod.metadata.labels or {}
        uid, bid = pod.metadata.uid, labels.get("brokergroup.io/broker-id")
        before = self._last.get(pod.metadata.name)
        if before is not None and before[0] != uid and before[0] not in self._restarted:
            self._restarted.add(before[0])  # replaced without a deletion seen
            self._log.append(f"restart {before[1]}")
        if (deleted or pod.metadata.deletion_timestamp is not None) and uid not in self._restarted:
            self._restarted.add(uid)
            self._log.append(f"restart {bid or (before or ('', None))[1]}")
        elif labels.get("brokergroup.io/role") == "master" and not (
            deleted or pod.metadata.deletion_timestamp is not None
        ):
            if self._master is not None and bid != self._master:
                self._log.append(f"master {bid}")
            self._master = bid
        if bid is not None or before is None or before[0] != uid:
            self._last[pod.metadata.name] = (
                uid,
                bid or (before[1] if before and before[0] == uid else None),
            )

    def stop(self) -> None:
        self._done.set()
        self.join(10)

    def transcript(self) -> list[str]:
        return list(self._log)

    def assert_slaves_first(self, old_master: str, broker_ids: tuple[str, ...]) -> None:
        """Every broker restarted once, and none while it was the master: the roll moves
        the master before it restarts it. The master may also move on its own (CI runs 48
        and 49: a ~2 s stall of the loaded machine timed out the master's heartbeats, once
        18 s after the roll, once in its middle); the roll must still never restart the
        broker that is master at that moment."""
        observed = self.transcript()
        restarts = [t for t in observed if t.startswith("restart")]
        assert sorted(restarts) == sorted(f"restart {b}" for b in broker_ids), observed
        master = old_master
        for event in observed:
            kind, broker = event.split(" ", 1)
            if kind == "master":
                master = broker
            elif kind == "restart":
                assert broker != master, f"{event} while it was master: {observed}"


CEL_CASES = [
    (
        {"replicas": 1, "ha": {"minInSyncReplicas": 2}},
        "spec.ha.minInSyncReplicas must be ≤ spec.replicas",
    ),
    (
        {"replicas": 2, "ha": {"inSyncReplicas": 3}},
        "spec.ha.inSyncReplicas must be ≤ spec.replicas",
    ),
    (
        {"ha": {"heartbeatIntervalMs": 3000}},
        "spec.ha.heartbeatIntervalMs must be < spec.ha.heartbeatTimeoutMs",
    ),
    ({"ha": {"masterLeaseMs": 2500}}, "spec.ha.masterLeaseMs must be < spec.ha.heartbeatTimeoutMs"),
    ({"replicas": 0}, "spec.replicas in body should be greater than or equal to 1"),
    ({"image": ""}, "spec.image must not be empty"),
    ({"config": {"bogus": 1}}, 'unknown field "spec.config.bogus"'),
    ({"config": {"flushDiskType": "SOMETIMES"}}, 'supported values: "SYNC_FLUSH", "ASYNC_FLUSH"'),
    (
        {"template": {"labels": {"brokergroup.io/role": "master"}}},
        "spec.template.labels must not set brokergroup.io/",
    ),
    # Issue 22 item 5: typed spec.config (a string count used to crash-loop a pod).
    (
        {"config": {"maxPullMessages": "lots"}},
        "spec.config.maxPullMessages in body must be of type integer",
    ),
    (
        {"config": {"maxPullMessages": 0}},
        "spec.config.maxPullMessages in body should be greater than or equal to 1",
    ),
    (
        {"config": {"diskFullRatio": 2}},
        "spec.config.diskFullRatio in body should be less than or equal to 1",
    ),
    (
        {"config": {"enableSlaveActingMaster": "yes"}},
        "spec.config.enableSlaveActingMaster in body must be of type boolean",
    ),
    ({"config": {"flushDiskType": 1}}, "spec.config.flushDiskType in body must be of type string"),
    # Issue 20 item 4: spec.engine and the stock brokers' settings.
    ({"engine": "kafka"}, 'spec.engine: Unsupported value: "kafka"'),
    ({"rocketmq": {"heapSize": "1g"}}, "spec.rocketmq holds settings of stock RocketMQ brokers"),
    (
        {"engine": "rocketmq", "config": {"maxTopics": 5}},
        "spec.config holds settings of the built-in broker",
    ),
    (
        {"engine": "rocketmq", "rocketmq": {"flushDiskType": "SOMETIMES"}},
        'spec.rocketmq.flushDiskType: Unsupported value: "SOMETIMES"',
    ),
    (
        {"engine": "rocketmq", "rocketmq": {"heapSize": "1g -XX:+X"}},
        "spec.rocketmq.heapSize in body should match",
    ),
    (
        {"engine": "rocketmq", "rocketmq": {"mappedFileSizeCommitLog": 4096}},
        "spec.rocketmq.mappedFileSizeCommitLog in body should be greater than or equal to 1048576",
    ),
    ({"engine": "rocketmq", "rocketmq": {"bogus": 1}}, 'unknown field "spec.rocketmq.bogus"'),
]


@pytest.mark.parametrize(("spec", "message"), CEL_CASES)
def test_cel_rules_reject_with_their_message(
    crds_applied: str, spec: dict[str, Any], message: str
) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=crds_applied)
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": "brokergroup.io/v1alpha1",
        "kind": "BrokerGroup",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": spec,
    }
    with pytest.raises(ApiException) as exc:
        # Strict: what kubectl asks for by default (an unknown field is an error).
        custom.create_namespaced_custom_object(
            "brokergroup.io", "v1alpha1", "default", "brokergroups", body,
            dry_run="All", field_validation="Strict",
        )  # fmt: skip
    assert exc.value.status in (400, 422)
    assert message in json.loads(exc.value.body)["message"]


NAME_CASES = [
    ("a" * 53, "metadata.name must be at most 52 characters"),
    ("orders.eu", "metadata.name must be a DNS-1035 label"),
    ("9orders", "metadata.name must be a DNS-1035 label"),
]


@pytest.mark.parametrize(("name", "message"), NAME_CASES)
def test_names_that_cannot_name_a_statefulset_are_refused(
    crds_applied: str, name: str, message: str
) -> None:
    """Issue 22 item 5: such a group used to be accepted, and nothing happened."""
    from kubernetes import client, config

    custom = client.CustomObjectsApi(config.new_client_from_config(config_file=crds_applied))
    body = {
        "apiVersion": "brokergroup.io/v1alpha1",
        "kind": "BrokerGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {},
    }
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(
            "brokergroup.io", "v1alpha1", "default", "brokergroups", body, dry_run="All"
        )
    assert exc.value.status == 422
    assert message in json.loads(exc.value.body)["message"]
    body["metadata"]["name"] = "a" * 52  # the longest name that fits is admitted
    body["spec"] = {"config": {"maxPullMessages": 64, "diskFullRatio": 0.9}}
    custom.create_namespaced_custom_object(
        "brokergroup.io", "v1alpha1", "default", "brokergroups", body, dry_run="All"
    )


def test_storage_size_may_be_raised_and_its_class_is_immutable(crds_applied: str) -> None:
    """spec.storage.size may change (the operator grows the claims or says why not:
    test_volume_growth.py); spec.storage.storageClassName may not."""
    from kubernetes import client, config

    custom = client.CustomObjectsApi(config.new_client_from_config(config_file=crds_applied))
    name = f"imm-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "brokergroup.io/v1alpha1",
        "kind": "BrokerGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"storage": {"size": "1Gi", "storageClassName": "standard"}},
    }
    custom.create_namespaced_custom_object(
        "brokergroup.io", "v1alpha1", "default", "brokergroups", body
    )
    try:
        grown = custom.patch_namespaced_custom_object(
            "brokergroup.io",
            "v1alpha1",
            "default",
            "brokergroups",
            name,
            {"spec": {"storage": {"size": "2Gi"}}},
        )
        assert grown["spec"]["storage"]["size"] == "2Gi"
        with pytest.raises(ApiException) as exc:
            custom.patch_namespaced_custom_object(
                "brokergroup.io",
                "v1alpha1",
                "default",
                "brokergroups",
                name,
                {"spec": {"storage": {"storageClassName": "other"}}},
            )
        assert exc.value.status == 422
        assert "spec.storage.storageClassName is immutable" in json.loads(exc.value.body)["message"]
        scaled = custom.patch_namespaced_custom_object_scale(
            "brokergroup.io", "v1alpha1", "default", "brokergroups", name, {"spec": {"replicas": 5}}
        )
        assert scaled["spec"]["replicas"] == 5
    finally:
        # No operator watches "default": remove the finalizer-free object directly.
        custom.delete_namespaced_custom_object(
            "brokergroup.io", "v1alpha1", "default", "brokergroups", name
        )


def test_operator_in_process_with_kopf_runner(
    env: OperatorEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same handlers under kopf's own test runner (`kopf run -m …` in a thread)."""
    from kopf.testing import KopfRunner

    from brokergroup_operator.handlers import registry

    for op in env.operators:  # the process operator steps aside
        op.stop()
    for key, value in env.operator_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("KUBECONFIG", env.kubeconfig)
    args = ["run", "--standalone", "-n", env.namespace, "-m", "brokergroup_operator.handlers"]
    with KopfRunner(args, registry=registry, timeout=60) as runner:
        env.create_group("orders", 2)
        env.wait_available("orders", 2, 90)
        env.patch_group("orders", {"spec": {"replicas": 1, "ha": {"minInSyncReplicas": 1}}})
        env.wait_available("orders", 1, 90)
        env.custom.delete_namespaced_custom_object(
            "brokergroup.io", "v1alpha1", env.namespace, "brokergroups", "orders"
        )
        wait_for("the finalizer to finish", lambda: not env.groups() or None, 60)
    assert runner.exit_code == 0, runner.output
    assert runner.exception is None
    assert "Handler 'group_deleted' succeeded" in runner.output


def test_engine_is_immutable_and_rocketmq_settings_default(crds_applied: str) -> None:
    """Issue 20 item 4: the two engines' stores differ, so a group cannot switch."""
    from kubernetes import client, config

    custom = client.CustomObjectsApi(config.new_client_from_config(config_file=crds_applied))
    name = f"eng-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "brokergroup.io/v1alpha1",
        "kind": "BrokerGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"engine": "rocketmq", "rocketmq": {}},
    }
    created = custom.create_namespaced_custom_object(
        "brokergroup.io", "v1alpha1", "default", "brokergroups", body
    )
    try:
        assert created["spec"]["rocketmq"] == {
            "autoCreateTopicEnable": False,
            "flushDiskType": "SYNC_FLUSH",
            "mappedFileSizeCommitLog": 1073741824,
            "heapSize": "1g",
            "topicQueueNums": 8,
            "timerWheelEnable": True,
            "aclEnabled": False,
        }
        plain = custom.create_namespaced_custom_object(
            "brokergroup.io", "v1alpha1", "default", "brokergroups",
            {**body, "metadata": {"name": f"{name}-b", "namespace": "default"}, "spec": {}},
            dry_run="All",
        )  # fmt: skip
        assert plain["spec"]["engine"] == "brokergroup"
        for patch in ({"spec": {"engine": "brokergroup"}}, {"spec": {"engine": None}}):
            with pytest.raises(ApiException) as exc:
                custom.patch_namespaced_custom_object(
                    "brokergroup.io", "v1alpha1", "default", "brokergroups", name, patch
                )
            assert exc.value.status == 422
            assert "spec.engine is immutable" in json.loads(exc.value.body)["message"]
    finally:
        custom.delete_namespaced_custom_object(
            "brokergroup.io", "v1alpha1", "default", "brokergroups", name
        )
