"""The mutable state of a `MessageStore` that its mixins (`StoreWrites`,
`StoreReads`, `StoreTruncation`) reassign, declared once."""

from __future__ import annotations


class StoreState:
    """What the store's mixins reassign (first values in `MessageStore.__init__`)."""

    _last_record_end: int
    _pending: bytes  # bytes [last_record_end, max_offset): a record still arriving
    _flushed: int
    _saved_checkpoint: tuple[int, int]
    _fatal_error: str | None
