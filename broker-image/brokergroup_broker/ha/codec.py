"""Sans-I/O codec for the AutoSwitch HA protocol (DESIGN.md §3.2, seed controller-mode-design).

Theory of operation
-------------------
Bytes in, typed frames out; frame in, bytes out. Nothing here touches a socket
or a clock (h11 style): the master and slave services own the sockets and feed
whatever they read into a decoder, then pull frames with ``next_event()`` until
it answers ``NEED_DATA``.

There is one decoder per direction, because the two directions use different
layouts for the same state value:

* :class:`SlaveFrameDecoder` -- what the **master** reads from a slave:
  ``SlaveHandshake`` (state HANDSHAKE) and ``SlaveAck`` (state TRANSFER).
* :class:`MasterFrameDecoder` -- what the **slave** reads from its master:
  ``MasterHandshake`` (state HANDSHAKE) and ``Transfer`` (state TRANSFER).

Wire layouts (all big-endian, Java ``int``/``short``/``long``)::

    slave -> master  handshake  int state, short isSyncFromLastFile,
                                short isAsyncLearner, long slaveBrokerId     16 bytes
    slave -> master  ack        int state, long maxOffset                    12 bytes
    master -> slave  handshake  int state, int bodySize, long maxPhyOffset,
                                int lastEpoch                                20 bytes
                                + bodySize/12 x (int epoch, long startOffset)
    master -> slave  transfer   int state, int bodySize, long offset, int epoch,
                                long epochStartOffset, long confirmOffset    36 bytes
                                + bodySize bytes of commit log

The state values are the ordinals of RocketMQ's ``HAConnectionState``
(READY, HANDSHAKE, TRANSFER, SUSPEND, SHUTDOWN). RocketMQ's enum has no INIT
member, so HANDSHAKE is 1 and TRANSFER is 2 exactly as on a RocketMQ wire.

Invariants
----------
* A decoder never raises anything but :class:`HAProtocolError` for bad input,
  and once it has raised it stays broken (every later call raises the same
  error): a byte stream that lost framing cannot be resynchronised.
* No frame body may exceed ``max_body_bytes``; the check happens on the header,
  before the body is buffered, so a hostile length cannot make us allocate.
  The decoder's buffer therefore never holds more than one frame plus what the
  caller fed in one ``receive_data`` call; callers feed one bounded socket read
  at a time and drain the decoder before reading again.
* Decoded frames satisfy the protocol's value rules (offsets and epochs are
  non-negative, epoch entries ascend, a batch's epoch started at or before the
  batch's offset), so the services can rely on them without re-checking.
"""

from __future__ import annotations

import enum
import itertools
import struct
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "ACK_SIZE",
    "DEFAULT_MAX_BODY_BYTES",
    "EPOCH_ENTRY_SIZE",
    "MASTER_HANDSHAKE_HEADER_SIZE",
    "NEED_DATA",
    "SLAVE_HANDSHAKE_SIZE",
    "TRANSFER_HEADER_SIZE",
    "HAConnectionState",
    "HAProtocolError",
    "MasterFrame",
    "MasterFrameDecoder",
    "MasterHandshake",
    "NeedData",
    "SlaveAck",
    "SlaveFrame",
    "SlaveFrameDecoder",
    "SlaveHandshake",
    "Transfer",
    "WireEpochEntry",
    "encode_transfer_header",
]


class HAConnectionState(enum.IntEnum):
    """RocketMQ ``HAConnectionState``; the wire carries the ordinal."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


class HAProtocolError(Exception):
    """The peer broke the HA protocol (bad state, size, value or order).

    The only sane reaction is to close the connection; the slave then
    reconnects and redoes the handshake (and with it the truncation).
    """


class NeedData(enum.Enum):
    """Sentinel type: the decoder needs more bytes before it can return a frame."""

    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA

_INT: Final = struct.Struct(">i")
_SLAVE_HANDSHAKE: Final = struct.Struct(">ihhq")
_ACK: Final = struct.Struct(">iq")
_MASTER_HANDSHAKE: Final = struct.Struct(">iiqi")
_EPOCH_ENTRY: Final = struct.Struct(">iq")
_TRANSFER: Final = struct.Struct(">iiqiqq")

SLAVE_HANDSHAKE_SIZE: Final = _SLAVE_HANDSHAKE.size  # 16
ACK_SIZE: Final = _ACK.size  # 12
MASTER_HANDSHAKE_HEADER_SIZE: Final = _MASTER_HANDSHAKE.size  # 20
EPOCH_ENTRY_SIZE: Final = _EPOCH_ENTRY.size  # 12
TRANSFER_HEADER_SIZE: Final = _TRANSFER.size  # 36

#: Default bound on one frame's body: generous for transfer batches (the
#: master's default batch is far smaller) and for ~350k epoch entries.
DEFAULT_MAX_BODY_BYTES: Final = 4 * 1024 * 1024

_INT_MAX: Final = 2**31 - 1
_LONG_MAX: Final = 2**63 - 1


def _check_range(name: str, value: int, upper: int) -> None:
    # Encoding an out-of-range value is our bug, not the peer's: plain ValueError.
    if not 0 <= value <= upper:
        raise ValueError(f"{name}={value} is outside 0..{upper}")


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True, slots=True)
class WireEpochEntry:
    """One ``(epoch, startOffset)`` pair of the master's epoch file, as sent."""

    epoch: int
    start_offset: int

    def __post_init__(self) -> None:
        _check_range("epoch", self.epoch, _INT_MAX)
        _check_range("start_offset", self.start_offset, _LONG_MAX)


