"""The operator's side of users on stock brokers (`spec.engine: rocketmq`,
`spec.rocketmq.aclEnabled`; docs/security.md "Users on the stock brokers"):

- the rendered broker.conf: ACL 2.0's switches, providers and the role-change whitelist only
  with aclEnabled, the group's pairs still Super users, a non-boolean refused naming the field,
  and the CRD (and its chart copy) carrying the field with the same default;
- `due`: which brokers a pass syncs (a new usersVersion, a new address, a stale last sync);
- `sync_group_users` against brokers modelled as RocketMQ 5.3.1's AdminBrokerProcessor
  (tests/unit/test_stock_users.py's `_Broker`): the requests, their signatures with the
  group's derived broker pair, and a broker that refuses is retried at the next pass;
- the link's TLS (issue 36): plaintext without spec.tls or with mode disabled, TLS under
  permissive and enforcing, verified against the group's trust bundle when the operator holds
  it; and a real pass (`sync_for_pass`) against a real remoting port enforcing TLS with a
  leaf that names no IP: users arrive over TLS, a plaintext dial is closed ("not synced"), and
  a server of another CA is refused;
- the memory (which broker got which usersVersion, the trust, the TLS context) is the group's
  own, in its runtime memory: the module keeps none, two groups do not share trust, and a
  deleted group's memory is gone after the operator's delete handler.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import ssl
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from brokergroup_controller.credentials import Role, derive_rocketmq_pair
from brokergroup_operator import handlers, stock_users_sync
from brokergroup_operator.certificates import server_names
from brokergroup_operator.reconcile import reconcile_group
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.rocketmq_config import (
    RocketMQSpecError,
    broker_properties,
    per_pod_lines,
)
from brokergroup_operator.spec import GroupContext
from brokergroup_operator.stock_users_sync import (
    GroupUsersMemory,
    _connect,
    due,
    link_tls,
    remember_trust,
    sync_for_pass,
    sync_group_users,
)
from brokergroup_remoting import RequestCode
from brokergroup_remoting.acl import ACCESS_KEY, verify
from brokergroup_remoting.certificates import issue, make_ca
from brokergroup_remoting.command import RemotingCommand
from brokergroup_remoting.net import Connection, RemotingServer
from brokergroup_remoting.stock_users import ACL_PROPERTIES, SyncResult
from brokergroup_remoting.tls import ServerTls, TlsMode, server_context
from tests.unit.test_operator_handlers import Events, FakeController, info
from tests.unit.test_operator_tls_reconcile import CA_REF, TlsKube, tls_runtime
from tests.unit.test_stock_users import SUPERS, _Broker

ROOT = Path(__file__).resolve().parents[2]
APIS = ("c-0.c.ns.svc:9878", "c-1.c.ns.svc:9878", "c-2.c.ns.svc:9878")
PAIR = derive_rocketmq_pair("root-secret", Role.BROKER, "ns", "orders")


def _props(rocketmq: dict[str, Any]) -> dict[str, str]:
    return broker_properties(
        cluster_name="ns",
        broker_name="orders",
        spec={"engine": "rocketmq", "rocketmq": rocketmq},
        controller_addresses=APIS,
    )


def test_acl_properties_only_with_acl_enabled() -> None:
    off = _props({})
    assert not {"authenticationEnabled", "authorizationEnabled", "authorizationProvider"} & set(off)
    on = _props({"aclEnabled": True})
    assert {k: on[k] for k in ACL_PROPERTIES} == ACL_PROPERTIES
    assert on["authenticationEnabled"] == on["authorizationEnabled"] == "true"
    assert on["authenticationWhitelist"] == str(RequestCode.NOTIFY_BROKER_ROLE_CHANGED)
    # everything else is the same file
    assert {k: v for k, v in on.items() if k not in ACL_PROPERTIES} == {
        k: v for k, v in off.items() if k not in ACL_PROPERTIES
    }
    # the group's pairs stay the broker's Super users (written per pod from the Secret)
    script = "\n".join(per_pod_lines())
    assert "innerClientAuthenticationCredentials" in script
    assert "initAuthenticationUser" in script


def test_a_non_boolean_acl_enabled_is_refused_naming_the_field() -> None:
    with pytest.raises(RocketMQSpecError, match=r"spec\.rocketmq\.aclEnabled"):
        _props({"aclEnabled": "yes"})


@pytest.mark.parametrize(
    "path",
    [
        "crds/brokergroup.io_brokergroups.yaml",
        "charts/brokergroup/crds/brokergroup.io_brokergroups.yaml",
    ],
)
def test_the_crd_has_acl_enabled_off_by_default(path: str) -> None:
    crd = yaml.safe_load((ROOT / path).read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    field = spec["properties"]["rocketmq"]["properties"]["aclEnabled"]
    assert (field["type"], field["default"]) == ("boolean", False)


def test_due_syncs_new_versions_new_addresses_and_stale_brokers() -> None:
    memory = GroupUsersMemory()
    a, b = "10.0.0.1:10911", "10.0.0.2:10911"
    assert due([b, a], 3, memory, now_s=0) == [a, b]
    memory.synced = {a: (3, 0.0), b: (3, 0.0)}
    assert due([a, b], 3, memory, now_s=10) == []
    assert due([a, b], 4, memory, now_s=10) == [a, b]  # a new usersVersion
    c = "10.0.0.3:10911"  # b rescheduled on a new IP
    assert due([a, c], 3, memory, now_s=10) == [c]
    assert set(memory.synced) == {a}  # b forgotten
    assert due([a], 3, memory, now_s=60) == [a]  # a container restart on the same IP


class _Client:
    def __init__(self, broker: _Broker, seen: list[str | None]) -> None:
        self._broker = broker
        self._seen = seen
        self.closed = False

    async def invoke(self, cmd: RemotingCommand, timeout_s: float = 3.0) -> RemotingCommand:
        check = verify(cmd, lambda key: PAIR.secret_key if key == PAIR.access_key else None)
        assert check.fault is None, check
        self._seen.append(cmd.fields().get(ACCESS_KEY))
        return self._broker.handle(cmd)

    async def close(self) -> None:
        self.closed = True


class _Controller:
    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.snapshot = snapshot
        self.reads: list[tuple[str, int]] = []

    async def users_snapshot(self, cluster: str, since_version: int = -1) -> dict[str, Any]:
        self.reads.append((cluster, since_version))
        return self.snapshot


SNAPSHOT = {
    "code": "SUCCESS",
    "usersVersion": 5,
    "changed": True,
    "users": [
        {"accessKey": "app", "secretKey": "app-secret-1", "userStatus": "enable", "version": 5,
         "policies": [{"resource": "Topic:T", "actions": ["Pub"], "decision": "Allow",
                       "sourceIps": []}]},
    ],
}  # fmt: skip


def test_sync_group_users_writes_each_due_broker_signed_with_the_broker_pair() -> None:
    brokers = {a: _Broker(list(SUPERS)) for a in ("10.0.0.1:10911", "10.0.0.2:10911")}
    seen: list[str | None] = []
    clients: list[_Client] = []

    refused: list[str] = []

    async def connect(address: str) -> Any:
        if address == "10.0.0.2:10911" and not refused:
            refused.append(address)  # its first try: the JVM is still starting
            raise ConnectionRefusedError("starting")
        clients.append(_Client(brokers[address], seen))
        return clients[-1]

    controller = _Controller(SNAPSHOT)
    memory = GroupUsersMemory()
    pair = (PAIR.access_key, PAIR.secret_key)

    async def one_pass(now_s: float) -> dict[str, SyncResult | str]:
        return await sync_group_users(
            controller,  # type: ignore[arg-type]
            "ns", pair, list(brokers), memory, now_s, connect=connect,
        )  # fmt: skip

    first = asyncio.run(one_pass(0))
    assert first["10.0.0.1:10911"] == SyncResult(("create user app", "create acl app"))
    # A broker not reachable yet is reported and retried at the next pass.
    assert str(first["10.0.0.2:10911"]).startswith("not reachable")
    second = asyncio.run(one_pass(1))
    assert list(second) == ["10.0.0.2:10911"]
    assert set(brokers["10.0.0.2:10911"].users) == {"app", *(s.username for s in SUPERS)}
    assert asyncio.run(one_pass(2)) == {}  # in step: nothing due
    assert controller.reads == [("ns", -1)] * 3
    assert set(seen) == {PAIR.access_key}
    assert all(c.closed for c in clients)
    # a user removed from the controllers goes at the next version
    controller.snapshot = {**SNAPSHOT, "usersVersion": 6, "users": []}
    third = asyncio.run(one_pass(3))
    assert third == {a: SyncResult(("delete user app",)) for a in brokers}
    assert all("app" not in b.users for b in brokers.values())
    assert [b.requests.count(RequestCode.AUTH_DELETE_USER) for b in brokers.values()] == [1, 1]


def _group(tls: dict[str, Any] | None, name: str = "orders") -> GroupContext:
    spec: dict[str, Any] = {"engine": "rocketmq", "rocketmq": {"aclEnabled": True}}
    if tls is not None:
        spec["tls"] = tls
    return GroupContext(
        name=name,
        namespace="ns",
        uid="u1",
        spec=spec,
        default_image="bg:dev",
        default_rocketmq_image="rmq:5.3",
        controller_addresses=APIS,
        secrets=OperatorSecrets("admin-token", "root-secret"),
    )


def test_the_stock_link_is_tls_exactly_when_the_group_has_tls() -> None:
    memory = GroupUsersMemory()
    assert link_tls(_group(None, "t1"), memory) is None
    assert link_tls(_group({"mode": "disabled"}, "t1"), memory) is None
    for mode in ("permissive", "enforcing"):
        # issuer secret / cert-manager: the operator holds no CA: encrypted, not verified
        context = link_tls(_group({"mode": mode}, "t1"), memory)
        assert context is not None and context.verify_mode is ssl.CERT_NONE
    ca = make_ca("t1 CA", now=datetime.datetime.now(datetime.UTC))
    remember_trust(memory, ca.cert_pem.decode())
    context = link_tls(_group({"mode": "enforcing"}, "t1"), memory)
    assert context is not None and context.verify_mode is ssl.CERT_REQUIRED
    assert not context.check_hostname  # pod IPs: the chain is checked, as RocketMQ's client
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "t1 CA"),),)]
    assert link_tls(_group({"mode": "enforcing"}, "t1"), memory) is context  # kept
    # Another group, even with the same bundle, has a context of its own.
    other = GroupUsersMemory()
    remember_trust(other, ca.cert_pem.decode())
    assert link_tls(_group({"mode": "permissive"}, "t2"), other) is not context
    # The trust given up (issuer secret now): a new, unverifying context.
    remember_trust(memory, "")
    again = link_tls(_group({"mode": "enforcing"}, "t1"), memory)
    assert again is not None and again.verify_mode is ssl.CERT_NONE


def test_the_module_keeps_no_state_of_its_own() -> None:
    """What a pass remembers lives in the group's runtime memory (runtime.GroupMemory): no
    module-level dict, list or set a deleted group's entries could stay in (before: the
    trust bundles, TLS contexts and sync records, keyed by group, never emptied)."""
    mutable = {
        name: type(value).__name__
        for name, value in vars(stock_users_sync).items()
        if isinstance(value, dict | list | set | bytearray) and not name.startswith("__")
    }
    assert mutable == {}


async def test_a_pass_syncs_users_to_a_broker_enforcing_tls_and_verifies_it(
    tmp_path: Path,
) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca, other_ca = make_ca("cluster CA", now=now), make_ca("another CA", now=now)
    # The group's leaf as the operator issues it: Service and pod names, no IP.
    leaf = issue(ca, "orders.ns", list(server_names("orders", "ns")), now=now)
    leaf.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    broker = _Broker(list(SUPERS))
    seen: list[str | None] = []

    async def handle(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        check = verify(cmd, lambda key: PAIR.secret_key if key == PAIR.access_key else None)
        assert check.fault is None, check
        seen.append(cmd.fields().get(ACCESS_KEY))
        return broker.handle(cmd)

    codes = (
        RequestCode.AUTH_LIST_USER,
        RequestCode.AUTH_LIST_ACL,
        RequestCode.AUTH_CREATE_USER,
        RequestCode.AUTH_UPDATE_USER,
        RequestCode.AUTH_DELETE_USER,
        RequestCode.AUTH_CREATE_ACL,
        RequestCode.AUTH_UPDATE_ACL,
        RequestCode.AUTH_DELETE_ACL,
    )
    tls = ServerTls(TlsMode.ENFORCING, server_context(tmp_path / "tls.crt", tmp_path / "tls.key"))
    server = RemotingServer(dict.fromkeys(codes, handle), auth=None, tls=tls, name="stock")
    await server.start("127.0.0.1", 0)
    address = f"127.0.0.1:{server.port}"
    group = _group({"mode": "enforcing"})
    memory = GroupUsersMemory()
    try:
        # The old dial, plaintext: closed unanswered under enforcing, every pass.
        plain = await sync_group_users(
            _Controller(SNAPSHOT),  # type: ignore[arg-type]
            "ns", (PAIR.access_key, PAIR.secret_key), [address], GroupUsersMemory(), 0,
        )  # fmt: skip
        assert str(plain[address]).startswith("not synced"), plain
        assert broker.requests == []
        # A server the group's trust does not cover is refused before any request.
        remember_trust(memory, other_ca.cert_pem.decode())
        impostor = await sync_group_users(
            _Controller(SNAPSHOT),  # type: ignore[arg-type]
            "ns", (PAIR.access_key, PAIR.secret_key), [address], GroupUsersMemory(), 0,
            connect=functools.partial(_connect, tls=link_tls(group, memory)),
        )  # fmt: skip
        assert "CERTIFICATE_VERIFY_FAILED" in str(impostor[address]), impostor
        assert broker.requests == []
        # The pass as reconcile.py runs it: over TLS, verified against the group's bundle.
        remember_trust(memory, ca.cert_pem.decode())
        await sync_for_pass(group, _Controller(SNAPSHOT), [address], 0, memory)  # type: ignore[arg-type]
        assert set(broker.users) == {"app", *(s.username for s in SUPERS)}
        assert broker.requests[:2] == [RequestCode.AUTH_LIST_USER, RequestCode.AUTH_LIST_ACL]
        assert RequestCode.AUTH_CREATE_USER in broker.requests
        assert set(seen) == {PAIR.access_key}
        assert memory.synced[address][0] == SNAPSHOT["usersVersion"]
    finally:
        await server.close()


def _tls_group(name: str, tls: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "uid": f"u-{name}", "generation": 1}
    return {"metadata": meta, "spec": {"replicas": 3, "tls": tls}, "status": {}}


async def test_a_groups_trust_is_its_own_and_goes_when_the_group_is_deleted() -> None:
    """Passes through reconcile.py (tls_material.py hands the trust over): group `a` (issuer
    operator) holds the cluster CA bundle in its runtime memory, group `b` (the user's own
    Secret: a CA the operator cannot read) holds none and dials unverified; `a` deleted
    through the operator's delete handler, its memory (trust, context, sync records) is
    gone and `b`'s untouched."""
    kube = TlsKube([])
    rt = tls_runtime(kube, FakeController(info(1)))
    a = _tls_group("a", {"mode": "enforcing"})
    b = _tls_group("b", {"issuer": "secret", "secretName": "mine", "mode": "enforcing"})
    await reconcile_group(rt, a, Events())
    await reconcile_group(rt, b, Events())
    bundle = kube.obj("Secret", CA_REF[1], CA_REF[0])["stringData"]["ca-bundle.crt"]
    mem_a, mem_b = rt.groups[("ns", "a")].stock_users, rt.groups[("ns", "b")].stock_users
    assert (mem_a.trust_pem, mem_b.trust_pem) == (bundle, "")
    link_a, link_b = link_tls(rt.context(a), mem_a), link_tls(rt.context(b), mem_b)
    assert link_a is not None and link_a.verify_mode is ssl.CERT_REQUIRED
    assert link_b is not None and link_b.verify_mode is ssl.CERT_NONE
    mem_a.synced["10.0.0.1:10911"] = (5, 0.0)
    mem_b.synced["10.0.0.9:10911"] = (5, 0.0)

    await handlers.group_deleted(
        body=kopf.Body(a), name="a", namespace="ns", memo=kopf.Memo(runtime=rt),
        runtime=datetime.timedelta(0),
    )  # fmt: skip
    assert ("ns", "a") not in rt.groups
    assert rt.groups[("ns", "b")].stock_users is mem_b
    assert mem_b.synced == {"10.0.0.9:10911": (5, 0.0)} and mem_b.trust_pem == ""
    # A group of the same name made again starts with nothing of the old one.
    fresh = rt.memory(("ns", "a")).stock_users
    assert (fresh.trust_pem, fresh.synced, fresh.context) == ("", {}, None)
