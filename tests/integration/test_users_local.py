"""Users with rights across the groups of a cluster (issue 36 item 3; docs/security.md "Users
with rights") on a real `brokergroup local up --groups 2` (broker-a and broker-b, one broker
each, under the same three controllers), through the stock RocketMQ 5.3.1 Java client.

- `brokergroup admin user create app --allow Topic:UsersT=Pub`: the stock producer signing
  with app's pair sends to UsersT, and the sends land on queues of both groups (the topic is
  created on first send on each group's master);
- the same producer on UsersU is refused by the broker as RocketMQ 5.3 refuses it: response
  code NO_PERMISSION (16), remark "User:app has no permission to access Topic:UsersU from
  <ip>, no matched policies." — and nothing of UsersU is stored;
- a user `reader` allowed Sub (and Get, as RocketMQ's GET_MAX_OFFSET needs) on UsersT and Sub
  on its group consumes every message sent, from both groups;
- `admin user delete app`: app's sends are refused afterwards;
- each group's own client pair still works on its group's master (per-group pairs unchanged).

Skips, saying why, without Java or the cached client jars. On the code before users, app's
pair is an unknown AccessKey everywhere: the producer finds no route and every send fails.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.integration.local_harness import Runtime, local_runtime, wait_for
from tests.integration.stock_client_harness import require_stock_client
from tools.rocketmq.stock_client import TEST_DEADLINE_MS, StockClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

SETTINGS = (
    "local.controllerHosts=127.0.1.101,127.0.1.102,127.0.1.103",
    "local.brokerFirstHost=127.0.1.110",
    "local.brokerLastHost=127.0.1.129",
    "local.masterEndpointHost=127.0.1.100",
)
API = "127.0.1.101:19878,127.0.1.102:19878,127.0.1.103:19878"
REMOTING_PORT = 20911 + 3  # a built-in broker's remoting port: client port + 3
T, U, G = "UsersT", "UsersU", "UsersG"
APP = ("app", "app-secret-0001")
READER = ("reader", "reader-secret-0001")


@dataclass
class Cluster:
    runtime: Runtime
    classes: Path
    work: Path


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    classes = require_stock_client()
    root = tmp_path_factory.mktemp("users")
    with local_runtime(root / "local", SETTINGS) as runtime:
        args = ["up", "--detach", "--brokers", "1", "--groups", "2"]
        for item in runtime.settings:
            args += ["--set", item]
        up = runtime.run(*args, timeout_s=240)
        assert up.returncode == 0, f"local up failed:\n{up.stdout}\n{up.stderr}\n{runtime.logs()}"
        wait_for("both groups with a master", lambda: _masters(runtime), 120, runtime)
        yield Cluster(runtime, classes, root)


def _masters(runtime: Runtime) -> dict[str, Any] | None:
    status = runtime.status()
    groups = status.get("groups") or []
    if [g["brokerName"] for g in groups] != ["broker-a", "broker-b"]:
        return None
    if any(g.get("masterAddress") is None for g in groups):
        return None
    return status


def _admin(runtime: Runtime, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "admin", "user", *args,
         "--controller-addresses", API, "--token-file", str(runtime.root / "token"), "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _client(cluster: Cluster, pair: tuple[str, str]) -> StockClient:
    status = cluster.runtime.status()
    return StockClient(
        status["namesrvAddress"], cluster.work / f"client-{pair[0]}", pair[0], pair[1],
        cluster.classes, deadline_ms=TEST_DEADLINE_MS,
    )  # fmt: skip


def _remoting_masters(runtime: Runtime) -> dict[str, str]:
    groups = runtime.status()["groups"]
    return {
        g["brokerName"]: f"{g['masterAddress'].rsplit(':', 1)[0]}:{REMOTING_PORT}" for g in groups
    }


async def _ask(address: str, pair: tuple[str, str], cmd: RemotingCommand) -> int:
    client = await RemotingClient.connect(address, credentials=Credentials(*pair))
    try:
        return (await client.invoke(cmd, 10)).code
    finally:
        await client.close()


async def _heartbeat(address: str, pair: tuple[str, str]) -> tuple[int, str]:
    """A producer's heartbeat (it names no resource: a known signer is all it needs)."""
    client = await RemotingClient.connect(address, credentials=Credentials(*pair))
    try:
        body = json.dumps({"clientID": "probe", "producerDataSet": [{"groupName": "p"}]})
        answer = await client.invoke(request(RequestCode.HEART_BEAT, 0, {}, body.encode()), 10)
        return answer.code, answer.remark or ""
    finally:
        await client.close()