@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    """Slave -> master, first frame of a connection (state HANDSHAKE)."""

    slave_broker_id: int
    is_sync_from_last_file: bool = False
    is_async_learner: bool = False

    def __post_init__(self) -> None:
        _check_range("slave_broker_id", self.slave_broker_id, _LONG_MAX)

    def encode(self) -> bytes:
        return _SLAVE_HANDSHAKE.pack(
            HAConnectionState.HANDSHAKE,
            int(self.is_sync_from_last_file),
            int(self.is_async_learner),
            self.slave_broker_id,
        )


@dataclass(frozen=True, slots=True)
class SlaveAck:
    """Slave -> master (state TRANSFER): the slave's commit log now ends at ``max_offset``.

    The first ack after the handshake doubles as the transfer request: the
    master starts streaming at exactly this offset (see ``master.py``).
    """

    max_offset: int

    def __post_init__(self) -> None:
        _check_range("max_offset", self.max_offset, _LONG_MAX)

    def encode(self) -> bytes:
        return _ACK.pack(HAConnectionState.TRANSFER, self.max_offset)


@dataclass(frozen=True, slots=True)
class MasterHandshake:
    """Master -> slave (state HANDSHAKE): the master's epoch entries and log end."""

    max_phy_offset: int
    last_epoch: int
    epoch_entries: tuple[WireEpochEntry, ...]

    def __post_init__(self) -> None:
        _check_range("max_phy_offset", self.max_phy_offset, _LONG_MAX)
        _check_range("last_epoch", self.last_epoch, _INT_MAX)
        problem = _epoch_entries_problem(self.epoch_entries, self.last_epoch, self.max_phy_offset)
        if problem is not None:
            raise ValueError(problem)

    def encode(self) -> bytes:
        body_size = len(self.epoch_entries) * EPOCH_ENTRY_SIZE
        _check_range("handshake body size", body_size, _INT_MAX)
        parts = [
            _MASTER_HANDSHAKE.pack(
                HAConnectionState.HANDSHAKE, body_size, self.max_phy_offset, self.last_epoch
            )
        ]
        parts.extend(_EPOCH_ENTRY.pack(e.epoch, e.start_offset) for e in self.epoch_entries)
        return b"".join(parts)


@dataclass(frozen=True, slots=True)
class Transfer:
    """Master -> slave (state TRANSFER): ``body`` is the commit log from ``offset``.

    An empty body is a heartbeat: it carries the current confirmOffset and
    asks for an ack, which keeps both read timeouts from firing.
    All of ``body`` belongs to ``epoch``, which started at ``epoch_start_offset``.
    """

    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    body: bytes = b""

    def __post_init__(self) -> None:
        _check_range("offset", self.offset, _LONG_MAX)
        _check_range("epoch", self.epoch, _INT_MAX)
        _check_range("epoch_start_offset", self.epoch_start_offset, self.offset)
        _check_range("confirm_offset", self.confirm_offset, _LONG_MAX)
        _check_range("body size", len(self.body), _INT_MAX)

    @property
    def end_offset(self) -> int:
        return self.offset + len(self.body)

    def encode(self) -> bytes:
        header = encode_transfer_header(
            offset=self.offset,
            epoch=self.epoch,
            epoch_start_offset=self.epoch_start_offset,
            confirm_offset=self.confirm_offset,
            body_size=len(self.body),
        )
        return header + self.body


def encode_transfer_header(
    *, offset: int, epoch: int, epoch_start_offset: int, confirm_offset: int, body_size: int
) -> bytes:
    """The 36-byte transfer header alone: the master sends the body with sendfile."""
    _check_range("offset", offset, _LONG_MAX)
    _check_range("epoch", epoch, _INT_MAX)
    _check_range("epoch_start_offset", epoch_start_offset, offset)
    _check_range("confirm_offset", confirm_offset, _LONG_MAX)
    _check_range("body_size", body_size, _INT_MAX)
    return _TRANSFER.pack(
        HAConnectionState.TRANSFER, body_size, offset, epoch, epoch_start_offset, confirm_offset
    )


