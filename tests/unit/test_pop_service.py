"""The POP shell (pop/service.py) over a real store, its CK/ACK records appended by a
produce path that writes them to that store (no broker, no sleeps; the wall clock is a
fake):

- popped messages are invisible, an ack removes them, the consumer offset is the lowest
  un-acked offset;
- an unacked message past its invisible time is revived to %RETRY%<group>_<topic> with
  reconsumeTimes raised and is popped from there; an acked one is not revived;
- a changed invisible time moves the revive and makes the old receipt stale;
- FIFO: a queue hands out its next message only after the previous one is acked, and an
  unacked one comes back in place with its delivery count raised;
- the group's in-flight bound is a clear refusal;
- a new master (a new service over the same log and offsets) redelivers exactly what was
  not acked.

On the old code (b0939bf) brokergroup_broker.pop does not exist (POP_MESSAGE was
REQUEST_CODE_NOT_SUPPORTED): every test fails at the import.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from brokergroup_broker.pop.service import PopError, PopErrorKind, PopService
from brokergroup_broker.protocol.messages import Response, SendBatch, SendRunResult
from brokergroup_broker.store import MessageStore
from tests.unit.conftest import Clock

HOST = ("127.0.0.1", 10911)
TOPIC, GROUP, RETRY = "Orders", "pg", "%RETRY%pg_Orders"


class StoreProduce:
    """Appends every batch to the store and acknowledges it at once."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.topics: list[str] = []

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None:
        run = self.store.put_run(
            batch.topic, batch.queue_id or 0, batch.bodies, batch.store_properties(),
            store_host=HOST, born_host=HOST, now_ms=1, reconsume_times=batch.reconsume_times,
        )  # fmt: skip
        self.topics.append(batch.topic)
        reply(SendRunResult(batch.queue_id or 0, run.first_queue_offset, run.physical_offsets))


def _send(store: MessageStore, *keys: str, queue: int = 0) -> None:
    for key in keys:
        store.put_run(TOPIC, queue, [key.encode()], [{"UNIQ_KEY": key}], store_host=HOST,
                      born_host=HOST, now_ms=1)  # fmt: skip


def _service(
    store: MessageStore, clock: Clock[int], term: list[int | None], **kw: int
) -> PopService:
    service = PopService(
        store=store, produce=StoreProduce(store), cluster_name="C", broker_name="broker-a",
        master_term=lambda: term[0], confirm_offset=lambda: store.max_offset, wall_ms=clock,
        **kw,
    )  # fmt: skip
    service.step()
    return service


async def _pop(service: PopService, n: int, *, fifo: bool = False) -> list[tuple[str, str, int]]:
    """(body, receipt handle, reconsumeTimes) of each popped message, in order."""
    got = await service.pop(GROUP, TOPIC, None, n, 10_000, 0, fifo=fifo)
    return [(p.message.body.decode(), p.receipt_handle, p.message.reconsume_times)
            for p in got.messages]  # fmt: skip


async def test_popped_messages_are_invisible_until_acked_and_the_offset_follows_acks(
    store: MessageStore,
) -> None:
    _send(store, "a", "b", "c", "d", "e")
    clock = Clock(1_000_000)
    service = _service(store, clock, [1])
    first = await _pop(service, 3)
    assert [b for b, _, _ in first] == ["a", "b", "c"]
    second = await _pop(service, 3)
    assert [b for b, _, _ in second] == ["d", "e"]  # a, b, c are invisible
    assert await _pop(service, 3) == []
    await service.ack(GROUP, TOPIC, first[1][1])  # b
    service.step()
    assert store.consumer_offsets.get(GROUP, TOPIC, 0) == 0  # a is not acked
    await service.ack(GROUP, TOPIC, first[0][1])
    await service.ack(GROUP, TOPIC, first[0][1])  # twice: a no-op
    service.step()
    assert store.consumer_offsets.get(GROUP, TOPIC, 0) == 2  # c is the lowest un-acked