def _every_master_knows(runtime: Runtime, pair: tuple[str, str], known: bool) -> None:
    """Wait (bounded) until every master has (or has dropped) the user: the brokers read the
    cluster's users from the controller by usersVersion."""

    def check() -> dict[str, Any] | None:
        for address in _remoting_masters(runtime).values():
            code, _ = asyncio.run(_heartbeat(address, pair))
            if (code == ResponseCode.SUCCESS) != known:
                return None
        return {}

    wait_for(f"every master {'knowing' if known else 'forgetting'} {pair[0]}", check, 60, runtime)


def test_a_user_spans_both_groups(rt: Cluster) -> None:
    runtime = rt.runtime
    _admin(runtime, "create", APP[0], "--allow", f"Topic:{T}=Pub", "--secret-key-file",
           str(_secret_file(rt, APP)))  # fmt: skip
    _admin(runtime, "create", READER[0], "--allow", f"Topic:{T}=Sub,Get", "--allow",
           f"Group:{G}=Sub", "--secret-key-file", str(_secret_file(rt, READER)))  # fmt: skip
    _every_master_knows(runtime, APP, True)
    _every_master_knows(runtime, READER, True)

    app = _client(rt, APP)
    sent = app.run("aclSend", topic=T, count=16, run="t", timeout_s=180)
    assert sent[-1] == {"summary": True, "ok": 16, "refused": 0}, sent
    assert {line["brokerName"] for line in sent[:-1]} == {"broker-a", "broker-b"}

    refused = app.run("aclSend", topic=U, count=2, run="u", timeout_s=180)
    assert refused[-1] == {"summary": True, "ok": 0, "refused": 2}, refused
    for line in refused[:-1]:
        assert line["code"] == ResponseCode.NO_PERMISSION
        assert line["remark"].startswith(f"User:app has no permission to access Topic:{U} from ")
        assert line["remark"].endswith(", no matched policies.")
    # nothing of UsersU was created: the refusal came before the send's handler
    namesrv = runtime.status()["namesrvAddress"].split(";")[0]
    route = asyncio.run(_ask(namesrv, READER, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0,
                                                      {"topic": U})))  # fmt: skip
    assert route == ResponseCode.TOPIC_NOT_EXIST

    reader = _client(rt, READER)
    got = reader.run("consume", topic=T, group=G, count=16, idle_s=30, timeout_s=180)
    bodies = sorted(base64.b64decode(m["body"]).decode() for m in got if "summary" not in m)
    assert bodies == sorted(line["body"] for line in sent[:-1])
    assert {m["brokerName"] for m in got if "summary" not in m} == {"broker-a", "broker-b"}

    _admin(runtime, "delete", APP[0])
    _every_master_knows(runtime, APP, False)
    after = app.run("aclSend", topic=T, count=1, run="gone", timeout_s=180)
    assert after[-1]["ok"] == 0, after


def test_each_groups_pair_still_works_on_its_group(rt: Cluster) -> None:
    groups = rt.runtime.status()["groups"]
    masters = _remoting_masters(rt.runtime)
    for group in groups:
        pair = (group["accessKey"], group["secretKey"])
        code, remark = asyncio.run(_heartbeat(masters[group["brokerName"]], pair))
        assert code == ResponseCode.SUCCESS, remark
        other = "broker-b" if group["brokerName"] == "broker-a" else "broker-a"
        code, remark = asyncio.run(_heartbeat(masters[other], pair))
        assert code == ResponseCode.NO_PERMISSION and "sign with that group's pair" in remark


def _secret_file(cluster: Cluster, pair: tuple[str, str]) -> Path:
    path = cluster.work / f"{pair[0]}.secret"
    path.write_text(pair[1])
    return path


def test_status_shows_both_groups(rt: Cluster) -> None:
    text = rt.runtime.run("status").stdout
    assert "groups:\n  broker-a: master " in text and "\n  broker-b: master " in text