SlaveFrame = SlaveHandshake | SlaveAck
MasterFrame = MasterHandshake | Transfer


def _epoch_entries_problem(
    entries: tuple[WireEpochEntry, ...], last_epoch: int, max_phy_offset: int
) -> str | None:
    """Why an epoch entry list cannot be a master's epoch file, or None if it can."""
    for prev, cur in itertools.pairwise(entries):
        if cur.epoch <= prev.epoch:
            return f"epoch entries not ascending: epoch {cur.epoch} follows epoch {prev.epoch}"
        if cur.start_offset < prev.start_offset:
            return (
                f"epoch entries not ascending: epoch {cur.epoch} starts at {cur.start_offset}, "
                f"before epoch {prev.epoch} at {prev.start_offset}"
            )
    if entries:
        if entries[-1].epoch != last_epoch:
            return f"lastEpoch {last_epoch} differs from the last epoch entry {entries[-1].epoch}"
        if entries[-1].start_offset > max_phy_offset:
            return (
                f"last epoch {entries[-1].epoch} starts at {entries[-1].start_offset}, "
                f"beyond maxPhyOffset {max_phy_offset}"
            )
    return None


# --------------------------------------------------------------------------- decoders


class _Decoder:
    """Shared buffering: a bytearray plus a read position, compacted lazily."""

    def __init__(self, max_body_bytes: int) -> None:
        if max_body_bytes < 0:
            raise ValueError(f"max_body_bytes={max_body_bytes} must be >= 0")
        self._max_body_bytes = max_body_bytes
        self._buf = bytearray()
        self._pos = 0
        self._error: HAProtocolError | None = None

    @property
    def max_body_bytes(self) -> int:
        return self._max_body_bytes

    @property
    def trailing_data(self) -> bytes:
        """Bytes received but not yet consumed by a returned frame."""
        return bytes(self._buf[self._pos :])

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            raise self._error
        if self._pos and self._pos * 2 >= len(self._buf):
            # Compact once most of the buffer is consumed: amortised O(1) per byte.
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def _fail(self, message: str) -> HAProtocolError:
        self._error = HAProtocolError(message)
        return self._error

    def _available(self) -> int:
        return len(self._buf) - self._pos

    def _state(self) -> int | None:
        if self._available() < _INT.size:
            return None
        (state,) = _INT.unpack_from(self._buf, self._pos)
        return int(state)

    def _state_name(self, state: int) -> str:
        try:
            return HAConnectionState(state).name
        except ValueError:
            return f"unknown state {state}"

    def _check_body_size(self, what: str, body_size: int) -> None:
        if body_size < 0:
            raise self._fail(f"{what}: negative bodySize {body_size}")
        if body_size > self._max_body_bytes:
            raise self._fail(
                f"{what}: bodySize {body_size} exceeds the limit of {self._max_body_bytes} bytes"
            )


