"""Both engines under one operator on a real API server (issue 20 items 4-5, cluster tier).

One namespace, three controllers (with their RocketMQ remoting port and name server), the
operator as a process, and two BrokerGroups: `plain` runs the built-in broker, `stock`
(`spec.engine: rocketmq`) runs stock RocketMQ 5.3 brokers, whose pods the process kubelet
runs as JVMs from the cached Maven Central jars (the RocketMQ image's /opt/rocketmq is
mapped to them, tests/cluster/tier/paths.py). For each group:
- it comes up: BrokerIds 1-3 from the controller, one master label, the SyncStateSet of 3;
- the master pod is deleted → a SyncStateSet member is elected by this controller and
  labelled master, the client Service selects it, the old pod comes back on a new IP with
  its old BrokerId (the stock broker's brokerIdentity file is on the PVC) as a slave.
The CRD's engine rules are in test_operator_scenarios.py (CEL_CASES, test_engine_is_immutable).

The stock group runs `spec.rocketmq.aclEnabled: true` (issue 36 item 3, docs/security.md
"Users on the stock brokers"), and after the failover (so a broker on a new IP too) the
operator's user sync (stock_users_sync.py, each pass of the group) is tried with
BrokerGroupUsers and the stock Java client (tools/rocketmq/modes/AclSendMode.java) through
the release's name servers: `app` (Pub on Topic:EngT) sends to EngT and is refused on EngU,
`idle` (no Pub anywhere) is refused on EngT, each refusal RocketMQ's own (NO_PERMISSION,
"User:app has no permission to access Topic:EngU from …"); app's policies patched to add
Pub on EngU, the operator writes them to every stock broker and app then sends to EngU, the
pods not restarted (same uids, no container restart). Without the operator's sync the stock
brokers never learn app: "the stock master knowing app and idle" times out.

The stock group also runs `spec.tls: {mode: enforcing}` (issue 36 items 1 and 3 together,
docs/security.md "Users on the stock brokers"): its stock brokers' remoting ports serve the
operator-issued certificate and take TLS only; the release's name servers and controller
remoting port serve TLS (permissive, with a certificate of a cluster CA the test brings in the
cluster CA Secret, as test_rocketmq_proxy_in_cluster.py: `NamesrvTlsEnv`), so the stock brokers
run `-Dtls.enable=true` (RocketMQ's one switch for every outgoing link of a JVM: enforcing is
refused without it). The operator's user sync dials the brokers over TLS, verified against the
group's trust bundle; the stock Java client runs `-Dtls.enable=true` verifying every server
against the bundle the operator publishes (`stock-tls-trust`, `tls.client.authServer`,
`tls.test.mode.enable=false`), and the test's own probes verify the brokers' certificate for
the group's Service name. A plaintext SEND_MESSAGE_V2 signed by app, the same frame that is
answered SUCCESS over TLS, is closed unanswered. Stock HA replication stays plaintext (RocketMQ
5.3 has no TLS there): the failover runs over it as before.

One module-scoped namespace with both groups, created by the fixture: each test waits for
them and runs alone too (the cluster tier is one work unit: in a full run they run in file
order on one worker, the users test after the failover).

Skips with the reason where Java or the stock jars are missing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.acl import sign
from brokergroup_remoting.command import request
from brokergroup_remoting.frame import encode
from brokergroup_remoting.net import Credentials, RemotingClient
from brokergroup_remoting.tls import client_context
from tests.cluster.operator_env import OperatorEnv, answer_to_plaintext, apply_crds, wait_for
from tests.cluster.test_operator_scenarios import _kubeconfig, operator_env_in_namespace
from tests.cluster.test_rocketmq_proxy_in_cluster import NamesrvTlsEnv
from tests.integration.rocketmq_brokers import find_home
from tests.integration.stock_client_harness import require_stock_client
from tests.integration.test_rocketmq_engine_users import _send as acl_send
from tools.rocketmq.stock_client import TEST_DEADLINE_MS, StockClient

pytestmark = pytest.mark.cluster

STOCK = {
    "engine": "rocketmq",
    # TLS only on the stock brokers' remoting ports (the release's name servers on TLS:
    # NamesrvTlsEnv); HA replication stays plaintext (RocketMQ 5.3 has no TLS there).
    "tls": {"mode": "enforcing"},
    # Small: three JVMs share a 2-core machine with the control plane.
    # No stock proxy (a fourth JVM; its objects are unit-tested, test_operator_rocketmq_proxy).
    "rocketmq": {
        "heapSize": "256m",
        "mappedFileSizeCommitLog": 16 << 20,
        "proxy": {"enabled": False},
        # ACL 2.0 on the stock brokers: every client signs, BrokerGroupUsers synced to them.
        "aclEnabled": True,
    },
    # A JVM on a loaded 2-core machine can pause longer than the 2 s default; a pod deletion
    # is reported by the operator at once, so the failover does not wait for this timeout.
    "ha": {"minInSyncReplicas": 2, "heartbeatTimeoutMs": 5000},
}


@pytest.fixture(scope="module")
def env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorEnv]:
    home = find_home()
    if isinstance(home, str):
        pytest.skip(home)
    kubeconfig = _kubeconfig(request)
    apply_crds(kubeconfig)
    work = tmp_path_factory.mktemp("engines")
    with operator_env_in_namespace(request, work, kubeconfig, "eng", NamesrvTlsEnv) as e:
        # Both groups for every test of the module (each test waits for them itself).
        e.create_group("plain", 3, ha={"minInSyncReplicas": 2})
        e.create_group("stock", 3, **STOCK)
        yield e


def _ids(env: OperatorEnv, name: str) -> dict[str, str | None]:
    return {pod: bid for pod, (_, bid, _) in env.labelled(name).items()}


def _fail_over_by_pod_deletion(env: OperatorEnv, name: str, timeout_s: float) -> None:
    old = env.master_pod(name)
    assert old is not None
    old_name, old_id, old_ip = (
        old.metadata.name,
        old.metadata.labels["brokergroup.io/broker-id"],
        old.status.pod_ip,
    )
    status = env.group(name)["status"]
    in_sync, epoch = set(status["syncStateSet"]), status["masterEpoch"]
    ids_before = _ids(env, name)
    env.delete_pod(old_name)

    def new_master() -> Any:
        pod = env.master_pod(name)
        return (
            pod
            if pod is not None and pod.metadata.labels["brokergroup.io/broker-id"] != old_id
            else None
        )

    pod = wait_for(f"{name}: a new master labelled", new_master, timeout_s)
    assert int(pod.metadata.labels["brokergroup.io/broker-id"]) in in_sync
    # The client Service follows the label (its selector picks the new master's pod).
    assert wait_for(
        f"{name}: the master Service on the new master",
        lambda: env.service_address(name) == f"{pod.status.pod_ip}:10911",
        timeout_s,
    )
    group = env.wait_available(name, 3, timeout_s * 3)
    assert group["status"]["masterEpoch"] > epoch
    role, broker_id, ip = env.labelled(name)[old_name]
    assert (role, broker_id, ip != old_ip) == ("slave", old_id, True)
    assert _ids(env, name) == ids_before  # every pod keeps its BrokerId


def test_one_group_of_each_engine_fails_over_on_master_pod_deletion(env: OperatorEnv) -> None:
    for name in ("plain", "stock"):
        group = env.wait_available(name, 3, 240)
        assert sorted(int(b) for b in _ids(env, name).values() if b) == [1, 2, 3]
        assert group["status"]["inSync"] == "3/3"
    sts = env.apps.read_namespaced_stateful_set("stock", env.namespace)
    (container,) = sts.spec.template.spec.containers
    assert (
        container.image == "brokergroup-rocketmq:5.3.3" and "BrokerStartup" in container.command[2]
    )
    # The controller knows the stock group by the same key as the built-in one.
    info = env.controllers.replica_info(env.namespace, "stock")
    assert len(info.get("syncStateSet") or []) == 3, info
    _fail_over_by_pod_deletion(env, "plain", 30)
    _fail_over_by_pod_deletion(env, "stock", 60)


USERS = "brokergroup.io", "v1alpha1", "brokergroupusers"
T, U = "EngT", "EngU"


def _apply_user(env: OperatorEnv, name: str, policies: list[dict[str, Any]]) -> None:
    body = {
        "apiVersion": "brokergroup.io/v1alpha1",
        "kind": "BrokerGroupUser",
        "metadata": {"name": name},
        "spec": {"policies": policies},
    }
    env.custom.create_namespaced_custom_object(*USERS[:2], env.namespace, USERS[2], body)


def _user_pair(env: OperatorEnv, name: str) -> tuple[str, str] | None:
    """The pair the operator wrote to the user's Secret, once it says Ready=True."""
    user = env.custom.get_namespaced_custom_object(*USERS[:2], env.namespace, USERS[2], name)
    ready = [
        c
        for c in (user.get("status") or {}).get("conditions") or []
        if c.get("type") == "Ready" and c.get("status") == "True"
    ]
    if not ready:
        return None
    data = env.core.read_namespaced_secret(f"{name}-rocketmq-user", env.namespace).data
    pair = json.loads(base64.b64decode(data["rocketmq-credentials"]))
    return str(pair["accessKey"]), str(pair["secretKey"])


