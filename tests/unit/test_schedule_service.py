"""The delivery shell (schedule/service.py) over a real store, with a produce path that
refuses, answers late or writes (no broker, no sleeps; the wall clock is a fake):

- a re-put the produce path refuses at once (SYSTEM_BUSY) or the commit rule refuses after
  the append is retried, and the message is delivered; nothing is counted delivered before
  its acknowledgement;
- a REAL_QID the topic does not have goes to a queue the produce path picks;
- losing the master role stops delivery; a new term starts from the progress the consumer
  offsets hold (what a new master merged from its peers) and delivers only the rest.

On the old code (08e4c59) the module does not exist (a delayed send was refused).
"""

from __future__ import annotations

from collections.abc import Callable

from brokergroup_broker.protocol.messages import (
    BrokerError,
    ErrorResponse,
    Response,
    ResponseCode,
    SendBatch,
    SendRunResult,
)
from brokergroup_broker.schedule.rules import ScheduleRules
from brokergroup_broker.schedule.service import GROUP_LOW, ScheduleService
from brokergroup_broker.store import MessageStore
from tests.unit.conftest import Clock

HOST = ("127.0.0.1", 10911)
TIMER = "rmq_sys_wheel_timer"


class Produce:
    """Records re-puts; `refuse` raises before the append, `nack` answers a refusal after
    it, `hold` keeps the answer until `answer_all`."""

    def __init__(self) -> None:
        self.refuse: list[ResponseCode] = []
        self.nack = 0
        self.hold = False
        self.batches: list[SendBatch] = []
        self.waiting: list[Callable[[Response], None]] = []

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None:
        if self.refuse:
            raise BrokerError(self.refuse.pop(0), "refused")
        self.batches.append(batch)
        if self.nack:
            self.nack -= 1
            reply(ErrorResponse(0, ResponseCode.SLAVE_TIMEOUT, "no ack"))
        elif self.hold:
            self.waiting.append(reply)
        else:
            reply(SendRunResult(batch.queue_id or 0, 0, [0]))

    def answer_all(self) -> None:
        for reply in self.waiting:
            reply(SendRunResult(0, 0, [0]))
        self.waiting = []

    def keys(self) -> list[str]:
        assert all(b.extras for b in self.batches)
        return [b.extras[0][2]["UNIQ_KEY"] for b in self.batches if b.extras and b.extras[0]]


def _timer(store: MessageStore, key: str, due: int, real_qid: str = "1") -> None:
    props = {
        "UNIQ_KEY": key,
        "TIMER_OUT_MS": str(due),
        "REAL_TOPIC": "Orders",
        "REAL_QID": real_qid,
    }
    store.put_run(
        TIMER, 0, [key.encode()], [props], store_host=HOST, born_host=HOST, now_ms=due - 5000
    )


def _service(
    store: MessageStore, produce: Produce, clock: Clock[int], term: list[int | None]
) -> ScheduleService:
    return ScheduleService(
        store=store, produce=produce, rules=ScheduleRules(), master_term=lambda: term[0],
        confirm_offset=lambda: store.max_offset, wall_ms=clock,
    )  # fmt: skip


def test_refused_re_puts_are_retried_and_counted_only_once_acknowledged(
    store: MessageStore,
) -> None:
    for i, key in enumerate(["a", "b", "c"]):
        _timer(store, key, 10_000 + i)
    produce, clock = Produce(), Clock(10_002)
    service = _service(store, produce, clock, [1])
    produce.refuse = [ResponseCode.SYSTEM_BUSY]
    service.step()
    assert produce.keys() == [] and service.counts.retried == 1
    clock.advance(100)  # within the pause: nothing
    service.step()
    assert produce.keys() == []
    clock.advance(200)
    produce.nack, produce.hold = 1, True
    service.step()
    assert produce.keys() == ["a", "b", "c"]  # "a" refused after its append, b, c held
    assert service.counts.delivered == 0
    assert store.consumer_offsets.get(GROUP_LOW, TIMER, 0) in (None, 0)
    produce.answer_all()
    clock.advance(300)
    produce.hold = False
    service.step()
    assert produce.keys() == ["a", "b", "c", "a"] and service.counts.delivered == 3
    assert store.consumer_offsets.get(GROUP_LOW, TIMER, 0) == 3


def test_a_real_queue_the_topic_lacks_goes_to_any_queue(store: MessageStore) -> None:
    _timer(store, "q", 5_000, real_qid="9")
    produce, clock = Produce(), Clock(5_000)
    produce.refuse = [ResponseCode.BAD_REQUEST]
    service = _service(store, produce, clock, [1])
    service.step()
    assert [(b.topic, b.queue_id) for b in produce.batches] == [("Orders", None)]


def test_a_new_term_starts_from_the_saved_progress(store: MessageStore) -> None:
    for i, key in enumerate(["a", "b", "c", "d"]):
        _timer(store, key, [1_000, 3_000, 2_000, 9_000][i])
    produce, clock = Produce(), Clock(2_500)
    term: list[int | None] = [1]
    service = _service(store, produce, clock, term)
    service.step()
    assert produce.keys() == ["a", "c"]
    term[0] = None  # no longer the master: nothing is delivered
    clock.now = 10_000
    service.step()
    assert produce.keys() == ["a", "c"]
    term[0] = 2  # master again (a new term): from the consumer offsets' progress
    service.step()
    assert produce.keys() == ["a", "c", "b", "d"]
    # Another broker, its store holding the same offsets (merged from its peers) and log.
    fresh = _service(store, Produce(), clock, [3])
    fresh.step()
    assert fresh.counts.delivered == 0
