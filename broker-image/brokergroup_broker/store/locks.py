"""The store's two locks, made once and handed to the components that need them.

`write` guards the log's tail (appends, dispatch into consume queues, reads of the
tail); `flush` serialises fdatasync and truncation, so a batch can be written while
the previous one is being synced. Lock order is always `flush` then `write`.
Truncation takes both, so no fd is closed while being synced; a FileRange's fd
stays valid until its segment is truncated away.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StoreLocks:
    write: threading.Lock = field(default_factory=threading.Lock)
    flush: threading.Lock = field(default_factory=threading.Lock)