class SlaveFrameDecoder(_Decoder):
    """Decodes what a master receives: :class:`SlaveHandshake` and :class:`SlaveAck`."""

    def __init__(self, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        # Slave frames have no body; the bound is kept for a uniform interface.
        super().__init__(max_body_bytes)

    def next_event(self) -> SlaveFrame | Literal[NeedData.NEED_DATA]:
        if self._error is not None:
            raise self._error
        state = self._state()
        if state is None:
            return NEED_DATA
        if state == HAConnectionState.HANDSHAKE:
            if self._available() < SLAVE_HANDSHAKE_SIZE:
                return NEED_DATA
            _, sync_flag, learner_flag, broker_id = _SLAVE_HANDSHAKE.unpack_from(
                self._buf, self._pos
            )
            if sync_flag not in (0, 1):
                raise self._fail(f"slave handshake: isSyncFromLastFile={sync_flag}, not 0 or 1")
            if learner_flag not in (0, 1):
                raise self._fail(f"slave handshake: isAsyncLearner={learner_flag}, not 0 or 1")
            if broker_id < 0:
                raise self._fail(f"slave handshake: negative slaveBrokerId {broker_id}")
            self._pos += SLAVE_HANDSHAKE_SIZE
            return SlaveHandshake(
                slave_broker_id=broker_id,
                is_sync_from_last_file=bool(sync_flag),
                is_async_learner=bool(learner_flag),
            )
        if state == HAConnectionState.TRANSFER:
            if self._available() < ACK_SIZE:
                return NEED_DATA
            _, max_offset = _ACK.unpack_from(self._buf, self._pos)
            if max_offset < 0:
                raise self._fail(f"slave ack: negative maxOffset {max_offset}")
            self._pos += ACK_SIZE
            return SlaveAck(max_offset=max_offset)
        raise self._fail(
            f"slave frame with state {self._state_name(state)}; "
            "a slave sends only HANDSHAKE (handshake) or TRANSFER (ack)"
        )


class MasterFrameDecoder(_Decoder):
    """Decodes what a slave receives: :class:`MasterHandshake` and :class:`Transfer`."""

    def __init__(self, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        super().__init__(max_body_bytes)

    def next_event(self) -> MasterFrame | Literal[NeedData.NEED_DATA]:
        if self._error is not None:
            raise self._error
        state = self._state()
        if state is None:
            return NEED_DATA
        if state == HAConnectionState.HANDSHAKE:
            return self._handshake()
        if state == HAConnectionState.TRANSFER:
            return self._transfer()
        raise self._fail(
            f"master frame with state {self._state_name(state)}; "
            "a master sends only HANDSHAKE (epoch entries) or TRANSFER (log data)"
        )

    def _handshake(self) -> MasterHandshake | Literal[NeedData.NEED_DATA]:
        if self._available() < MASTER_HANDSHAKE_HEADER_SIZE:
            return NEED_DATA
        _, body_size, max_phy_offset, last_epoch = _MASTER_HANDSHAKE.unpack_from(
            self._buf, self._pos
        )
        # Header checks come before waiting for the body: a bad length fails now.
        self._check_body_size("master handshake", body_size)
        if body_size % EPOCH_ENTRY_SIZE:
            raise self._fail(
                f"master handshake: bodySize {body_size} is not a multiple of the "
                f"{EPOCH_ENTRY_SIZE}-byte epoch entry"
            )
        if max_phy_offset < 0:
            raise self._fail(f"master handshake: negative maxPhyOffset {max_phy_offset}")
        if last_epoch < 0:
            raise self._fail(f"master handshake: negative lastEpoch {last_epoch}")
        if self._available() < MASTER_HANDSHAKE_HEADER_SIZE + body_size:
            return NEED_DATA
        entries: list[WireEpochEntry] = []
        at = self._pos + MASTER_HANDSHAKE_HEADER_SIZE
        for _ in range(body_size // EPOCH_ENTRY_SIZE):
            epoch, start = _EPOCH_ENTRY.unpack_from(self._buf, at)
            if epoch < 0 or start < 0:
                raise self._fail(
                    f"master handshake: epoch entry ({epoch}, {start}) has a negative field"
                )
            entries.append(WireEpochEntry(epoch=epoch, start_offset=start))
            at += EPOCH_ENTRY_SIZE
        frozen = tuple(entries)
        problem = _epoch_entries_problem(frozen, last_epoch, max_phy_offset)
        if problem is not None:
            raise self._fail(f"master handshake: {problem}")
        self._pos = at
        return MasterHandshake(
            max_phy_offset=max_phy_offset, last_epoch=last_epoch, epoch_entries=frozen
        )

    def _transfer(self) -> Transfer | Literal[NeedData.NEED_DATA]:
        if self._available() < TRANSFER_HEADER_SIZE:
            return NEED_DATA
        _, body_size, offset, epoch, epoch_start, confirm = _TRANSFER.unpack_from(
            self._buf, self._pos
        )
        self._check_body_size("transfer", body_size)
        if offset < 0:
            raise self._fail(f"transfer: negative offset {offset}")
        if epoch < 0:
            raise self._fail(f"transfer: negative epoch {epoch}")
        if not 0 <= epoch_start <= offset:
            raise self._fail(
                f"transfer: epochStartOffset {epoch_start} of epoch {epoch} is not within "
                f"0..offset {offset}"
            )
        if confirm < 0:
            raise self._fail(f"transfer: negative confirmOffset {confirm}")
        if offset + body_size > _LONG_MAX:
            raise self._fail(f"transfer: offset {offset} + bodySize {body_size} overflows a long")
        end = self._pos + TRANSFER_HEADER_SIZE + body_size
        if len(self._buf) < end:
            return NEED_DATA
        # One copy (a bytearray slice would copy twice); the view is released at once so
        # the buffer can still be resized.
        with memoryview(self._buf) as view:
            body = bytes(view[self._pos + TRANSFER_HEADER_SIZE : end])
        self._pos = end
        return Transfer(
            offset=offset,
            epoch=epoch,
            epoch_start_offset=epoch_start,
            confirm_offset=confirm,
            body=body,
        )