def _trust_file(env: OperatorEnv) -> Path:
    """The CAs the stock group's pods trust, as the operator publishes them (the ConfigMap
    `stock-tls-trust`: the cluster CA bundle), in a file for the clients."""
    path = env.work / "stock-trust.crt"
    if not path.exists():
        data = env.core.read_namespaced_config_map("stock-tls-trust", env.namespace).data
        path.write_text(data["ca.crt"])
    return path


def _tls(env: OperatorEnv) -> tuple[ssl.SSLContext, str]:
    """A TLS context verifying against the group's trust bundle, and the name every broker of
    the group is verified for (its Service `stock.<ns>.svc`, which each leaf names)."""
    return client_context(_trust_file(env)), f"stock.{env.namespace}.svc"


async def _invoke(address: str, pair: tuple[str, str], code: int, fields: dict[str, str],
                  body: bytes, tls: tuple[ssl.SSLContext, str]) -> tuple[int, str]:  # fmt: skip
    client = await RemotingClient.connect(
        address, credentials=Credentials(*pair), tls=tls[0], server_hostname=tls[1]
    )
    try:
        answer = await client.invoke(request(code, 0, fields, body), 10)
        return int(answer.code), str(answer.remark or "")
    finally:
        await client.close()


def _heartbeat(env: OperatorEnv, address: str, pair: tuple[str, str]) -> tuple[int, str]:
    """A producer's heartbeat: no resource named, so a stock broker with ACL 2.0 accepts it
    from any user it knows (authentication only) and refuses an unknown signer."""
    body = json.dumps({"clientID": "probe", "producerDataSet": [{"groupName": "p"}]})
    return asyncio.run(_invoke(address, pair, RequestCode.HEART_BEAT, {}, body.encode(), _tls(env)))


