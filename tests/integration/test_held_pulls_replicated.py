"""Held pulls on a replicated group (store/arrivals.py; DESIGN.md §3.3): a suspended
PULL_MESSAGE is answered when its record becomes readable, i.e. when confirmOffset covers
it, on the master (the SyncStateSet's acks move it) and on a slave (the master's
confirmOffset in the HA stream moves it), with no timer behind it: a lost wake-up would
answer only at the 30 s suspend timeout (and deliver then: the client gives up first).

Three real brokers (BrokerGroupHarness, block 44), signed requests with the group's client
pair on each broker's remoting port (client port + 3).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import RemotingClient
from tests.integration.broker_harness import CLIENT_PORT, BrokerGroupHarness

BLOCK = 44
TOPIC = "HeldTopic"


def pull(offset: int, suspend_ms: int) -> RemotingCommand:
    return request(RequestCode.PULL_MESSAGE, 0, {
        "consumerGroup": "g", "topic": TOPIC, "queueId": "0", "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": "2" if suspend_ms else "0", "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
    })  # fmt: skip


def send() -> RemotingCommand:
    fields = {
        "a": "pg", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
        "g": "1700000000000", "h": "0", "i": "", "j": "0", "k": "false", "m": "false",
        "n": "broker-a",
    }  # fmt: skip
    return request(RequestCode.SEND_MESSAGE_V2, 0, fields, b"held")


async def readable(client: RemotingClient, offset: int) -> None:
    """Wait until `offset` is readable on this broker (a slave serves it once the
    master's confirmOffset arrived): liveness, bounded."""
    for _ in range(300):
        answer = await client.invoke(pull(offset, 0), 10.0)
        if answer.code == ResponseCode.SUCCESS:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"offset {offset} never became readable: {answer}")


async def test_held_pulls_on_master_and_slave_are_answered_by_the_confirmed_send(
    tmp_path: Path,
) -> None:
    settings = {"autoCreateTopicEnable": "true"}
    with BrokerGroupHarness(
        tmp_path, block=BLOCK, replicas=3, settings=settings, client_auth=True
    ) as group:
        group.start_all()
        master = await asyncio.to_thread(group.wait_for_master)
        await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        slave = min(s for s in group.brokers if s != master)
        credentials = group.client_pair

        def remoting(slot: int) -> str:
            return f"{group.brokers[slot].host}:{CLIENT_PORT + 3}"

        producer = await RemotingClient.connect(remoting(master), credentials=credentials)
        on_master = await RemotingClient.connect(remoting(master), credentials=credentials)
        on_slave = await RemotingClient.connect(remoting(slave), credentials=credentials)
        try:
            for _ in range(100):  # the lease and the topic's creation: retry until SEND_OK
                first = await producer.invoke(send(), 10.0)
                if first.code == ResponseCode.SUCCESS:
                    break
                await asyncio.sleep(0.2)
            assert first.code == ResponseCode.SUCCESS, first
            await readable(on_slave, 0)
            # Held for up to 30 s; the client waits 20 s (a liveness bound, not a timing
            # assertion): answered only at its suspend timeout, a pull would re-read and
            # deliver all the same, so only the wake-up can answer it within the bound.
            held = [
                asyncio.ensure_future(client.invoke(pull(1, 30_000), 20.0))
                for client in (on_master, on_slave)
            ]
            await asyncio.sleep(0.5)  # both pulls reach their broker and hold
            assert not any(p.done() for p in held), [p.result() for p in held if p.done()]
            second = await producer.invoke(send(), 10.0)
            assert second.code == ResponseCode.SUCCESS, second
            answers = await asyncio.gather(*held)
            for where, answer in zip(("master", "slave"), answers, strict=True):
                assert answer.code == ResponseCode.SUCCESS, (where, answer)
                assert answer.fields()["nextBeginOffset"] == "2", (where, answer.fields())
        finally:
            for client in (producer, on_master, on_slave):
                await client.close()
