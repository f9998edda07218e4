"""Loopback address allocation for brokers (pure).

A restarted broker comes back on a *new* address, like a rescheduled pod
gets a new pod IP (DESIGN.md §4): the controller must learn the new address
from the broker's registration, and clients must follow it. Rules:

- addresses come from one contiguous range (127.0.0.10 upward by default);
- the next allocation starts right after the previous one (a cursor), so a
  restart never lands on the address it just left while others are free;
- an address still recorded for a live process is never handed out (the
  supervisor also passes the restarting broker's own old address, so a
  restart always moves, even after a wrap-around);
- after the end of the range it wraps to the start.

No I/O: the caller says which addresses are in use.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from ipaddress import IPv4Address


class AddressPoolExhausted(RuntimeError):
    """Every address of the range belongs to a live process."""


@dataclass(frozen=True)
class AddressPool:
    first: IPv4Address
    last: IPv4Address

    def __post_init__(self) -> None:
        assert self.first <= self.last, (self.first, self.last)

    @classmethod
    def of(cls, first: str, last: str) -> AddressPool:
        return cls(IPv4Address(first), IPv4Address(last))

    @property
    def size(self) -> int:
        return int(self.last) - int(self.first) + 1

    def host(self, index: int) -> str:
        assert 0 <= index < self.size, index
        return str(IPv4Address(int(self.first) + index))

    def index_of(self, host: str) -> int | None:
        try:
            value = int(IPv4Address(host))
        except ValueError:
            return None
        index = value - int(self.first)
        return index if 0 <= index < self.size else None


@dataclass(frozen=True)
class Allocation:
    host: str
    cursor: int
    """Index of `host` in the pool; pass it back as the next call's cursor."""


def allocate_host(pool: AddressPool, cursor: int | None, in_use: Collection[str]) -> Allocation:
    """The first address after `cursor` (wrapping) not in `in_use`.

    `cursor` is the index of the last address handed out, None before the
    first allocation (then the range's first address is tried first).
    """
    start = 0 if cursor is None else (cursor + 1) % pool.size
    busy = set(in_use)
    for step in range(pool.size):
        index = (start + step) % pool.size
        host = pool.host(index)
        if host not in busy:
            return Allocation(host=host, cursor=index)
    raise AddressPoolExhausted(
        f"all {pool.size} addresses {pool.first}-{pool.last} belong to live processes"
    )
