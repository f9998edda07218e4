"""A committed election is in the name server's route at once (DESIGN.md §12), local runtime.

`brokergroup local up` (3 controllers on 127.0.1.1-3, 3 brokers): `local status --json`
gives `namesrvAddress`, `accessKey` and `secretKey`. Every broker registers its RocketMQ
remoting port (client port + 3) with every name server under its persistent BrokerId, on a
connection it keeps open (brokergroup_broker.remoting_front.namesrv_link); the route names
the controller's master brokerId 0, at the group's stable master address (`masterAddress`,
the supervisor's forwarder; its `masterTarget` is the master's remoting port). After `local
kill master`, the controller leader's GET /v1/watch returns the committed election; the very
next route from that node's name server routes the new master as brokerId 0 (it is no longer
listed as a slave), with no registration in between (the killed master's registration went
with its connection), and brokerId 0 is still the same stable address, while the forwarder's
target moves to the new master. The other nodes follow as they apply the entry (bounded
wait). An unsigned request is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.integration.local_harness import Runtime, local_runtime, wait_for

pytestmark = pytest.mark.integration

TOPIC = "TBW102"  # every broker of the local runtime registers it (autoCreateTopicEnable)
REMOTING_PORT = 20911 + 3
API_PORT = 19878


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    with local_runtime(tmp_path / "local") as rt:
        yield rt


def http_json(url: str, token: str, timeout_s: float) -> dict[str, Any]:
    """A controller read: reads need a credential too (the admin token of the runtime)."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=timeout_s) as response:
        data: dict[str, Any] = json.loads(response.read())
        return data


async def broker_addrs(namesrv: str, credentials: Credentials) -> dict[str, str]:
    client = await RemotingClient.connect(namesrv, credentials=credentials)
    try:
        answer = await client.invoke(
            request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": TOPIC}), timeout_s=5
        )
    finally:
        await client.close()
    assert answer.code == ResponseCode.SUCCESS, answer
    addrs: dict[str, str] = json.loads(answer.body)["brokerDatas"][0]["brokerAddrs"]
    return addrs


