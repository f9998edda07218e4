"""The pysyncobj shell around `ControllerState` (DESIGN.md §2, §10).

Theory of operation
-------------------
`ControllerRaftNode` is a pysyncobj `SyncObj` with one replicated method,
`apply_event`, which applies a committed `state.Event` (as a dict) to the
node's `ControllerState` and returns the `ApplyResult`. The leader's HTTP
shell proposes with `propose()`, an asyncio coroutine: pysyncobj's callback
(run on the Raft thread) completes an asyncio future through
`loop.call_soon_threadsafe`, bounded by a commit timeout (COMMIT_TIMEOUT).

pysyncobj runs with `autoTick=False`; our own thread calls `doTick`, so we
can (1) install our journal before the first tick, (2) make the journal
durable before every tick and every message that leaves the node, and
(3) publish a consistent `RaftStatus` after each tick.

Persistence: why not pysyncobj's journal + full dump
----------------------------------------------------
DESIGN.md §10 measured acknowledged writes lost with pysyncobj's
`journalFile` + `fullDumpFile`. Reading pysyncobj 0.3.17 shows two windows
that `useFork=False` alone does not close:

1. The dump is renamed into place in one tick and the journal is truncated
   in the next; messages (entries, acks) are handled in between. A kill in
   that window leaves a dump newer than the journal's start, and the loader
   then *discards the journal*, including acknowledged entries after the dump.
2. `FileJournal.deleteEntriesTo` rewrites the journal in place (header reset
   first, then entries re-added); a kill mid-rewrite loses the tail.

So this module supplies its own journal (`DurableJournal`) and snapshot
format through pysyncobj's documented `serializer`/`deserializer` hooks:

- Snapshots are versioned files `snapshots/snap-<index>.json` written with
  write-tmp + fsync + rename + fsync(dir), named by the first journal entry
  they leave in place. The newest few are kept.
- Truncating the journal is an atomic rewrite (tmp + fsync + rename + fsync
  dir), done only after the snapshot it relies on is durable.
- On start, the snapshot whose boundary entry equals the journal's first
  entry is loaded, whichever crash point we stopped at; a journal that still
  starts at index 1 is replayed from scratch. No match is refused loudly.

Power loss (decided here, see docs/controller.md)
-------------------------------------------------
With `fsync=True` (the default) the journal is fdatasync'ed before any
message leaves the node and before each tick, so a follower acknowledges
an entry and the leader counts itself only after the entry is on stable
storage. An event acknowledged to a client is therefore on the disks of a
majority, and a power loss of every node at once loses no acknowledged
event (given disks that honour fsync). Group commit keeps the cost to one
fdatasync per batch. With `fsync=False` a kill -9 still loses nothing (the
page cache survives), but a simultaneous power loss of a majority can lose
recently acknowledged events; that mode is for benchmarks only.

Threads: pysyncobj state and the journal belong to the Raft thread. The
asyncio thread reads `ControllerState` only under `state_lock` and reads
`status()`, an immutable snapshot published after each tick.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.journal import Journal
from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.pipe_notifier import PipeNotifier
from pysyncobj.transport import TCPTransport

from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.state import ApplyResult, ControllerState, Event, event_from_dict

log = logging.getLogger(__name__)

T = TypeVar("T")
Entry = tuple[bytes, int, int]  # (command, log index, term), pysyncobj's journal entry

_NO_OP = b"\x01"  # pysyncobj's _COMMAND_TYPE.NO_OP, the first entry of every log
_JOURNAL_MAGIC = b"BGJOURNAL1\n"
_RECORD = struct.Struct("<IIQQ")  # command length, crc32, index, term
_SNAP_MAGIC = b"BGSNAP1 "


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(
    path: str, data: bytes, *, fsync: bool, keep_previous_as: str | None = None
) -> None:
    """Replace `path` atomically: tmp file, fsync, rename, fsync the directory.

    With `keep_previous_as` the old content is hard-linked there first, so one
    complete copy exists under some name at every instant.
    """
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    if keep_previous_as is not None and os.path.exists(path):
        bak_tmp = f"{keep_previous_as}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(bak_tmp)
        os.link(path, bak_tmp)
        os.replace(bak_tmp, keep_previous_as)
    os.replace(tmp, path)
    if fsync:
        _fsync_dir(os.path.dirname(path) or ".")


def encode_meta(meta: dict[str, Any]) -> bytes:
    """journal.meta: one JSON object and its CRC32 on a second line."""
    body = json.dumps(meta, sort_keys=True).encode()
    return body + b"\n" + b"%08x\n" % zlib.crc32(body)


def decode_meta(data: bytes) -> dict[str, Any] | None:
    """The meta object, or None for any torn or corrupt copy."""
    body, sep, crc = data.rstrip(b"\n").rpartition(b"\n")
    if not sep or len(crc) != 8:
        try:  # a whole file of the format before the CRC line
            legacy = json.loads(data)
        except ValueError:
            return None
        return legacy if isinstance(legacy, dict) and data.rstrip().endswith(b"}") else None
    try:
        if int(crc, 16) != zlib.crc32(body):
            return None
        meta = json.loads(body)
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def _crc(command: bytes, index: int, term: int) -> int:
    return zlib.crc32(command, zlib.crc32(struct.pack("<QQ", index, term)))


def _record(entry: Entry) -> bytes:
    command, index, term = entry
    return _RECORD.pack(len(command), _crc(command, index, term), index, term) + command


# ---------------------------------------------------------------- journal


class DurableJournal(Journal):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj `Journal` with CRC'd records, group fsync and atomic truncation.

    `add` only buffers; `sync` writes the buffer and (with fsync) fdatasyncs.
    The node calls `sync` before every outgoing message and every tick, so
    nothing is acknowledged before it is durable. A torn or corrupt tail
    (power loss) is cut off at load.
    """

    def __init__(self, directory: str, *, fsync: bool) -> None:
        self._dir = directory
        self._path = os.path.join(directory, "journal.log")
        self._meta_path = os.path.join(directory, "journal.meta")
        self._fsync = fsync
        self._entries: list[Entry] = []
        self._offsets: list[int] = []
        self._pending = bytearray()
        self._dirty = False
        self._meta: dict[str, Any] = {}
        self._meta_dirty = False
        self.on_truncated: Callable[[int], None] | None = None
        os.makedirs(directory, exist_ok=True)
        self._load_meta()
        self._fd = self._load()

    # -- loading

    def _load_meta(self) -> None:
        """The newest intact copy among journal.meta, .bak and a leftover .tmp.

        Each copy carries a CRC. A crash while saving leaves the new copy whole
        (fsync before rename) or the previous one in place and in `.bak`, so the
        candidate with the highest term is current; within a term the vote never
        changes, so its vote is right too.
        """
        candidates = []
        found_any = False
        for path in (self._meta_path, self._meta_path + ".tmp", self._meta_path + ".bak"):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            found_any = True
            meta = decode_meta(data)
            if meta is None:
                log.warning(
                    "Raft meta copy %s is torn or corrupt (%d bytes); ignored", path, len(data)
                )
                continue
            candidates.append(meta)
        if candidates:
            self._meta = max(
                candidates,
                key=lambda m: (int(m.get("currentTerm", 0)), int(m.get("commitIndex", 0))),
            )
        else:
            if found_any:
                # Only without raftFsync (documented as not power-loss safe).
                log.error(
                    "no intact Raft meta in %s: starting from the journal's last term with no "
                    "vote recorded (raftFsync=false does not survive power loss)",
                    self._dir,
                )
            self._meta = {}

    def _load(self) -> int:
        if not os.path.exists(self._path):
            _write_durable(self._path, _JOURNAL_MAGIC, fsync=self._fsync)
        with open(self._path, "rb") as f:
            data = f.read()
        if not data.startswith(_JOURNAL_MAGIC):
            raise RuntimeError(f"{self._path} is not a brokergroup journal")
        pos = len(_JOURNAL_MAGIC)
        while pos + _RECORD.size <= len(data):
            length, crc, index, term = _RECORD.unpack_from(data, pos)
            end = pos + _RECORD.size + length
            command = data[pos + _RECORD.size : end]
            if end > len(data) or _crc(command, index, term) != crc:
                break
            if self._entries and index != self._entries[-1][1] + 1:
                break
            self._entries.append((command, index, term))
            self._offsets.append(pos)
            pos = end
        fd = os.open(self._path, os.O_RDWR)
        if pos < len(data):
            log.warning(
                "journal %s: cutting a torn or corrupt tail at byte %d of %d (%d entries kept)",
                self._path,
                pos,
                len(data),
                len(self._entries),
            )
            os.ftruncate(fd, pos)
            if self._fsync:
                os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_END)
        self._size = pos
        return fd

    # -- pysyncobj Journal interface (Raft thread only)

    def add(self, command: bytes, idx: int, term: int) -> None:
        entry = (bytes(command), int(idx), int(term))
        self._offsets.append(self._size + len(self._pending))
        self._entries.append(entry)
        self._pending += _record(entry)
        self._dirty = True

    def clear(self) -> None:
        self._rewrite([])

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom >= len(self._entries):
            return
        self._write_pending()
        cut = self._offsets[entryFrom]
        os.ftruncate(self._fd, cut)
        os.lseek(self._fd, 0, os.SEEK_END)
        self._size = cut
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]
        self._dirty = True

    def deleteEntriesTo(self, entryTo: int) -> None:
        self._rewrite(self._entries[entryTo:])
        if self.on_truncated is not None and self._entries:
            self.on_truncated(self._entries[0][1])

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        with contextlib.suppress(OSError):
            self.sync()
            self._save_meta(durable=self._fsync)
            os.close(self._fd)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        if self._meta.get("commitIndex") != raftCommitIndex:
            self._meta["commitIndex"] = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("commitIndex", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        # Raft: currentTerm/votedFor must be durable before the vote leaves.
        self._meta["currentTerm"] = int(term)
        self._meta["votedFor"] = None if votedForNodeId is None else str(votedForNodeId)
        self._save_meta(durable=self._fsync)

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> str | None:
        voted = self._meta.get("votedFor")
        return None if voted is None else str(voted)

    def onOneSecondTimer(self) -> None:
        # The commit index is only a hint for replay, but the file also holds the
        # term and vote: a rename of an unsynced copy could leave an empty file.
        if self._meta_dirty:
            self._save_meta(durable=self._fsync)

    # -- ours

    def sync(self) -> None:
        """Make every added entry reach the kernel, and the disk with fsync."""
        if not self._dirty:
            return
        self._write_pending()
        if self._fsync:
            os.fdatasync(self._fd)
        self._dirty = False

    def _write_pending(self) -> None:
        if not self._pending:
            return
        view = memoryview(self._pending)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(self._pending)
        self._pending = bytearray()

    def _save_meta(self, *, durable: bool) -> None:
        _write_durable(
            self._meta_path,
            encode_meta(self._meta),
            fsync=durable,
            keep_previous_as=self._meta_path + ".bak",
        )
        self._meta_dirty = False

    def _rewrite(self, entries: list[Entry]) -> None:
        """Atomic replacement: the old or the new journal survives any crash."""
        body = bytearray(_JOURNAL_MAGIC)
        offsets = []
        for entry in entries:
            offsets.append(len(body))
            body += _record(entry)
        _write_durable(self._path, bytes(body), fsync=self._fsync)
        os.close(self._fd)
        self._fd = os.open(self._path, os.O_RDWR)
        os.lseek(self._fd, 0, os.SEEK_END)
        self._entries = list(entries)
        self._offsets = offsets
        self._size = len(body)
        self._pending = bytearray()
        self._dirty = False


# ---------------------------------------------------------------- snapshots


def _entry_to_json(entry: Entry) -> list[Any]:
    return [base64.b64encode(entry[0]).decode(), entry[1], entry[2]]


def _entry_from_json(raw: list[Any]) -> Entry:
    return (base64.b64decode(raw[0]), int(raw[1]), int(raw[2]))


def encode_snapshot(prev: Entry, last: Entry, state: dict[str, Any]) -> bytes:
    body = json.dumps(
        {"format": 1, "prev": _entry_to_json(prev), "last": _entry_to_json(last), "state": state},
        sort_keys=True,
    ).encode()
    return _SNAP_MAGIC + f"{zlib.crc32(body):08x}\n".encode() + body


def decode_snapshot(data: bytes) -> tuple[Entry, Entry, dict[str, Any]]:
    """Inverse of `encode_snapshot`; ValueError if torn or corrupt."""
    header_end = len(_SNAP_MAGIC) + 9
    if not data.startswith(_SNAP_MAGIC) or len(data) < header_end:
        raise ValueError("not a brokergroup snapshot")
    body = data[header_end:]
    if f"{zlib.crc32(body):08x}" != data[len(_SNAP_MAGIC) : header_end - 1].decode():
        raise ValueError("snapshot checksum mismatch")
    doc = json.loads(body)
    return _entry_from_json(doc["prev"]), _entry_from_json(doc["last"]), doc["state"]


class SnapshotStore:
    """Versioned, durable snapshots `snap-<first journal index>.json`."""

    def __init__(self, directory: str, *, fsync: bool, keep: int) -> None:
        self._dir = directory
        self._fsync = fsync
        self._keep = max(2, keep)
        os.makedirs(directory, exist_ok=True)

    def _indexes(self) -> list[int]:
        found = []
        for name in os.listdir(self._dir):
            if name.startswith("snap-") and name.endswith(".json"):
                with contextlib.suppress(ValueError):
                    found.append(int(name[5:-5]))
        return sorted(found)

    def _path(self, index: int) -> str:
        return os.path.join(self._dir, f"snap-{index:020d}.json")

    def save(self, data: bytes, first_index: int) -> None:
        _write_durable(self._path(first_index), data, fsync=self._fsync)

    def find(self, first_entry: Entry) -> bytes | None:
        """The snapshot whose boundary entry is the journal's first entry."""
        path = self._path(first_entry[1])
        try:
            with open(path, "rb") as f:
                data = f.read()
            prev, _, _ = decode_snapshot(data)
        except (OSError, ValueError) as exc:
            log.warning("snapshot %s unusable: %s", path, exc)
            return None
        return data if prev == first_entry else None

    def prune(self, journal_first_index: int) -> None:
        """Keep the newest few, and always the one the journal starts at."""
        indexes = self._indexes()
        for index in indexes[: -self._keep]:
            if index != journal_first_index:
                with contextlib.suppress(OSError):
                    os.remove(self._path(index))


# ---------------------------------------------------------------- settings


_ALL_INTERFACES = frozenset({"0.0.0.0", "::", "", "*"})


@dataclass(frozen=True)
class RaftSettings:
    """Raft tuning (docs/controller.md explains each choice)."""

    self_address: str
    """This node's stable `host:port` (a DNS name in Kubernetes, never a pod IP)."""
    peers: tuple[str, ...]
    """Every member's `host:port`, this node included."""
    data_dir: str
    bind_host: str | None = None
    """Host the Raft port binds; None = the host of `self_address` (never all interfaces)."""
    password: str | None = None
    """pysyncobj `password`: frames are Fernet tokens (AES + HMAC) checked before
    unpickling. None leaves the port open to anyone who can reach it (dev only)."""
    raft_min_timeout_s: float = 0.2
    """Election timeout lower bound: lower is faster failover, more spurious elections."""
    raft_max_timeout_s: float = 0.4
    append_entries_period_s: float = 0.01
    """Heartbeat and batch period: bounds commit latency (about half of it on average)."""
    connection_timeout_s: float = 2.0
    connection_retry_s: float = 0.5
    log_compaction_min_entries: int = 5000
    log_compaction_min_time_s: float = 300.0
    fsync: bool = True
    """fdatasync before acknowledging; False survives kill -9 but not power loss."""
    dns_cache_s: float = 2.0
    """Short, so a peer pod that comes back with a new IP is reached quickly."""
    snapshots_kept: int = 3

    @property
    def read_lease_s(self) -> float:
        """How long a majority's last answers keep a leader's reads current: below the
        election timeout by two heartbeat periods (answers arrive after the followers
        reset their timers)."""
        return self.raft_min_timeout_s - 2 * self.append_entries_period_s

    @property
    def raft_bind_host(self) -> str:
        return self.bind_host or self.self_address.rsplit(":", 1)[0]

    def validate(self) -> None:
        if self.raft_bind_host in _ALL_INTERFACES:
            raise ValueError(
                f"the Raft port may not bind all interfaces ({self.raft_bind_host}): "
                "bind it to the node's own address"
            )
        if self.self_address not in self.peers:
            raise ValueError(f"self address {self.self_address} is not in peers {self.peers}")
        if len(set(self.peers)) != len(self.peers):
            raise ValueError(f"duplicate peers in {self.peers}")
        if not self.raft_min_timeout_s > 3 * self.append_entries_period_s:
            raise ValueError("raftMinTimeout must exceed 3 x appendEntriesPeriod")
        if not self.raft_max_timeout_s > self.raft_min_timeout_s:
            raise ValueError("raftMaxTimeout must exceed raftMinTimeout")
        if not self.connection_timeout_s >= self.raft_max_timeout_s:
            raise ValueError("connectionTimeout must be >= raftMaxTimeout")
        if self.log_compaction_min_entries < 2 or self.log_compaction_min_time_s <= 0:
            raise ValueError("log compaction needs minEntries >= 2 and minTime > 0")


@dataclass(frozen=True)
class RaftStatus:
    """Immutable view of the Raft node, published after every tick."""

    self_address: str
    members: tuple[str, ...]
    connected: frozenset[str]
    leader: str | None
    is_leader: bool
    term: int
    commit_index: int
    last_applied: int
    leader_commit_index: int | None
    has_quorum: bool
    log_entries: int
    snapshots_loaded: int
    caught_up: bool
    """Leader known and applied: a follower once caught up with the leader's commit
    index since start (latched, so it does not flap under load); a leader has
    applied every entry up to its own first entry of this term (reads are current)."""


class _SyncBeforeSendTransport(TCPTransport):  # type: ignore[misc]  # pysyncobj is untyped
    """Every Raft message leaves only after the journal is durable."""

    def send(self, node: Any, message: Any) -> Any:
        before_send = getattr(self._syncObj, "_before_send", None)
        if before_send is not None:
            before_send()
        return super().send(node, message)


_FAIL_CODES: dict[int, tuple[ErrorCode, str]] = {
    FAIL_REASON.QUEUE_FULL: (ErrorCode.COMMIT_TIMEOUT, "the Raft command queue is full; retry"),
    FAIL_REASON.MISSING_LEADER: (ErrorCode.NOT_LEADER, "no Raft leader right now; retry"),
    FAIL_REASON.DISCARDED: (ErrorCode.NOT_LEADER, "a new leader discarded the proposal; retry"),
    FAIL_REASON.NOT_LEADER: (ErrorCode.NOT_LEADER, "this node lost Raft leadership; retry"),
    FAIL_REASON.LEADER_CHANGED: (ErrorCode.NOT_LEADER, "the Raft leader changed; retry"),
    FAIL_REASON.REQUEST_DENIED: (ErrorCode.NOT_LEADER, "the Raft leader denied the proposal"),
    FAIL_REASON.UNKNOWN_OUTCOME: (
        ErrorCode.COMMIT_TIMEOUT,
        "the outcome of the proposal is unknown; read the state and retry",
    ),
}


# ---------------------------------------------------------------- the node


class ControllerRaftNode(SyncObj):  # type: ignore[misc]  # pysyncobj is untyped
    """One controller replica: Raft log + `ControllerState`."""

    def __init__(self, settings: RaftSettings) -> None:
        settings.validate()
        # Everything our methods touch must exist before SyncObj.__init__ scans dir(self).
        self.settings = settings
        self.state_lock = threading.Lock()
        self._state = ControllerState()
        self._raft_dir = os.path.join(settings.data_dir, "raft")
        self._journal = DurableJournal(self._raft_dir, fsync=settings.fsync)
        self._snapshots = SnapshotStore(
            os.path.join(self._raft_dir, "snapshots"),
            fsync=settings.fsync,
            keep=settings.snapshots_kept,
        )
        self._dump_path = os.path.join(self._raft_dir, "full.dump")
        self._startup_snapshot: bytes | None = None
        self._snapshots_loaded = 0
        self._stop = threading.Event()
        self._tick_thread: threading.Thread | None = None
        self._listeners: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []
        self._changed = False
        self._status: RaftStatus | None = None
        self._last_full_status_s = 0.0
        self._leader_commit_index: int | None = None
        self._has_quorum = False
        self._connected: frozenset[str] = frozenset()
        self._follower_caught_up = False
        self._completions: collections.deque[
            tuple[asyncio.AbstractEventLoop, Callable[[Any, Any], None], Any, Any]
        ] = collections.deque()
        self._leader_barrier: int | None = None

        conf = SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=True,
            appendEntriesPeriod=settings.append_entries_period_s,
            raftMinTimeout=settings.raft_min_timeout_s,
            raftMaxTimeout=settings.raft_max_timeout_s,
            connectionTimeout=settings.connection_timeout_s,
            connectionRetryTime=settings.connection_retry_s,
            leaderFallbackTimeout=max(settings.raft_max_timeout_s * 2, 1.0),
            logCompactionMinEntries=settings.log_compaction_min_entries,
            logCompactionMinTime=settings.log_compaction_min_time_s,
            # Proposals fail fast without a leader; the HTTP caller retries elsewhere.
            commandsWaitLeader=False,
            fullDumpFile=self._dump_path,
            journalFile=None,  # replaced by DurableJournal below
            useFork=False,
            serializer=self._serialize,
            deserializer=self._deserialize,
            bindAddress=f"{settings.raft_bind_host}:{settings.self_address.rsplit(':', 1)[1]}",
            password=settings.password,
            bindRetryTime=0.2,
            maxBindRetries=50,
            dnsCacheTime=settings.dns_cache_s,
            dnsFailCacheTime=min(1.0, settings.dns_cache_s),
        )
        others = [p for p in settings.peers if p != settings.self_address]
        super().__init__(
            settings.self_address, others, conf, transportClass=_SyncBeforeSendTransport
        )
        self._install_journal()
        self._prepare_startup_snapshot()
        self._wakeup = PipeNotifier(self._poller)
        # pysyncobj runs tick callbacks after applying and before waiting in poll,
        # so the published status is current while the Raft thread sleeps.
        self.addOnTickCallback(self._publish)

    # -- start-up (before the Raft thread exists)

    def _install_journal(self) -> None:
        """Swap pysyncobj's in-memory journal for ours, redoing what its __init__ derived.

        pysyncobj==0.3.17 is pinned; these private names are checked so an
        upgrade fails loudly here instead of silently losing durability.
        """
        for name in (
            "raftLog", "raftCurrentTerm", "votedForNodeId", "raftCommitIndex", "lastResponseTime",
        ):  # fmt: skip
            if not hasattr(self, f"_SyncObj__{name}"):
                raise RuntimeError(f"unsupported pysyncobj version: no SyncObj.__{name}")
        journal = self._journal
        if len(journal) == 0:
            journal.add(_NO_OP, 1, 0)
            journal.sync()
        self._SyncObj__raftLog = journal
        self._SyncObj__raftCurrentTerm = max(journal.getCurrentTerm(), journal[-1][2])
        self._SyncObj__votedForNodeId = journal.getVotedForNodeId()
        self._SyncObj__raftCommitIndex = journal.getRaftCommitIndex()
        journal.on_truncated = self._snapshots.prune

    def _prepare_startup_snapshot(self) -> None:
        first: Entry = self._journal[0]
        if first[1] == 1:
            # Nothing was ever compacted away: replay the whole journal.
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._dump_path)
            return
        data = self._snapshots.find(first)
        if data is None:
            raise RuntimeError(
                f"{self._raft_dir}: the journal starts at index {first[1]} (term {first[2]}) "
                "but no snapshot matches it; refusing to start with missing history. "
                "Restore the data directory or wipe it and let the node rejoin from its peers."
            )
        self._startup_snapshot = data
        if not os.path.exists(self._dump_path):
            _write_durable(self._dump_path, data, fsync=False)

    # -- pysyncobj serializer hooks (Raft thread)

    def _serialize(self, tmp_path: str, data: Any) -> None:
        last, prev = data[0], data[1]
        with self.state_lock:
            state = self._state.to_dict()
        blob = encode_snapshot(tuple(prev), tuple(last), state)
        # Durable versioned copy first: the journal is truncated only after this returns.
        self._snapshots.save(blob, int(prev[1]))
        with open(tmp_path, "wb") as f:  # pysyncobj renames it to fullDumpFile (for followers)
            f.write(blob)

    def _deserialize(self, path: str) -> tuple[Any, ...]:
        if self._startup_snapshot is not None:
            blob, self._startup_snapshot = self._startup_snapshot, None
        else:
            # A snapshot installed from the leader: keep a durable copy before
            # pysyncobj clears the journal down to its boundary.
            with open(path, "rb") as f:
                blob = f.read()
            prev, _, _ = decode_snapshot(blob)
            self._snapshots.save(blob, prev[1])
            self._snapshots.prune(prev[1])
        prev, last, state = decode_snapshot(blob)
        with self.state_lock:
            self._state = ControllerState.from_dict(state)
        self._snapshots_loaded += 1
        self._changed = True
        log.info("loaded snapshot up to index %d (term %d)", last[1], last[2])
        return (last, prev, None)

    # -- the replicated state machine (Raft thread)

    @replicated  # type: ignore[untyped-decorator]
    def apply_event(self, event_data: dict[str, Any]) -> ApplyResult:
        """Apply one committed event. Never raises: a raise would wedge the log."""
        try:
            event = event_from_dict(event_data)
            with self.state_lock:
                result = self._state.apply(event)
        except Exception as exc:  # a bug must not stop every replica at this entry
            log.exception("event %r failed to apply", event_data)
            result = ApplyResult(ErrorCode.INTERNAL_ERROR, f"event failed to apply: {exc}")
        self._changed = True
        return result

    # -- durability hooks

    def _before_send(self) -> None:
        self._journal.sync()

    # -- the Raft thread

    def start(self) -> None:
        if self._tick_thread is not None:
            return
        self._tick_thread = threading.Thread(
            target=self._run, name=f"raft-{self.settings.self_address}", daemon=True
        )
        self._tick_thread.start()

    def _run(self) -> None:
        wait_s = self.settings.append_entries_period_s
        while not self._stop.is_set():
            try:
                self._journal.sync()  # entries added last tick are durable before commit
                self.doTick(wait_s)  # runs _publish just before it waits in poll
            except Exception:
                log.exception("Raft tick failed")
                time.sleep(wait_s)
        try:
            self._doDestroy()
        except Exception:
            log.exception("Raft shutdown failed")

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wakeup.notify()
        if self._tick_thread is not None:
            self._tick_thread.join(timeout_s)

    def _publish(self) -> None:
        leader_node = self._getLeader()
        leader = None if leader_node is None else str(leader_node.id)
        previous = self._status
        now = time.monotonic()
        leader_changed = previous is None or previous.leader != leader
        if leader_changed or now - self._last_full_status_s > 0.02:
            raw = self.getStatus()
            self._leader_commit_index = raw.get("leader_commit_idx")
            self._has_quorum = bool(raw.get("has_quorum"))
            self._connected = frozenset(
                key[len("partner_node_status_server_") :]
                for key, value in raw.items()
                if key.startswith("partner_node_status_server_") and value == 2
            )
            self._last_full_status_s = now
        is_leader = bool(self._isLeader())
        last_applied = int(self.raftLastApplied)
        if not is_leader:
            self._leader_barrier = None
            known = self._leader_commit_index
            if leader is not None and known is not None and last_applied >= known:
                self._follower_caught_up = True
            caught_up = leader is not None and self._follower_caught_up
        else:
            if self._leader_barrier is None:
                # Our no-op of this term is in the log by now: applying it means
                # every entry of earlier terms is applied too.
                self._leader_barrier = int(self._journal[-1][1])
            # pysyncobj stamps answers with its own clock (CLOCK_MONOTONIC_RAW).
            caught_up = last_applied >= self._leader_barrier and self._quorum_fresh(raft_clock())
        status = RaftStatus(
            self_address=self.settings.self_address,
            members=self.settings.peers,
            connected=self._connected,
            leader=leader,
            is_leader=is_leader,
            term=int(self.raftCurrentTerm),
            commit_index=int(self.raftCommitIndex),
            last_applied=last_applied,
            leader_commit_index=self._leader_commit_index,
            has_quorum=self._has_quorum,
            log_entries=len(self._journal),
            snapshots_loaded=self._snapshots_loaded,
            caught_up=caught_up,
        )
        self._status = status
        # Complete proposals only now, so a caller that saw its commit also sees
        # a status (commit index, last applied) that includes it.
        while self._completions:
            loop, complete, result, error = self._completions.popleft()
            with contextlib.suppress(RuntimeError):  # loop closed
                loop.call_soon_threadsafe(complete, result, error)
        changed = (
            self._changed
            or previous is None
            or previous.leader != status.leader
            or previous.is_leader != status.is_leader
            or previous.term != status.term
            or previous.caught_up != status.caught_up
        )
        self._changed = False
        if changed:
            for loop, callback in list(self._listeners):
                with contextlib.suppress(RuntimeError):  # loop closed
                    loop.call_soon_threadsafe(callback)

    # -- the asyncio side

    def _quorum_fresh(self, now: float) -> bool:
        """The leader's read lease: a majority answered it within `read_lease_s`.

        Followers start an election no sooner than raftMinTimeout after the last
        append they received, so while this holds no other leader can exist and
        reads (and heartbeat answers that renew master leases) are current. A
        leader cut off from its quorum stops serving within the lease, not after
        pysyncobj's leaderFallbackTimeout (1 s).
        """
        responses = self._SyncObj__lastResponseTime
        window = self.settings.read_lease_s
        fresh = 1 + sum(1 for at in responses.values() if now - at < window)
        return fresh * 2 > len(self.settings.peers)

    def add_listener(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        """`callback` runs on `loop` after ticks that applied entries or changed leadership."""
        self._listeners.append((loop, callback))

    def status(self) -> RaftStatus:
        status = self._status
        if status is None:
            return RaftStatus(
                self.settings.self_address,
                self.settings.peers,
                frozenset(),
                None,
                False,
                0,
                0,
                0,
                None,
                False,
                len(self._journal),
                0,
                False,
            )
        return status

    def read(self, reader: Callable[[ControllerState], T]) -> T:
        """Run `reader` on the state under the lock; it must copy what it keeps."""
        with self.state_lock:
            return reader(self._state)

    async def propose(self, event: Event, timeout_s: float) -> ApplyResult:
        """Commit `event` through Raft and return how it applied.

        Raises ControllerError NOT_LEADER (retry on the leader; not applied) or
        COMMIT_TIMEOUT (outcome unknown: read the state, then retry).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[Any, Any]] = loop.create_future()

        def complete(result: Any, error: Any) -> None:
            if not future.done():
                future.set_result((result, error))

        def on_commit(result: Any, error: Any) -> None:  # Raft thread (or ours on QUEUE_FULL)
            self._completions.append((loop, complete, result, error))

        self.apply_event(event.to_dict(), callback=on_commit)
        self._wakeup.notify()
        try:
            result, error = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise ControllerError(
                ErrorCode.COMMIT_TIMEOUT,
                f"{event.TYPE} for {event.broker_name} was not committed within "
                f"{timeout_s:.1f}s; its outcome is unknown: read the state and retry",
            ) from None
        if error != FAIL_REASON.SUCCESS:
            code, message = _FAIL_CODES.get(
                int(error), (ErrorCode.COMMIT_TIMEOUT, f"Raft failure {error}")
            )
            raise ControllerError(code, f"{event.TYPE} for {event.broker_name}: {message}")
        if not isinstance(result, ApplyResult):
            raise ControllerError(ErrorCode.INTERNAL_ERROR, f"unexpected apply result {result!r}")
        return result

    def force_compaction(self) -> None:
        """Test hook: compact at the next tick."""
        self.forceLogCompaction()
        self._wakeup.notify()


def parse_peers(value: str | Sequence[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    peers = tuple(item.strip() for item in items if item.strip())
    for peer in peers:
        host, _, port = peer.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"peer {peer!r} is not host:port")
    return peers
