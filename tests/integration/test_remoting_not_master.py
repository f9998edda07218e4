"""A RocketMQ client connection never stays pinned to a broker that is not the master (issue
19 item 5), with real brokers of `brokergroup local up` and raw remoting sockets.

1. A SEND_MESSAGE_V2 on a slave's remoting port is answered SERVICE_NOT_AVAILABLE (what a
   stock 5.3 broker answers a send on a slave: "messages are put to the slave"), then the
   broker closes the connection, so a client that reached it through a stable address
   reconnects and lands on the current master.
2. A client connected to the master directly, and one through the stable master address
   (`local status --json` `masterAddress`), both send SEND_OK; after an admin switchover
   (electMaster to a slave) the deposed master closes its client connections and the
   forwarder cuts its own, and a new connection to the stable address reaches the new master.
Waits are bounded (liveness); no timing is asserted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_controller.client import ControllerClient
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.integration.local_harness import (
    CONTROLLER_API_ADDRESSES,
    Runtime,
    local_runtime,
    wait_for,
)

pytestmark = pytest.mark.integration

REMOTING_PORT = 20911 + 3
BOUND_S = 30.0
TOPIC = "NotMasterTopic"


def send_fields(topic: str) -> dict[str, str]:
    """SendMessageRequestHeaderV2 as the stock client sends it (single-letter names)."""
    return {
        "a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "-1", "f": "0",
        "g": "1700000000000", "h": "0", "i": "UNIQ_KEY\x01NM\x02", "j": "0",
        "k": "false", "m": "false", "n": "broker-a",
    }  # fmt: skip


async def send(client: RemotingClient, body: bytes) -> RemotingCommand:
    return await client.invoke(
        request(RequestCode.SEND_MESSAGE_V2, 0, send_fields(TOPIC), body), timeout_s=10
    )


async def closed(client: RemotingClient) -> bool:
    await asyncio.wait_for(client.connection.wait_closed(), BOUND_S)
    return True


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    with local_runtime(tmp_path / "local") as rt:
        yield rt


def healthy(runtime: Runtime, *, not_master: int | None = None) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        s = runtime.status()
        master = s.get("master")
        if master is None or len(s.get("syncStateSet", [])) < 3 or s.get("masterTarget") is None:
            return None
        if not_master is not None and master["brokerId"] == not_master:
            return None
        return s

    return wait_for("a master with three in sync", check, 90, runtime)


async def scenario(runtime: Runtime, status: dict[str, Any]) -> None:
    credentials = Credentials(status["accessKey"], status["secretKey"])
    remoting = {
        b["brokerId"]: f"{b['address'].rsplit(':', 1)[0]}:{REMOTING_PORT}"
        for b in status["brokers"]
    }
    master_id = status["master"]["brokerId"]
    slave_id = min(i for i in remoting if i != master_id)

    # 1. A send on a slave: RocketMQ's answer, then the connection is closed.
    on_slave = await RemotingClient.connect(remoting[slave_id], credentials=credentials)
    answer = await send(on_slave, b"to a slave")
    assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, answer
    assert await closed(on_slave)

    # 2. Direct and through the stable address: SEND_OK, and the connections stay open.
    direct = await RemotingClient.connect(remoting[master_id], credentials=credentials)
    stable = await RemotingClient.connect(status["masterAddress"], credentials=credentials)
    for client in (direct, stable, direct):
        answer = await send(client, b"to the master")
        assert answer.code == ResponseCode.SUCCESS, answer
    assert not direct.closed and not stable.closed

    token = (runtime.root / "token").read_text().strip()
    async with ControllerClient(CONTROLLER_API_ADDRESSES.split(","), token) as controller:
        info = await controller.elect_master(
            status["clusterName"], status["brokerName"], designated_broker_id=slave_id
        )
    assert info.master_broker_id == slave_id, info
    assert await closed(direct)  # the deposed master dropped its client connections
    assert await closed(stable)  # the forwarder cut the connection to the old master

    # A new connection to the same stable address reaches the new master (bounded retries:
    # the new master takes writes once its role is carried out).
    reached: RemotingCommand | None = None
    for _ in range(100):
        again = await RemotingClient.connect(status["masterAddress"], credentials=credentials)
        try:
            reached = await send(again, b"to the new master")
        except (ConnectionError, TimeoutError):
            continue
        finally:
            await again.close()
        if reached.code == ResponseCode.SUCCESS:
            break
        await asyncio.sleep(0.2)
    assert reached is not None and reached.code == ResponseCode.SUCCESS, reached


def test_a_connection_to_a_broker_that_is_not_the_master_is_closed(runtime: Runtime) -> None:
    up = runtime.up(brokers=3)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"
    status = healthy(runtime)
    asyncio.run(scenario(runtime, status))
    after = healthy(runtime, not_master=status["master"]["brokerId"])
    assert after["masterAddress"] == status["masterAddress"]
    assert after["masterTarget"] != status["masterTarget"]