async def raft_leader_host(nodes: list[str], token: str) -> str:
    """The host of the controller that is the Raft leader now (bounded wait)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for node in nodes:
            with contextlib.suppress(OSError, ValueError):
                raft = await asyncio.to_thread(
                    http_json, f"http://{node.split(':')[0]}:{API_PORT}/v1/raft", token, 5
                )
                if raft.get("isLeader"):
                    return node.split(":")[0]
        await asyncio.sleep(0.2)
    raise AssertionError(f"no controller of {nodes} is the Raft leader")


def forwarding_to(status: dict[str, Any], target: str | None) -> dict[str, Any] | None:
    """`status` once the stable address forwards to `target` (None: the status's master)."""
    if target is None and status.get("master") is not None:
        target = f"{status['master']['address'].rsplit(':', 1)[0]}:{REMOTING_PORT}"
    return status if target is not None and status.get("masterTarget") == target else None


async def scenario(runtime: Runtime, status: dict[str, Any]) -> None:
    token = (runtime.root / "token").read_text().strip()
    credentials = Credentials(status["accessKey"], status["secretKey"])
    nodes = status["namesrvAddress"].split(";")
    master_id = status["master"]["brokerId"]
    address_of = {
        b["brokerId"]: f"{b['address'].rsplit(':', 1)[0]}:{REMOTING_PORT}"
        for b in status["brokers"]
    }

    # Unsigned: refused before anything is decoded.
    anonymous = await RemotingClient.connect(nodes[0])
    refused = await anonymous.invoke(request(RequestCode.GET_BROKER_CLUSTER_INFO, 0), 5)
    await anonymous.close()
    assert refused.code == ResponseCode.NO_PERMISSION

    stable = status["masterAddress"]
    assert stable == "127.0.1.10:20900"
    assert stable not in address_of.values()
    expected = {str(i): a for i, a in address_of.items() if i != master_id}
    expected["0"] = stable
    for node in nodes:  # the brokers register themselves at start-up (bounded wait)
        for _ in range(100):
            with contextlib.suppress(AssertionError):
                if await broker_addrs(node, credentials) == expected:
                    break
            await asyncio.sleep(0.2)
        assert await broker_addrs(node, credentials) == expected
    leader_host = await raft_leader_host(nodes, token)
    epoch, set_epoch = status["masterEpoch"], status["syncStateSetEpoch"]

    killed = runtime.run("kill", "master")
    assert killed.returncode == 0, killed.stderr

    # Follow the leader's commits until the election (SyncStateSet changes may come first).
    deadline = time.monotonic() + 45
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        query = (
            f"clusterName={status['clusterName']}&brokerName={status['brokerName']}"
            f"&masterEpoch={epoch}&syncStateSetEpoch={set_epoch}&timeoutMs=5000"
        )
        try:
            info = await asyncio.to_thread(
                http_json, f"http://{leader_host}:{API_PORT}/v1/watch?{query}", token, 10
            )
        except urllib.error.HTTPError as exc:
            # 503 NOT_LEADER: a Raft election since the leader was found (a stall of the
            # controllers on a loaded machine); a broker's client asks the new leader too.
            if exc.code != 503:
                raise
            leader_host = await raft_leader_host(nodes, token)
            continue
        if info["masterEpoch"] > status["masterEpoch"] and info["masterBrokerId"] is not None:
            break
        epoch, set_epoch = info["masterEpoch"], info["syncStateSetEpoch"]
    new_master = info["masterBrokerId"]
    assert new_master is not None and info["masterEpoch"] > status["masterEpoch"], info
    # Usually a slave; when the controllers stalled past the supervisor's restart of the
    # killed broker (on a new address, its store intact, still in the SyncStateSet), it may
    # be elected again at the new masterEpoch, which is just as right.
    reelected = new_master == master_id

    # The leader applied it before answering: its name server's next route has it.
    port = nodes[0].rsplit(":", 1)[1]
    after = await broker_addrs(f"{leader_host}:{port}", credentials)
    assert after["0"] == stable
    # The killed master's registration went with its connection; if the name server has not
    # seen that close yet, it keeps its persistent id; on a loaded machine the supervisor may
    # have restarted it already, on a new address, registered under that id as a slave.
    assert after.get(str(master_id)) != stable
    assert str(new_master) not in after
    for node in nodes:  # followers apply the same entry a moment later
        for _ in range(50):
            if str(new_master) not in await broker_addrs(node, credentials):
                break
            await asyncio.sleep(0.1)
        route = await broker_addrs(node, credentials)
        assert route["0"] == stable and str(new_master) not in route, route
    # The stable address now forwards to the new master's remoting port (bounded wait: the
    # status file is rewritten every poll).
    moved = wait_for(
        "the forwarder on the new master",
        lambda: forwarding_to(runtime.status(), None if reelected else address_of[new_master]),
        30,
        runtime,
    )
    assert moved["masterAddress"] == stable


def test_a_committed_election_moves_broker_id_0_before_any_registration(runtime: Runtime) -> None:
    up = runtime.up(brokers=3)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"
    status = wait_for(
        "three brokers in the SyncStateSet",
        lambda: (
            ((s := runtime.status())["master"] is not None and len(s["syncStateSet"]) == 3 and s)
            or None
        ),
        60,
        runtime,
    )
    assert status["namesrvAddress"] == "127.0.1.1:19876;127.0.1.2:19876;127.0.1.3:19876"
    # The group's client pair (what applications sign with) and the release's admin pair.
    for name, access, secret in (
        ("client-keys.json", "accessKey", "secretKey"),
        ("namesrv-keys.json", "adminAccessKey", "adminSecretKey"),
    ):
        keys = json.loads((runtime.root / name).read_text())
        assert (keys["accessKey"], keys["secretKey"]) == (status[access], status[secret])
        assert (runtime.root / name).stat().st_mode & 0o777 == 0o600
    assert status["accessKey"] != status["adminAccessKey"]
    status = wait_for(
        "the forwarder on the master",
        lambda: forwarding_to(runtime.status(), None),
        30,
        runtime,
    )
    asyncio.run(scenario(runtime, status))


async def route_or_none(namesrv: str, credentials: Credentials) -> dict[str, str] | None:
    """The topic's brokerAddrs from `namesrv`, or None (not answering, or no route yet)."""
    try:
        return await broker_addrs(namesrv, credentials)
    except (OSError, TimeoutError, AssertionError):
        return None


async def restarted_name_server(runtime: Runtime, status: dict[str, Any]) -> None:
    credentials = Credentials(status["accessKey"], status["secretKey"])
    nodes = status["namesrvAddress"].split(";")
    address_of = {
        b["brokerId"]: f"{b['address'].rsplit(':', 1)[0]}:{REMOTING_PORT}"
        for b in status["brokers"]
    }
    expected = {str(i): a for i, a in address_of.items() if i != status["master"]["brokerId"]}
    expected["0"] = status["masterAddress"]
    # A follower's node: its name server restarts with its controller, no election needed.
    leader = status["controllerLeader"]["nodeId"]
    node_id = next(c["nodeId"] for c in status["controllers"] if c["nodeId"] != leader)
    node = nodes[node_id - 1]
    for _ in range(100):  # every broker registered there before
        if await route_or_none(node, credentials) == expected:
            break
        await asyncio.sleep(0.2)
    assert await route_or_none(node, credentials) == expected
    killed = runtime.run("kill", f"controller-{node_id}")
    assert killed.returncode == 0, killed.stderr
    # Back on its address with an empty table; the brokers saw their connections to it
    # close and register again within the retry (0.5 s doubling), not at their period
    # (100 s here): before, this route had no brokers until then (TOPIC_NOT_EXIST).
    deadline = time.monotonic() + 60
    route = None
    while time.monotonic() < deadline and route != expected:
        route = await route_or_none(node, credentials)
        await asyncio.sleep(0.2)
    assert route == expected, route


def test_a_restarted_name_server_routes_the_group_before_the_brokers_period(
    tmp_path: Path,
) -> None:
    """The issue-37 full run's five long `local` windows (docs/reliability.md "A restarted
    name server without the master"): a name server restarted with its controller must
    route the group, master included, long before the brokers' next periodic registration."""
    with local_runtime(
        tmp_path / "local", ("broker.registerNameServerPeriodMs=100000",)
    ) as runtime:
        up = runtime.up(brokers=3)
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"
        status = wait_for(
            "three brokers in the SyncStateSet and the forwarder on the master",
            lambda: (
                (
                    (s := runtime.status())["master"] is not None
                    and len(s["syncStateSet"]) == 3
                    and s["controllerLeader"] is not None
                    and forwarding_to(s, None)
                )
                or None
            ),
            60,
            runtime,
        )
        asyncio.run(restarted_name_server(runtime, status))
