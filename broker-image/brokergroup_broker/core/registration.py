"""Driver of the register-state machine: identity files + controller (DESIGN.md §3.4).

The thin I/O shell around `register_state.RegisterMachine`: it reads the
identity files once, then loops "carry out the action, feed the answer".
Order of effects (written down once, as the machine's docstring demands):
the temp file is durable before ApplyBrokerId is sent; `.broker.meta` is
committed (atomic rename + dir fsync, `IdentityFiles.commit_temp`) only
after the controller accepted the id.

Transient controller failures (no leader, timeout, connection refused)
repeat the same action after a bounded exponential backoff; every action is
idempotent. Only `stop` ends the loop early.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

from brokergroup_broker.core import register_state as rs
from brokergroup_broker.core.controller_link import (
    ControllerLink,
    ControllerRefused,
    ControllerUnavailable,
)
from brokergroup_broker.store.identity import IdentityFiles, TempBrokerMeta
from brokergroup_controller.api import ReplicaInfo
from brokergroup_controller.backoff import BackoffPolicy

log = logging.getLogger(__name__)


class RegistrationFailed(Exception):
    """Registration cannot proceed without a person (the message says what to do)."""


async def register(
    *,
    machine: rs.RegisterMachine,
    identity: IdentityFiles,
    controller: ControllerLink,
    address: str,
    backoff_ms: int,
    backoff_max_ms: int,
    stopping: asyncio.Event,
    on_state: Callable[[rs.RegisterState], None] = lambda _: None,
) -> tuple[int, ReplicaInfo]:
    """Run the machine to REGISTERED; returns (BrokerId, the register answer)."""
    temp = identity.read_temp()
    meta = identity.read_meta()
    action = machine.start(
        rs.FilesFound(
            temp_broker_id=None if temp is None else temp.broker_id,
            temp_register_code=None if temp is None else temp.register_code,
            meta_broker_id=None if meta is None else meta.broker_id,
            meta_cluster_name=None if meta is None else meta.cluster_name,
            meta_broker_name=None if meta is None else meta.broker_name,
        )
    )
    registered: ReplicaInfo | None = None
    backoff = BackoffPolicy(initial_ms=backoff_ms, max_ms=backoff_max_ms)
    delay_ms = backoff.initial_ms
    while True:
        on_state(machine.state)
        if isinstance(action, rs.Done):
            assert registered is not None
            return action.broker_id, registered
        if isinstance(action, rs.Fail):
            raise RegistrationFailed(action.reason)
        try:
            answer: rs.Input
            match action:
                case rs.GetNextBrokerId():
                    answer = rs.NextBrokerIdAnswered(
                        await controller.get_next_broker_id(), secrets.token_hex(16)
                    )
                case rs.WriteTemp(broker_id, code):
                    identity.write_temp(TempBrokerMeta(broker_id, code))
                    answer = rs.TempWritten()
                case rs.ApplyBrokerId(broker_id, code):
                    try:
                        await controller.apply_broker_id(broker_id, code, address)
                        answer = rs.ApplyAnswered(True)
                    except ControllerRefused as exc:
                        if exc.code != "BROKER_ID_INVALID":
                            raise
                        log.warning("BrokerId %d refused: %s", broker_id, exc.message)
                        answer = rs.ApplyAnswered(False)
                case rs.CommitTemp():
                    identity.commit_temp(machine.cluster_name, machine.broker_name)
                    answer = rs.MetaCommitted()
                case rs.DeleteTempAndRestart():
                    identity.delete_temp()
                    answer = rs.TempDeleted()
                case rs.Register(broker_id):
                    try:
                        registered = await controller.register_broker(broker_id, address)
                        answer = rs.RegisterAnswered(True)
                    except ControllerRefused as exc:
                        if exc.code != "NEED_TO_BE_REGISTERED":
                            raise
                        answer = rs.RegisterAnswered(False, need_to_be_registered=True)
                case _:
                    raise AssertionError(f"unhandled register action {action!r}")
        except (ControllerUnavailable, ControllerRefused) as exc:
            log.warning(
                "register state %s: %s failed (%s); retrying in %d ms",
                machine.state,
                type(action).__name__,
                exc,
                delay_ms,
            )
            try:
                await asyncio.wait_for(stopping.wait(), delay_ms / 1000)
            except TimeoutError:
                pass
            else:
                raise RegistrationFailed("stopped before registration finished") from None
            delay_ms = backoff.next_ms(delay_ms)
            continue
        delay_ms = backoff.initial_ms
        action = machine.handle(answer)
