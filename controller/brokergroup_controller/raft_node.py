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
import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.pipe_notifier import PipeNotifier
from pysyncobj.tcp_connection import CONNECTION_STATE
from pysyncobj.transport import TCPTransport

from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.raft_settings import RaftSettings, RaftStatus
from brokergroup_controller.raft_storage import (
    DurableJournal,
    Entry,
    SnapshotStore,
    decode_snapshot,
    encode_snapshot,
    write_durable,
)
from brokergroup_controller.state import ApplyResult, ControllerState, Event, event_from_dict

log = logging.getLogger(__name__)

T = TypeVar("T")

# pysyncobj's _RAFT_STATE (onStateChanged passes these numbers).
_FOLLOWER, _CANDIDATE, _LEADER = 0, 1, 2
_NO_OP = b"\x01"  # pysyncobj's _COMMAND_TYPE.NO_OP, the first entry of every log


# ---------------------------------------------------------------- journal


# ---------------------------------------------------------------- snapshots


# ---------------------------------------------------------------- settings


class _SyncBeforeSendTransport(TCPTransport):  # type: ignore[misc]  # pysyncobj is untyped
    """Every Raft message leaves only after the journal is durable; stuck connects are abandoned.

    pysyncobj checks a connection's timeout only when its socket has an event
    or a message is sent to it, and sends nothing to a peer it is still
    connecting to. A SYN to an address nobody holds any more (a controller pod
    that came back on a new IP) has no events until the kernel gives up, about
    two minutes later, so the peer's new address (its DNS name re-resolved)
    would not be tried before then. Abandon a connect older than
    connectionTimeout; the next attempt resolves the name again.
    """

    def send(self, node: Any, message: Any) -> Any:
        before_send = getattr(self._syncObj, "_before_send", None)
        if before_send is not None:
            before_send()
        return super().send(node, message)

    def _connectIfNecessarySingle(self, node: Any) -> Any:
        connection = self._connections.get(node)
        started = self._lastConnectAttempt.get(node)
        if (
            connection is not None
            and started is not None
            and connection.state == CONNECTION_STATE.CONNECTING
            and raft_clock() - started > self._syncObj.conf.connectionTimeout
        ):
            log.debug("Raft connect to %s timed out; retrying with a fresh address", node.id)
            connection.disconnect()
        return super()._connectIfNecessarySingle(node)


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
        self._tick_started_s: float | None = None
        self._last_tick_gap_s = 0.0
        self._longest_tick_gap_s = 0.0

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
            onStateChanged=self._on_state_changed,
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
            "newAppendEntriesTime", "getCurrentLogIndex", "selfNode",
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
            write_durable(self._dump_path, data, fsync=False)

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

    # -- commit latency

    def _checkCommandsToApply(self) -> None:
        """pysyncobj appends proposals to the log at the end of a tick and sends them with
        the next heartbeat, so commit latency would follow appendEntriesPeriod. Here, as
        Nagle's algorithm does: new entries on a leader with nothing uncommitted leave at the
        next tick (one proposal commits in a round trip); while earlier entries are still in
        flight they leave `entries_batch_s` after the previous append, so concurrent
        proposals share one append and its fdatasyncs. The period only paces heartbeats."""
        last_index = self._SyncObj__getCurrentLogIndex()
        super()._checkCommandsToApply()
        if self._SyncObj__getCurrentLogIndex() == last_index:
            return
        if self._SyncObj__raftCommitIndex >= last_index:
            self._SyncObj__newAppendEntriesTime = 0.0
        else:
            settings = self.settings
            last_sent = self._SyncObj__newAppendEntriesTime - settings.append_entries_period_s
            self._SyncObj__newAppendEntriesTime = min(
                self._SyncObj__newAppendEntriesTime, last_sent + settings.entries_batch_s
            )
        self._wakeup.notify()  # the poll that ends this tick returns at once

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

    def _started_election(self) -> bool:
        node = self._SyncObj__selfNode
        return node is not None and self._SyncObj__votedForNodeId == node.id

    def _on_state_changed(self, old: int, new: int) -> None:
        """On the Raft thread (pysyncobj's onStateChanged): a leader stepping down."""
        if old == _LEADER and new != _LEADER:
            self._log_raft_change(f"stepped down as Raft leader (term now {self.raftCurrentTerm})")

    def _log_raft_change(self, what: str) -> None:
        """Say who starts an election or steps down, and how starved this thread was, so a
        term change can be traced to its cause: a follower whose own ticks kept coming
        heard no leader (the leader, or the link, was slow), one whose ticks were late (its
        own process starved it) missed the heartbeats it had."""
        # The tick that runs this may itself have been held (a stopped or starved process).
        this_tick_s = (
            0.0 if self._tick_started_s is None else time.monotonic() - self._tick_started_s
        )
        log.warning(
            "%s: the Raft thread's last gap between ticks %.0f ms, its longest since the "
            "previous change %.0f ms, this tick began %.0f ms ago (election timeout "
            "%.0f-%.0f ms)",
            what,
            self._last_tick_gap_s * 1000,
            self._longest_tick_gap_s * 1000,
            this_tick_s * 1000,
            self.settings.raft_min_timeout_s * 1000,
            self.settings.raft_max_timeout_s * 1000,
        )
        self._longest_tick_gap_s = 0.0

    def _run(self) -> None:
        period_s = self.settings.append_entries_period_s
        while not self._stop.is_set():
            now = time.monotonic()
            if self._tick_started_s is not None:
                self._last_tick_gap_s = now - self._tick_started_s
                self._longest_tick_gap_s = max(self._longest_tick_gap_s, self._last_tick_gap_s)
            self._tick_started_s = now
            wait_s = period_s
            if self._isLeader():  # wake for the next append: heartbeat, or a batch's end
                next_append = self._SyncObj__newAppendEntriesTime - raft_clock()
                wait_s = min(period_s, max(0.0, next_append))
            term = self.raftCurrentTerm
            try:
                self._journal.sync()  # entries added last tick are durable before commit
                self.doTick(wait_s)  # runs _publish just before it waits in poll
                if self.raftCurrentTerm > term and self._started_election():
                    # onStateChanged misses a candidate's next election (no state change).
                    self._log_raft_change(
                        f"started a Raft election for term {self.raftCurrentTerm}"
                    )
            except Exception:
                log.exception("Raft tick failed")
                time.sleep(period_s)
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