def _create_topic(env: OperatorEnv, address: str, pair: tuple[str, str], topic: str) -> None:
    """UPDATE_AND_CREATE_TOPIC on the master (its CreateTopicRequestHeader), signed with the
    group's client pair (a Super user of each stock broker); the broker registers it with the
    name servers. Over TLS (enforcing: mqadmin's plaintext would be closed)."""
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4",
              "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": "0", "order": "false"}  # fmt: skip
    code, remark = asyncio.run(
        _invoke(address, pair, RequestCode.UPDATE_AND_CREATE_TOPIC, fields, b"", _tls(env))
    )
    assert code == ResponseCode.SUCCESS, (code, remark)


#: SEND_MESSAGE_V2's header fields as the stock client fills them (producer group pg).
SEND_FIELDS = {
    "a": "pg", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000000", "h": "0",
    "i": "UNIQ_KEY\x01probe\x02", "j": "0", "k": "false", "m": "false",
}  # fmt: skip


def _send_v2(env: OperatorEnv, address: str, pair: tuple[str, str], topic: str) -> tuple[int, str]:
    """One SEND_MESSAGE_V2 signed with `pair`, over TLS."""
    fields = {**SEND_FIELDS, "b": topic}
    return asyncio.run(
        _invoke(address, pair, RequestCode.SEND_MESSAGE_V2, fields, b"probe", _tls(env))
    )


def _plaintext_send_answer(address: str, pair: tuple[str, str], topic: str) -> bytes:
    """The same signed SEND_MESSAGE_V2 written in plaintext: what the port answers (b"": the
    connection closed with no answer)."""
    frame = encode(sign(request(RequestCode.SEND_MESSAGE_V2, 7, {**SEND_FIELDS, "b": topic},
                                b"plain"), *pair))  # fmt: skip
    return answer_to_plaintext(address, frame)


def _stock_pods(env: OperatorEnv) -> dict[str, tuple[str, int]]:
    """Pod name → (uid, container restarts) of the stock group's pods."""
    return {
        p.metadata.name: (
            p.metadata.uid,
            sum(c.restart_count for c in p.status.container_statuses or []),
        )
        for p in env.pods("stock")
    }


