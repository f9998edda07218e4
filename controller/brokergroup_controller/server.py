"""The controller's service core on every node (DESIGN.md §2.3, §2.4, §12 "One request
layer"; docs/architecture.md).

Theory of operation
-------------------
`ControllerService` holds what every front end shares: the Raft node, the leader's
liveness view, the request-id table (`once`), the takeover record, and one
`endpoints.Endpoints`, whose methods take typed requests (`requests`) and a `Caller` and
answer with the API's types or raise `ControllerError`. The front ends are edges over it:
the HTTP API (`app`: JSON, bearer credentials, forwarding to the leader) and the RocketMQ
controller port (`rocketmq_front`: header fields, signed requests). A request is handled
in this order, so a rejected request never changes anything:

1. The front end authenticates the caller (HTTP: api_auth.py, 401 from the header
   alone; RocketMQ: the signature, NO_PERMISSION) and decodes the request into its
   typed form (400 / CONTROLLER_INVALID_REQUEST naming the field).
2. Access (access.py, 403 / NO_PERMISSION): every node checks the credential's role and
   group; a follower then forwards (HTTP) or answers CONTROLLER_NOT_LEADER (RocketMQ).
3. The leader's `Endpoints` method checks access again, with the address rules where the
   front end knows the origin (HTTP), decides with its liveness view
   (`liveness.Liveness`, local, not replicated), proposes an event through Raft, and
   answers with the applied result; rule rejections are `ControllerError` with the
   `ErrorCode` (HTTP 409, RocketMQ `wire.RESPONSE_CODE_OF`).

A background task ticks liveness every `livenessTickMs`; a master that just
became inactive gets a controller-triggered election at once, retried with
backoff (the schedule is in `Liveness`). Reports that make a master inactive
(`/v1/brokers/inactive`, a heartbeat saying the store cannot take writes)
run that tick inline, so the caller sees the election's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from brokergroup_controller import api, takeover
from brokergroup_controller.config import (
    DEFAULT_API_PORT,
    DEFAULT_RAFT_PORT,
    ControllerConfig,
    config_from_sources,
    load_config,
    read_token_file,
)
from brokergroup_controller.election import ElectionRequest, ElectionTrigger
from brokergroup_controller.endpoints import Endpoints
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.liveness import Liveness, WatchedSet
from brokergroup_controller.metrics import Metrics
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.state import (
    ApplyResult,
    BrokerSet,
    ControllerState,
    ElectMaster,
    Event,
    Outcome,
    RequestKey,
)

log = logging.getLogger(__name__)

OutcomeT = TypeVar("OutcomeT", bound=Outcome)


# ---------------------------------------------------------------- the service


class ControllerService:
    """The node's service core (state helpers, request ids, takeover, liveness loop); one
    per node, shared by its front ends. It implements `endpoints.LeaderService` for its
    handlers (`self.endpoints`)."""

    def __init__(
        self,
        config: ControllerConfig,
        node: ControllerRaftNode,
        *,
        clock_ms: Callable[[], int] | None = None,
        wall_clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.node = node
        self.clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        # Only to date takeover decisions across nodes (takeover.py says why).
        self.wall_clock_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        # Per broker set: the takeover record (masterEpoch, decidedAtMs) this
        # node saw first, and when (clock_ms): its waits count from there.
        self._takeover_seen: dict[tuple[str, str], tuple[tuple[int, int], int]] = {}
        self.liveness = Liveness(
            default_timeout_ms=config.heartbeat_timeout_ms,
            connection_close_grace_ms=config.connection_close_grace_ms,
            election_retry_initial_ms=config.election_retry_initial_ms,
            election_retry_max_ms=config.election_retry_max_ms,
        )
        self.metrics = Metrics()
        self._changed: asyncio.Condition | None = None
        self._was_leader = False
        self._heartbeat_transports: dict[tuple[str, str, int], asyncio.BaseTransport] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._tick_now: asyncio.Event | None = None
        self.endpoints = Endpoints(self)

    # -- lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._changed = asyncio.Condition()
        self._tick_now = asyncio.Event()
        self.node.add_listener(loop, self._on_node_changed)
        self._spawn(self._liveness_loop())
        self._on_node_changed()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _on_node_changed(self) -> None:
        """Runs on the loop after Raft ticks that applied entries or changed leadership."""
        status = self.node.status()
        if status.is_leader and not self._was_leader:
            log.info("became Raft leader at term %d: brokers get one timeout of grace", status.term)
            self.liveness.become_leader(self.clock_ms())
            self._heartbeat_transports.clear()
        elif not status.is_leader and self._was_leader:
            log.info("lost Raft leadership (leader now %s)", status.leader)
            self.liveness.step_down()
            self._heartbeat_transports.clear()
        self._was_leader = status.is_leader
        if self._changed is not None:
            self._spawn(self._notify_watchers())

    async def _notify_watchers(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    # -- leader address

    def leader_api(self) -> str | None:
        leader = self.node.status().leader
        return None if leader is None else self.config.api_address_of(leader)

    def is_leader(self) -> bool:
        return self.node.status().is_leader

    async def wait_leader_current(self) -> None:
        """A new leader first applies every earlier entry, so it never serves stale reads."""
        deadline = time.monotonic() + self.config.commit_timeout_ms / 1000
        while True:
            status = self.node.status()
            if not status.is_leader or status.caught_up:
                return
            if time.monotonic() >= deadline:
                raise ControllerError(
                    ErrorCode.NOT_LEADER,
                    "this node just became leader and has not applied the log yet; retry",
                )
            await asyncio.sleep(0.005)

    # -- state helpers (leader)

    def snapshot(self, cluster: str, name: str) -> BrokerSet | None:
        return self.node.read(lambda s: s.snapshot(cluster, name))

    def require_set(self, cluster: str, name: str) -> BrokerSet:
        broker_set = self.snapshot(cluster, name)
        if broker_set is None:
            raise ControllerError(
                ErrorCode.BROKER_SET_NOT_FOUND,
                f"no broker set {cluster}/{name}: brokers must apply for a BrokerId first",
            )
        return broker_set

    def require_registered(self, cluster: str, name: str, broker_id: int) -> BrokerSet:
        broker_set = self.snapshot(cluster, name)
        if broker_set is None or broker_id not in broker_set.brokers:
            raise ControllerError(
                ErrorCode.NEED_TO_BE_REGISTERED,
                f"broker {cluster}/{name}:{broker_id} has no BrokerId assigned; "
                "run GetNextBrokerId/ApplyBrokerId first",
            )
        return broker_set

    def replica_info(self, broker_set: BrokerSet) -> api.ReplicaInfo:
        now = self.clock_ms()
        key = broker_set.key
        master = broker_set.master_broker_id
        master_alive = master is not None and self.liveness.is_alive((*key, master), now)
        brokers = []
        for broker_id, record in sorted(broker_set.brokers.items()):
            view = self.liveness.view((*key, broker_id), now)
            brokers.append(
                api.BrokerLiveness(
                    broker_id=broker_id,
                    address=record.address,
                    alive=view.alive,
                    epoch=view.epoch,
                    max_offset=view.max_offset,
                    confirm_offset=view.confirm_offset,
                    election_priority=view.election_priority,
                    last_heartbeat_age_ms=view.last_heartbeat_age_ms,
                    inactive_reason=view.inactive_reason,
                )
            )
        return api.ReplicaInfo(
            cluster_name=broker_set.cluster_name,
            broker_name=broker_set.broker_name,
            master_broker_id=master,
            master_address=None if master is None else broker_set.brokers[master].address,
            master_alive=master_alive,
            master_takeover_wait_ms=0
            if master is None
            else self.takeover_wait_answer(broker_set, now),
            master_epoch=broker_set.master_epoch,
            sync_state_set=frozenset(broker_set.sync_state_set),
            sync_state_set_epoch=broker_set.sync_state_set_epoch,
            next_broker_id=broker_set.next_broker_id,
            brokers=tuple(brokers),
        )

    def takeover_remaining(self, broker_set: BrokerSet, now: int) -> tuple[int | None, int] | None:
        """(whose lease, ms left) of the set's takeover record for its current
        masterEpoch, from the replicated state; None without such a record."""
        record = broker_set.takeover
        if record is None or record.master_epoch != broker_set.master_epoch:
            return None
        ident = (record.master_epoch, record.decided_at_ms)
        seen = self._takeover_seen.get(broker_set.key)
        if seen is None or seen[0] != ident:
            seen = (ident, now)
            self._takeover_seen[broker_set.key] = seen
        old = record.old_master_broker_id
        left = takeover.remaining_ms(
            record,
            seen_ago_ms=now - seen[1],
            decided_ago_wall_ms=self.wall_clock_ms() - record.decided_at_ms,
            old_master_gone=old is not None and self.liveness.process_gone((*broker_set.key, old)),
        )
        return old, left

    def takeover_wait_answer(self, broker_set: BrokerSet, now: int) -> int:
        """`masterTakeoverWaitMs`: from the replicated record, else this leader's grace."""
        remaining = self.takeover_remaining(broker_set, now)
        return self.liveness.grace_remaining_ms(now) if remaining is None else remaining[1]

    async def propose(self, event: Event, expect: type[OutcomeT]) -> OutcomeT:
        """Commit `event` and return its outcome, or raise its refusal (ControllerError;
        NOT_LEADER and COMMIT_TIMEOUT name the leader this node knows)."""
        try:
            result = await self.node.propose(event, self.config.commit_timeout_ms / 1000)
        except ControllerError as exc:
            raise ControllerError(exc.code, exc.message, leader=self.leader_api()) from exc
        return _outcome_or_refusal(result, expect)

    async def once(
        self,
        request_key: RequestKey | None,
        expect: type[OutcomeT],
        decide_and_propose: Callable[[], Awaitable[OutcomeT]],
    ) -> OutcomeT:
        """Run a mutating request unless its id was answered already (then that
        answer). A refusal is checked against the table once more: a twin of
        this request may have committed between the first look and the decision."""
        first = self._first_answer(request_key)
        if first is not None:
            return _outcome_or_refusal(first, expect)
        try:
            return await decide_and_propose()
        except ControllerError:
            first = self._first_answer(request_key)
            if first is None:
                raise
            return _outcome_or_refusal(first, expect)

    def _first_answer(self, request_key: RequestKey | None) -> ApplyResult | None:
        """A retried request id's first answer (its outcome or its refusal);
        None for a request not answered yet. Checked before anything is decided:
        the retry of a committed AlterSyncStateSet would be FENCED_SYNC_STATE_SET_EPOCH
        and that of a committed election MASTER_STILL_EXIST. A retry that arrives
        while its first attempt is still in flight is caught when it applies."""
        if request_key is None:
            return None
        return self.node.read(lambda s: s.answer_of(request_key))

    def with_takeover(self, broker_set: BrokerSet, event: ElectMaster, now: int) -> ElectMaster:
        """The leader's takeover decision, carried by the event so that `apply`
        stores it even if this request gives up on the commit (takeover.py)."""
        old = broker_set.master_broker_id
        new = event.new_master_broker_id
        replaced = None if old == new else old  # a restarted master renews its own epoch
        old_wait = (
            0
            if replaced is None
            else self.liveness.takeover_wait_ms(
                (*broker_set.key, replaced),
                now,
                new_master_in_sync_state_set=new in broker_set.sync_state_set,
            )
        )
        previous_old, previous_left = self.takeover_remaining(broker_set, now) or (None, 0)
        whose, wait = takeover.combine_waits(previous_old, previous_left, replaced, old_wait)
        decided_at = self.wall_clock_ms()
        # This node saw the decision now: its answers count from here.
        self._takeover_seen[broker_set.key] = ((broker_set.master_epoch + 1, decided_at), now)
        return replace(
            event,
            takeover_old_master_broker_id=whose,
            takeover_wait_ms=wait,
            decided_at_ms=decided_at,
        )

    def track_connection(self, key: tuple[str, str, int], transport: asyncio.BaseTransport) -> None:
        self._heartbeat_transports[key] = transport

    def state_changed(self) -> asyncio.Condition:
        assert self._changed is not None, "start() first"
        return self._changed

    # -- liveness loop (leader)

    async def _liveness_loop(self) -> None:
        assert self._tick_now is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._tick_now.wait(), self.config.liveness_tick_ms / 1000)
            self._tick_now.clear()
            try:
                await self.run_liveness_tick()
            except Exception:
                log.exception("liveness tick failed")

    async def run_liveness_tick(self) -> None:
        """Elect for every set whose master just became inactive (or whose retry is due)."""
        if not self.node.status().is_leader:
            return
        now = self.clock_ms()
        for key, transport in list(self._heartbeat_transports.items()):
            if transport.is_closing():
                self.liveness.connection_closed(key, now)
                del self._heartbeat_transports[key]

        def watched(state: ControllerState) -> dict[tuple[str, str], WatchedSet]:
            return {
                key: WatchedSet(bs.master_broker_id, frozenset(bs.brokers))
                for key, bs in state.broker_sets.items()
                if bs.master_broker_id is not None or bs.has_had_master
            }

        due = self.liveness.tick(now, self.node.read(watched))
        if due:
            await asyncio.gather(*(self._controller_election(key) for key in due))

    async def _controller_election(self, key: tuple[str, str]) -> None:
        succeeded = False
        try:
            broker_set = self.snapshot(*key)
            if broker_set is None:
                succeeded = True
                return
            master = broker_set.master_broker_id
            if master is not None:
                reason = self.liveness.inactive_reason((*key, master), self.clock_ms())
                log.warning(
                    "master %s/%s:%d is inactive (%s): electing at once", *key, master, reason
                )
            await self.endpoints.elect(
                broker_set,
                ElectionRequest(
                    trigger=ElectionTrigger.CONTROLLER,
                    enable_elect_unclean_master=self.config.enable_elect_unclean_master,
                ),
            )
            succeeded = True
        except ControllerError as refusal:
            # MASTER_STILL_EXIST: the master came back; that ends the retries too.
            succeeded = refusal.code is ErrorCode.MASTER_STILL_EXIST
            if not succeeded:
                log.info("controller election for %s/%s: %s", *key, refusal.message)
        except Exception:
            log.exception("controller election for %s/%s failed", *key)
        finally:
            self.liveness.election_attempted(key, self.clock_ms(), succeeded=succeeded)

    def kick_liveness(self) -> None:
        if self._tick_now is not None:
            self._tick_now.set()


def _outcome_or_refusal(result: ApplyResult, expect: type[OutcomeT]) -> OutcomeT:
    """A committed event's outcome, or its refusal raised as ControllerError (a refused
    ApplyBrokerId names the nextBrokerId to apply for instead)."""
    if not result.ok:
        details = {} if result.next_broker_id is None else {"nextBrokerId": result.next_broker_id}
        raise ControllerError(result.code, result.message, **details)
    if not isinstance(result.outcome, expect):
        raise ControllerError(
            ErrorCode.INTERNAL_ERROR, f"expected {expect.__name__}, applied {result.outcome!r}"
        )
    return result.outcome


__all__ = [
    "DEFAULT_API_PORT",
    "DEFAULT_RAFT_PORT",
    "ControllerConfig",
    "config_from_sources",
    "load_config",
    "read_token_file",
]
