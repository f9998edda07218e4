"""Scheduled and timer messages: RocketMQ 5.3's names and send-time rules (pure).

A send that carries a delay level (property DELAY) or a timer property (TIMER_DELIVER_MS,
TIMER_DELAY_SEC, TIMER_DELAY_MS) is stored under a system topic instead of its own, with
its real topic and queue in REAL_TOPIC / REAL_QID (RocketMQ's HookUtils.handleScheduleMessage):

- a delay level L (1..messageDelayLevel's count; above it: the last) goes to
  SCHEDULE_TOPIC_XXXX queue L-1; it is due at its store timestamp + the level's delay
  (ScheduleMessageService.computeDeliverTimestamp);
- a timer goes to rmq_sys_wheel_timer queue 0 with TIMER_OUT_MS = its deliver time
  (TimerMessageStore.TIMER_TOPIC). RocketMQ rounds TIMER_OUT_MS down to timerPrecisionMs,
  which can deliver a timer up to timerPrecisionMs early; we keep the exact time, so none
  is early. A deliver time not in the future is an ordinary send (as in RocketMQ); one
  beyond timerMaxDelaySec is refused MESSAGE_ILLEGAL with RocketMQ's remark.

A delay level wins over timer properties (they are dropped, as RocketMQ does). A message
that already has TIMER_OUT_MS is not a timer again. Clients may not send to the two
system topics themselves (NO_PERMISSION, TopicValidator.isNotAllowedSendTopic).

At delivery (`redelivery`) the message goes back to REAL_TOPIC / REAL_QID with its body,
flag, sysFlag, born time and host and reconsume times: a delay-level message without DELAY
and TIMER_DELIVER_MS / TIMER_DELAY_SEC (ScheduleMessageService.messageTimeUp), a timer
with TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS and without REAL_TOPIC / REAL_QID
(TimerMessageStore.convert).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from brokergroup_remoting import ResponseCode
from brokergroup_remoting.fields import RequestRefused

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
"""TopicValidator.RMQ_SYS_SCHEDULE_TOPIC: delay-level messages, queue = level - 1."""
TIMER_TOPIC = "rmq_sys_wheel_timer"
"""TimerMessageStore.TIMER_TOPIC: timer messages, queue 0."""
TIMER_QUEUE = 0

PROPERTY_DELAY = "DELAY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
TIMER_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: Levels RocketMQ can address: SCHEDULE_TOPIC_XXXX's queues (a queue id is < 2^31, but
#: every level is a queue the delivery service watches, so keep the table small).
MAX_DELAY_LEVELS = 64


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """messageDelayLevel ("1s 5s … 2h", units s/m/h/d) → each level's delay in ms; raises
    ValueError naming the bad item (RocketMQ's parseDelayLevel, which logs and goes on)."""
    items = text.split(" ")
    if not text or len(items) > MAX_DELAY_LEVELS:
        raise ValueError(
            f"messageDelayLevel must hold 1..{MAX_DELAY_LEVELS} space-separated delays "
            f"such as '1s 5s 10m 2h', got {text!r}"
        )
    delays = []
    for item in items:
        unit = _UNIT_MS.get(item[-1:])
        number = item[:-1]
        if unit is None or not number.isdigit() or int(number) <= 0:
            raise ValueError(
                f"messageDelayLevel item {item!r} is not a positive number followed by "
                "s, m, h or d (one space between items)"
            )
        delays.append(int(number) * unit)
    return tuple(delays)


@dataclass(frozen=True)
class ScheduleRules:
    """The broker settings scheduled messages follow (core/config.py)."""

    delay_levels_ms: tuple[int, ...] = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)
    timer_max_delay_ms: int = 3 * 86_400_000
    timer_max_pending: int = 1_000_000

    @property
    def max_level(self) -> int:
        return len(self.delay_levels_ms)

    def level_delay_ms(self, level: int) -> int:
        """computeDeliverTimestamp: an unknown level waits 1 s."""
        if 1 <= level <= self.max_level:
            return self.delay_levels_ms[level - 1]
        return 1000


@dataclass(frozen=True)
class Redirect:
    """Where a send is stored instead: the system topic and queue, with its properties."""

    topic: str
    queue_id: int
    properties: dict[str, str]
    timer: bool


def is_scheduled(properties: Mapping[str, str]) -> bool:
    """Does a send ask to be delayed (before the rules decide how)?"""
    return any(properties.get(p) not in (None, "") for p in (PROPERTY_DELAY, *TIMER_PROPERTIES))


def refuse_system_topic(topic: str) -> None:
    if topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        raise RequestRefused(
            ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
        )