def test_broker_group_users_reach_the_stock_brokers_through_the_operator(
    env: OperatorEnv,
) -> None:
    classes = require_stock_client()
    env.wait_available("stock", 3, 240)
    master = env.master_pod("stock")
    assert master is not None
    address = f"{master.status.pod_ip}:10911"
    client_key = env.client_key_file("stock")
    assert client_key is not None
    raw = json.loads(client_key.read_text())
    group_pair = (str(raw["accessKey"]), str(raw["secretKey"]))
    for topic in (T, U):
        _create_topic(env, address, group_pair, topic)

    _apply_user(env, "app", [{"resources": [f"Topic:{T}"], "actions": ["Pub"]}])
    _apply_user(env, "idle", [{"resources": [f"Topic:{U}"], "actions": ["Sub"]}])
    app = wait_for("app's Secret", lambda: _user_pair(env, "app"), 60)
    idle = wait_for("idle's Secret", lambda: _user_pair(env, "idle"), 60)

    # A pass of the group (every 5 s here) writes the users to each live stock broker.
    def known() -> bool | None:
        answers = [_heartbeat(env, address, p)[0] for p in (app, idle)]
        return all(code == ResponseCode.SUCCESS for code in answers) or None

    wait_for("the stock master knowing app and idle", known, 60)
    before = _stock_pods(env)
    namesrv = ";".join(f"{h}:9876" for h in env.controllers.hosts)

    # TLS on every link of the client (name servers, brokers), each server verified against
    # the bundle the operator publishes; without tls.test.mode.enable=false RocketMQ's client
    # would trust any server.
    tls_options = ("-Dtls.enable=true", "-Dtls.test.mode.enable=false",
                   "-Dtls.client.authServer=true",
                   f"-Dtls.client.trustCertPath={_trust_file(env)}")  # fmt: skip

    def client(pair: tuple[str, str]) -> StockClient:
        return StockClient(
            namesrv, env.work / f"client-{pair[0]}", *pair, classes, tls_options,
            deadline_ms=TEST_DEADLINE_MS,
        )  # fmt: skip

    sent = acl_send(client(app), T, "app-t", count=3)
    assert sent[-1] == {"summary": True, "ok": 3, "refused": 0}, sent
    run = sent[0]["body"].rsplit("-", 1)[0]
    assert [line["body"] for line in sent[:-1]] == [f"{run}-{i}" for i in range(3)]
    refused = acl_send(client(app), U, "app-u", count=1)
    assert refused[-1] == {"summary": True, "ok": 0, "refused": 1}, refused
    assert refused[0]["code"] == ResponseCode.NO_PERMISSION, refused
    assert refused[0]["remark"].startswith(f"User:{app[0]} has no permission to access "
                                           f"Topic:{U} from "), refused  # fmt: skip
    refused = acl_send(client(idle), T, "idle-t", count=1)
    assert refused[-1] == {"summary": True, "ok": 0, "refused": 1}, refused
    assert refused[0]["code"] == ResponseCode.NO_PERMISSION, refused
    assert f"User:{idle[0]} has no permission to access Topic:{T} " in refused[0]["remark"]
    # Enforcing: app's send to T, answered SUCCESS over TLS, written in plaintext is closed
    # unanswered (no SEND_OK, no refusal either: nothing is read past the first byte).
    assert _send_v2(env, address, app, T)[0] == ResponseCode.SUCCESS
    assert _plaintext_send_answer(address, app, T) == b""

    # A change of rights: the operator deletes and creates app again on each broker (its
    # docs), no broker restarted. Probed with one signed send, then the stock client.
    env.custom.patch_namespaced_custom_object(
        *USERS[:2], env.namespace, USERS[2], "app",
        {"spec": {"policies": [{"resources": [f"Topic:{T}", f"Topic:{U}"], "actions": ["Pub"]}]}},
    )  # fmt: skip
    wait_for(
        "app's new right on the stock master",
        lambda: _send_v2(env, address, app, U)[0] == ResponseCode.SUCCESS or None,
        60,
    )
    sent = acl_send(client(app), U, "app-u-after", count=2)
    assert sent[-1] == {"summary": True, "ok": 2, "refused": 0}, sent
    assert _stock_pods(env) == before
