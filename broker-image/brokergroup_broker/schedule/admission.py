"""What the send codes ask before storing a scheduled message: where it goes (the rules,
at the broker's wall clock) and whether another timer fits (timerMaxPending)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from brokergroup_broker.schedule.rules import Redirect, ScheduleRules, redirect_send
from brokergroup_remoting import ResponseCode
from brokergroup_remoting.fields import RequestRefused


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class ScheduledSends:
    def __init__(
        self,
        rules: ScheduleRules,
        *,
        timers_pending: Callable[[], int],
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.rules = rules
        self._timers_pending = timers_pending
        self._wall_ms = wall_ms

    def redirect(
        self, topic: str, queue_id: int | None, properties: Mapping[str, str]
    ) -> Redirect | None:
        """The system topic and queue a send is stored in (None: as it is); raises
        RequestRefused: MESSAGE_ILLEGAL for a bad delay or timer, NO_PERMISSION for a send
        to a system topic, SYSTEM_ERROR (RocketMQ's WHEEL_TIMER_FLOW_CONTROL code) when
        timerMaxPending timers wait already."""
        plan = redirect_send(topic, queue_id, properties, self._wall_ms(), self.rules)
        if plan is not None and plan.timer:
            pending = self._timers_pending()
            if pending >= self.rules.timer_max_pending:
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR,
                    f"timer message is under flow control: {pending} timer messages wait on "
                    f"this broker, timerMaxPending is {self.rules.timer_max_pending}",
                )
        return plan