def redirect_send(
    topic: str,
    queue_id: int | None,
    properties: Mapping[str, str],
    now_ms: int,
    rules: ScheduleRules,
) -> Redirect | None:
    """HookUtils.handleScheduleMessage for a non-transactional send: the system topic and
    queue it is stored in, or None (an ordinary send). Raises RequestRefused
    (MESSAGE_ILLEGAL) for a bad delay level or timer."""
    refuse_system_topic(topic)
    props = dict(properties)
    level = _delay_level(props)
    if level > 0:
        for name in TIMER_PROPERTIES:
            props.pop(name, None)
        level = min(level, rules.max_level)
        props[PROPERTY_DELAY] = str(level)
        return Redirect(SCHEDULE_TOPIC, level - 1, _with_real(props, topic, queue_id), False)
    if PROPERTY_TIMER_OUT_MS in props or not any(p in props for p in TIMER_PROPERTIES):
        return None
    deliver_ms = _deliver_ms(props, now_ms, rules)
    if deliver_ms <= now_ms:
        return None  # due already: an ordinary send, as in RocketMQ
    props[PROPERTY_TIMER_OUT_MS] = str(deliver_ms)
    return Redirect(TIMER_TOPIC, TIMER_QUEUE, _with_real(props, topic, queue_id), True)


def delay_level_for_send_back(requested: int, reconsume_times: int, rules: ScheduleRules) -> int:
    """CONSUMER_SEND_MSG_BACK's level: the client's, or 3 + reconsumeTimes when it asks 0;
    clamped to the last level (transformDelayLevelMessage)."""
    level = requested if requested > 0 else 3 + reconsume_times
    return min(level, rules.max_level)


def due_ms(
    topic: str, queue_id: int, store_timestamp_ms: int, properties: Mapping[str, str],
    rules: ScheduleRules,
) -> int | None:  # fmt: skip
    """When a stored scheduled message is due (None: not a readable scheduled message)."""
    if topic == SCHEDULE_TOPIC:
        return store_timestamp_ms + rules.level_delay_ms(queue_id + 1)
    try:
        return int(properties[PROPERTY_TIMER_OUT_MS])
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class Redelivery:
    """What a due message is put as: its real topic and queue (None: the produce path
    picks one) and its properties."""

    topic: str
    queue_id: int | None
    properties: dict[str, str]


def redelivery(
    topic: str, properties: Mapping[str, str], store_timestamp_ms: int, now_ms: int
) -> Redelivery | None:
    """messageTimeUp / TimerMessageStore.convert: the message as its real topic gets it
    (None: no REAL_TOPIC, nothing to deliver to)."""
    props = dict(properties)
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    if not real_topic:
        return None
    try:
        real_qid: int | None = int(props.get(PROPERTY_REAL_QID, "-1"))
    except ValueError:
        real_qid = None
    if real_qid is not None and real_qid < 0:
        real_qid = None
    if topic == TIMER_TOPIC:
        props[PROPERTY_TIMER_ENQUEUE_MS] = str(store_timestamp_ms)
        props[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
        props.pop(PROPERTY_REAL_TOPIC, None)
        props.pop(PROPERTY_REAL_QID, None)
    else:
        for name in (PROPERTY_DELAY, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC):
            props.pop(name, None)
    return Redelivery(real_topic, real_qid, props)


def _with_real(props: dict[str, str], topic: str, queue_id: int | None) -> dict[str, str]:
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QID] = str(-1 if queue_id is None else queue_id)
    return props


def _delay_level(props: Mapping[str, str]) -> int:
    raw = props.get(PROPERTY_DELAY)
    if raw in (None, ""):
        return 0
    try:
        return int(raw)
    except ValueError:
        raise RequestRefused(
            ResponseCode.MESSAGE_ILLEGAL, f"delay level (property DELAY) {raw!r} is not a number"
        ) from None


def _deliver_ms(props: Mapping[str, str], now_ms: int, rules: ScheduleRules) -> int:
    """transformTimerMessage's deliver time; MESSAGE_ILLEGAL when unreadable or too far."""
    try:
        if PROPERTY_TIMER_DELAY_SEC in props:
            deliver = now_ms + int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000
        elif PROPERTY_TIMER_DELAY_MS in props:
            deliver = now_ms + int(props[PROPERTY_TIMER_DELAY_MS])
        else:
            deliver = int(props[PROPERTY_TIMER_DELIVER_MS])
    except ValueError:
        raise RequestRefused(
            ResponseCode.MESSAGE_ILLEGAL,
            "timer message illegal: TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS "
            "must be a number",
        ) from None
    if deliver - now_ms > rules.timer_max_delay_ms:
        # SendMessageProcessor's WHEEL_TIMER_MSG_ILLEGAL remark.
        raise RequestRefused(
            ResponseCode.MESSAGE_ILLEGAL,
            "timer message illegal, the delay time should not be bigger than the max delay "
            f"{rules.timer_max_delay_ms}ms; or if set del msg, the delay time should be "
            "bigger than the current time",
        )
    return deliver
