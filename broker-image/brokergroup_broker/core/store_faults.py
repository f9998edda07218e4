"""What the broker tells the controller, its probes and its clients about its store
(DESIGN.md §3.4a-b): the store's own answer, made sticky by a fault the broker
saw itself (a role transition the store could not take, a failed flush). The one
owner of that last fault."""

from __future__ import annotations

import logging

from brokergroup_broker.store import MessageStore
from brokergroup_broker.store.errors import StoreError

log = logging.getLogger(__name__)


class StoreFaults:
    def __init__(self) -> None:
        self._last_error: str | None = None

    def record(self, exc: BaseException) -> None:
        self._last_error = f"{type(exc).__name__}: {exc}"

    def health(self, store: MessageStore) -> tuple[bool, str | None]:
        try:
            writable, reason = store.writable()
        except StoreError as exc:
            writable, reason = False, str(exc)
        if writable and self._last_error is not None:
            writable, reason = False, self._last_error
        return writable, reason