async def test_an_unacked_message_is_revived_to_the_retry_topic_and_an_acked_one_is_not(
    store: MessageStore,
) -> None:
    _send(store, "a", "b")
    clock = Clock(1_000_000)
    service = _service(store, clock, [1])
    popped = await _pop(service, 2)
    await service.ack(GROUP, TOPIC, popped[1][1])  # b acked
    clock.advance(9_999)
    service.step()
    assert store.queue_offset_range(RETRY, 0) == (0, 0)  # not yet invisible-time
    clock.advance(1)
    service.step()
    revived = store.get_messages(RETRY, 0, 0, 10, store.max_offset)
    assert [(m.body, m.reconsume_times) for m in revived] == [(b"a", 1)]
    assert revived[0].properties["1ST_POP_TIME"] == "1000000"
    await service.ack(GROUP, TOPIC, popped[0][1])  # revived already: done, a no-op
    again = await _pop(service, 2)
    assert [(b, r) for b, _, r in again] == [("a", 1)]
    assert again[0][1].split(" ")[4] == "1"  # the receipt's topic mark: the retry topic
    await service.ack(GROUP, TOPIC, again[0][1])
    clock.advance(60_000)
    service.step()
    assert len(store.get_messages(RETRY, 0, 0, 10, store.max_offset)) == 1
    service.step()
    assert store.consumer_offsets.get(GROUP, TOPIC, 0) == 2
    assert store.consumer_offsets.get(GROUP, RETRY, 0) == 1


async def test_a_changed_invisible_time_moves_the_revive_and_retires_the_old_receipt(
    store: MessageStore,
) -> None:
    _send(store, "a")
    clock = Clock(1_000_000)
    service = _service(store, clock, [1])
    [(_, handle, _)] = await _pop(service, 1)
    clock.advance(5_000)
    new = await service.change_invisible(GROUP, TOPIC, handle, 30_000)
    assert new != handle
    with pytest.raises(PopError) as stale:
        await service.ack(GROUP, TOPIC, handle)
    assert stale.value.kind is PopErrorKind.RECEIPT_EXPIRED
    clock.advance(10_000)  # past the first invisible time, not the new one
    service.step()
    assert store.queue_offset_range(RETRY, 0) == (0, 0)
    clock.advance(25_000)
    service.step()
    assert [m.body for m in store.get_messages(RETRY, 0, 0, 10, store.max_offset)] == [b"a"]


async def test_fifo_hands_out_the_next_message_only_after_the_previous_is_acked(
    store: MessageStore,
) -> None:
    _send(store, "a", "b", "c")
    clock = Clock(1_000_000)
    service = _service(store, clock, [1])
    [(body, _, _)] = await _pop(service, 1, fifo=True)
    assert body == "a"
    assert await _pop(service, 3, fifo=True) == []  # the queue is locked
    clock.advance(10_000)  # "a" unacked past its invisible time: again, in place
    again = await service.pop(GROUP, TOPIC, None, 3, 10_000, 0, fifo=True)
    assert [(p.message.body, p.attempts) for p in again.messages] == [(b"a", 1)]
    assert store.queue_offset_range(RETRY, 0) == (0, 0)  # FIFO is never revived
    await service.ack(GROUP, TOPIC, again.messages[0].receipt_handle)
    assert [b for b, _, _ in await _pop(service, 3, fifo=True)] == ["b", "c"]


async def test_the_in_flight_bound_of_a_group_is_a_clear_refusal(store: MessageStore) -> None:
    _send(store, "a", "b", "c")
    clock = Clock(1_000_000)
    service = _service(store, clock, [1], max_in_flight_per_group=2)
    assert [b for b, _, _ in await _pop(service, 3)] == ["a", "b"]
    with pytest.raises(PopError) as full:
        await _pop(service, 1)
    assert full.value.kind is PopErrorKind.IN_FLIGHT_FULL
    assert "popMaxInFlightPerGroup 2" in full.value.message


async def test_a_new_master_redelivers_exactly_what_was_not_acked(store: MessageStore) -> None:
    _send(store, "a", "b", "c", "d")
    clock = Clock(1_000_000)
    old = _service(store, clock, [1])
    popped = await _pop(old, 3)
    await old.ack(GROUP, TOPIC, popped[1][1])  # b acked; a, c in flight; d never popped
    old.step()
    term: list[int | None] = [2]
    new = _service(store, clock, term)  # the log and offsets a new master holds
    with pytest.raises(PopError):
        await new.ack(GROUP, TOPIC, popped[1][1] + "x")  # not a receipt
    fresh = await _pop(new, 4)
    assert [b for b, _, _ in fresh] == ["d"]  # a, c still invisible
    await new.ack(GROUP, TOPIC, fresh[0][1])
    await new.ack(GROUP, TOPIC, popped[2][1])  # c, acked on the new master
    clock.advance(10_000)
    new.step()
    revived = store.get_messages(RETRY, 0, 0, 10, store.max_offset)
    assert [m.body for m in revived] == [b"a"]  # not b (acked before), not c (acked after)
