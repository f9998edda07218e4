"""Users with rights on the stock brokers of `local up --engine rocketmq` (issue 36 item 3;
docs/security.md "Users on the stock brokers"): RocketMQ 5.3's own ACL 2.0 on each stock broker
(`--set authenticationEnabled=true --set authorizationEnabled=true`), its users kept in step
with the controllers' by the supervisor (AUTH_CREATE_USER / AUTH_CREATE_ACL /
AUTH_DELETE_USER signed with the group's broker pair).

- `brokergroup admin user create app --allow Topic:StockUsersT=Pub`: every stock broker knows
  app (its pair signs a producer heartbeat the broker accepts), and the stock Java client
  signing with app's pair sends to StockUsersT;
- the same producer on StockUsersU is refused by RocketMQ's own AuthorizationPipeline:
  NO_PERMISSION (16), "User:app has no permission to access Topic:StockUsersU …";
- `admin user delete app`: every broker forgets app and app's sends are refused afterwards;
- the group's client pair (a Super user of each broker) still sends to both topics.

The stock brokers themselves decide every refusal here; the sync only writes their users.
Without the sync (the code before it), app is unknown to the stock brokers: the heartbeat wait
fails ("every broker knowing app"). Skips, saying why, without Java or the cached jars.
Two brokers (not three) keep the JVM count down; addresses and ports of its own.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from brokergroup_cli.local.rocketmq_stock import find_home
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.integration.local_harness import Runtime, local_runtime, wait_for
from tests.integration.stock_client_harness import require_stock_client
from tools.rocketmq.stock_client import TEST_DEADLINE_MS, StockClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

SETTINGS = (
    "local.controllerHosts=127.0.1.201,127.0.1.202,127.0.1.203",
    "local.brokerFirstHost=127.0.1.210",
    "local.brokerLastHost=127.0.1.229",
    "local.masterEndpointHost=127.0.1.200",
    "local.controllerApiPort=29878",
    "local.controllerRaftPort=29880",
    "local.controllerRemotingPort=29879",
    "local.namesrvPort=29876",
    "local.brokerClientPort=30911",
    "local.masterEndpointPort=30900",
    "local.proxyGrpcPort=28081",
    "local.proxyRemotingPort=28080",
    "local.upWaitTimeoutMs=200000",
    "authenticationEnabled=true",
    "authorizationEnabled=true",
)
API = "127.0.1.201:29878,127.0.1.202:29878,127.0.1.203:29878"
T, U = "StockUsersT", "StockUsersU"
APP = ("app", "app-secret-0001")


@dataclass
class Cluster:
    runtime: Runtime
    classes: Path
    work: Path


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = find_home()
    if isinstance(home, str):
        pytest.skip(home)
    classes = require_stock_client()
    root = tmp_path_factory.mktemp("stock-users")
    with local_runtime(root / "local", SETTINGS) as runtime:
        up = runtime.up(brokers=2, engine="rocketmq")
        assert up.returncode == 0, f"local up failed:\n{up.stdout}\n{up.stderr}\n{runtime.logs()}"
        wait_for("both brokers registered", lambda: _two_brokers(runtime), 120, runtime)
        yield Cluster(runtime, classes, root)


def _two_brokers(runtime: Runtime) -> dict[str, Any] | None:
    status = runtime.status()
    brokers = [b for b in status.get("brokers") or [] if b.get("address")]
    if len(brokers) != 2 or status.get("master") is None:
        return None
    return status


def _broker_addresses(runtime: Runtime) -> list[str]:
    return [str(b["address"]) for b in runtime.status()["brokers"] if b.get("address")]


def _admin(runtime: Runtime, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "admin", "user", *args,
         "--controller-addresses", API, "--token-file", str(runtime.root / "token"), "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _client(cluster: Cluster, pair: tuple[str, str], name: str) -> StockClient:
    status = cluster.runtime.status()
    return StockClient(
        status["namesrvAddress"], cluster.work / f"client-{name}", pair[0], pair[1],
        cluster.classes, deadline_ms=TEST_DEADLINE_MS,
    )  # fmt: skip


async def _heartbeat(address: str, pair: tuple[str, str]) -> tuple[int, str]:
    """A producer's heartbeat: it names no resource, so a stock broker with ACL 2.0 on accepts
    it from any user it knows (authentication only) and refuses an unknown one."""
    client = await RemotingClient.connect(address, credentials=Credentials(*pair))
    try:
        body = json.dumps({"clientID": "probe", "producerDataSet": [{"groupName": "p"}]})
        answer = await client.invoke(request(RequestCode.HEART_BEAT, 0, {}, body.encode()), 10)
        return answer.code, answer.remark or ""
    finally:
        await client.close()


def _answers(runtime: Runtime, pair: tuple[str, str]) -> dict[str, tuple[int, str]] | None:
    """Every broker's answer to a heartbeat signed with `pair`; None while a broker's port
    is not open yet (just started or restarted: no answer)."""
    answers = {}
    for address in _broker_addresses(runtime):
        try:
            answers[address] = asyncio.run(_heartbeat(address, pair))
        except OSError:
            return None
    return answers


def _every_broker_knows(runtime: Runtime, pair: tuple[str, str], known: bool) -> None:
    def check() -> dict[str, Any] | None:
        answers = _answers(runtime, pair)
        if answers is None:
            return None
        if all((code == ResponseCode.SUCCESS) == known for code, _ in answers.values()):
            return {"answers": answers}
        return None

    wait_for(f"every broker {'knowing' if known else 'forgetting'} {pair[0]}", check, 60, runtime)


#: The stock client's own give-ups, no broker answer behind them: ClientErrorCode's
#: ACCESS_BROKER_TIMEOUT and REQUEST_TIMEOUT, and -1 (an MQClientException with no broker
#: response as its cause; a refusal always carries the broker's own code, 16 here).
CLIENT_TIMEOUTS = {10002, 10006, -1}


def _send(client: StockClient, topic: str, run: str, count: int = 1) -> list[dict[str, Any]]:
    """`aclSend`, run again (at most twice) when the client JVM gave up on one of its own short
    deadlines before an answer — a busy machine: "call timeout", a name server read past
    1.2 s, a send past 3 s (ClientErrorCode 10002). A refusal is an answer and never retried."""
    for attempt in range(3):
        name = run if attempt == 0 else f"{run}-again{attempt}"
        try:
            lines = client.run(
                "aclSend", topic=topic, count=count, run=name, send_timeout_ms=15_000,
                timeout_s=180,
            )  # fmt: skip
        except RuntimeError as exc:
            if "timeout" not in str(exc).lower() or attempt == 2:
                raise
            continue
        if attempt == 2 or not any(line.get("code") in CLIENT_TIMEOUTS for line in lines):
            return lines
    raise AssertionError("unreachable")


def test_a_user_sends_where_allowed_and_is_refused_elsewhere_by_the_stock_brokers(
    rt: Cluster,
) -> None:
    runtime = rt.runtime
    status = runtime.status()
    group_pair = (str(status["accessKey"]), str(status["secretKey"]))
    # An unknown signer is refused by the stock brokers: ACL 2.0 is on. (Waited for: a
    # broker's port may not be open yet on a loaded machine, which once refused the connection.)
    answered = wait_for("every broker answering", lambda: _answers(runtime, APP), 60, runtime)
    for address, (code, remark) in answered.items():
        assert code == ResponseCode.NO_PERMISSION, (address, code, remark)

    secret = rt.work / "app.secret"
    secret.write_text(APP[1])
    _admin(runtime, "create", APP[0], "--allow", f"Topic:{T}=Pub", "--secret-key-file",
           str(secret))  # fmt: skip
    _every_broker_knows(runtime, APP, True)

    # The group's pair (a Super user) creates both topics on first send and still works.
    group = _client(rt, group_pair, "group")
    for topic in (T, U):
        sent = _send(group, topic, f"group-{topic}", count=2)
        assert sent[-1] == {"summary": True, "ok": 2, "refused": 0}, sent

    app = _client(rt, APP, "app")
    sent = _send(app, T, "t", count=4)
    assert sent[-1] == {"summary": True, "ok": 4, "refused": 0}, sent
    run = sent[0]["body"].rsplit("-", 1)[0]
    assert [line["body"] for line in sent[:-1]] == [f"{run}-{i}" for i in range(4)]

    refused = _send(app, U, "u", count=2)
    assert refused[-1] == {"summary": True, "ok": 0, "refused": 2}, refused
    for line in refused[:-1]:
        assert line["code"] == ResponseCode.NO_PERMISSION, line
        assert f"User:{APP[0]} has no permission to access Topic:{U}" in line["remark"], line

    _admin(runtime, "delete", APP[0])
    _every_broker_knows(runtime, APP, False)
    after = _send(app, T, "gone")
    assert after[-1] == {"summary": True, "ok": 0, "refused": 1}, after

    for address in _broker_addresses(runtime):  # the group's pair: still a Super user
        assert asyncio.run(_heartbeat(address, group_pair))[0] == ResponseCode.SUCCESS
    again = _send(group, T, "group-after")
    assert again[-1] == {"summary": True, "ok": 1, "refused": 0}, again


def test_a_restarted_broker_is_synced_again(rt: Cluster) -> None:
    """A broker's RocksDB keeps its users across a restart: a user deleted while it was down
    must be deleted when it comes back (on its new address)."""
    runtime = rt.runtime
    late = ("late", "late-secret-0001")
    secret = rt.work / "late.secret"
    secret.write_text(late[1])
    _admin(runtime, "create", late[0], "--allow", f"Topic:{T}=Pub", "--secret-key-file",
           str(secret))  # fmt: skip
    _every_broker_knows(runtime, late, True)
    status = runtime.status()
    master_id = status["master"]["brokerId"]
    (slave,) = [b for b in status["brokers"] if b.get("brokerId") not in (None, master_id)]
    killed = runtime.run("kill", f"broker-{slave['brokerId']}")
    assert killed.returncode == 0, killed.stderr
    _admin(runtime, "delete", late[0])

    def back_on_a_new_address() -> dict[str, Any] | None:
        brokers = runtime.status()["brokers"]
        again = [b for b in brokers if b.get("brokerId") == slave["brokerId"]]
        if again and again[0].get("address") not in (None, slave["address"]):
            return {"address": again[0]["address"]}
        return None

    wait_for("the slave back on a new address", back_on_a_new_address, 120, runtime)
    _every_broker_knows(runtime, late, False)
