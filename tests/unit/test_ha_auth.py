"""HA port authentication (DESIGN.md §11, issue 7 item 3), real sockets on 127.0.0.1.

- The pure exchange (ha/auth.py): proofs verify only with the same secret
  and the same nonces; every byte of a proof matters.
- A slave with the group's secret replicates byte-identically; one with a
  wrong secret, or a raw client that skips the challenge and sends a
  RocketMQ handshake (the attack that used to replace a real slave's
  connection), is disconnected before the master parses a frame: it never
  registers, never acks, the real slave's connection stays.
- A slave that proves the secret but claims a broker id from an address the
  controller did not register for that id is refused.
- A fake master without the secret cannot feed a slave: the slave refuses it.
- An ack beyond what was sent on the connection closes it (no confirmOffset
  advance from a forged ack).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_broker.ha import HAMasterService, HASlaveService, SlaveAck, SlaveHandshake, auth
from tests.unit.conftest import Clock, eventually
from tests.unit.test_ha_replication import (
    CONFIG,
    MasterHarness,
    _closer,
    cleanup,  # noqa: F401  # the fixture
    commit_log_bytes,
    open_store,
    produce,
)

SECRET = b"the-group-ha-secret-for-tests"
AUTH_CONFIG = replace(CONFIG, secret=SECRET)


@given(st.binary(min_size=1, max_size=64), st.binary(min_size=32, max_size=32),
       st.binary(min_size=32, max_size=32), st.integers(0, 63))  # fmt: skip
def test_proofs_need_the_secret_and_every_byte(
    secret: bytes, master_nonce: bytes, slave_nonce: bytes, flip: int
) -> None:
    proof = auth.slave_proof(secret, auth.challenge(master_nonce), slave_nonce)
    assert auth.check_slave_proof(secret, master_nonce, proof) == slave_nonce
    bad = bytearray(proof)
    bad[flip] ^= 1
    with pytest.raises(auth.HAAuthError):
        auth.check_slave_proof(secret, master_nonce, bytes(bad))
    with pytest.raises(auth.HAAuthError):
        auth.check_slave_proof(secret + b"x", master_nonce, proof)
    mp = auth.master_proof(secret, master_nonce, slave_nonce)
    auth.check_master_proof(secret, master_nonce, slave_nonce, mp)
    with pytest.raises(auth.HAAuthError):
        auth.check_master_proof(secret + b"x", master_nonce, slave_nonce, mp)


def test_a_challenge_of_another_protocol_is_refused() -> None:
    with pytest.raises(auth.HAAuthError, match="challenge"):
        auth.slave_proof(SECRET, b"\x00" * auth.CHALLENGE_BYTES, os.urandom(32))


async def _master(
    store: Any, registered: dict[int, str] | None = None
) -> tuple[MasterHarness, list[int]]:
    acks: list[tuple[int, int]] = []
    disconnects: list[int] = []
    service = HAMasterService(
        store, AUTH_CONFIG, master_epoch=1,
        on_slave_ack=lambda b, o: acks.append((b, o)), on_slave_disconnect=disconnects.append,
        now_ms=Clock(1_000), registered_host=None if registered is None else registered.get,
    )  # fmt: skip
    await service.start("127.0.0.1", 0)
    return MasterHarness(store, service, Clock(1_000), acks, disconnects), disconnects


def _slave(store: Any, broker_id: int, master: MasterHarness, secret: bytes) -> Any:
    service = HASlaveService(
        store, replace(CONFIG, secret=secret, source_host="127.0.0.1"), broker_id=broker_id,
        on_confirm_offset=lambda _: None,
    )  # fmt: skip
    return service, asyncio.create_task(service.run(master.service.bound_address))


def refusals(caplog: pytest.LogCaptureFixture, logger: str, words: str) -> int:
    """How many times `logger` (ha.master or ha.slave) refused a peer saying `words`."""
    name = f"brokergroup_broker.ha.{logger}"
    return sum(
        1
        for r in caplog.records
        if r.name == name and "broke the protocol" in r.getMessage() and words in r.getMessage()
    )


async def _raw_exchange(address: tuple[str, int], data: bytes) -> bytes:
    """Connect, send `data`, return whatever comes back until the master closes."""
    reader, writer = await asyncio.open_connection(*address)
    writer.write(data)
    await writer.drain()
    got = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 5):
            got += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    writer.close()
    return got


async def test_only_slaves_with_the_secret_replicate(
    tmp_path: Path,
    cleanup: list[Callable[[], Awaitable[Any]]],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = open_store(tmp_path / "master")
    cleanup.append(_closer(store))
    store.epoch_file.begin_epoch(1, 0)
    produce(store, 60, "a")
    master, _ = await _master(store)
    cleanup.append(master.service.stop)

    good_store = open_store(tmp_path / "good")
    cleanup.append(_closer(good_store))
    good, good_task = _slave(good_store, 2, master, SECRET)
    cleanup.append(good.stop)
    await eventually(lambda: good_store.max_offset == store.max_offset, "the good slave")
    assert commit_log_bytes(good_store) == commit_log_bytes(store)

    bad_store = open_store(tmp_path / "bad")
    cleanup.append(_closer(bad_store))
    bad, _ = _slave(bad_store, 3, master, b"a-wrong-secret-of-some-length")
    cleanup.append(bad.stop)
    # The attack of the issue: a RocketMQ handshake claiming the good slave's id,
    # then acks far beyond anything sent. Without auth it replaced broker 2's
    # connection and advanced its ack offset. Enough acks to fill a proof's length:
    # the master reads them as one, refuses it and closes (not its read timeout).
    forged = SlaveHandshake(slave_broker_id=2).encode()
    while len(forged) < auth.SLAVE_PROOF_BYTES:
        forged += SlaveAck(max_offset=1 << 40).encode()
    answer = await _raw_exchange(master.service.bound_address, forged)
    assert answer[: len(auth.MAGIC)] == auth.MAGIC and len(answer) == auth.CHALLENGE_BYTES
    produce(store, 20, "b")
    await eventually(lambda: good_store.max_offset == store.max_offset, "the good slave again")
    # Refused: the forged connection and the slave with the wrong secret.
    await eventually(
        lambda: refusals(caplog, "master", "authentication failed") >= 2, "both refused"
    )
    assert set(master.service.slaves()) == {2}
    assert bad_store.max_offset == 0
    assert max(o for b, o in master.acks if b == 2) <= store.max_offset
    assert all(b == 2 for b, _ in master.acks)
    assert good.connected and not good_task.done()


async def test_a_broker_id_is_accepted_only_from_its_registered_address(
    tmp_path: Path,
    cleanup: list[Callable[[], Awaitable[Any]]],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = open_store(tmp_path / "master")
    cleanup.append(_closer(store))
    store.epoch_file.begin_epoch(1, 0)
    produce(store, 10, "a")
    master, _ = await _master(store, registered={2: "127.0.0.1", 3: "127.0.0.77"})
    cleanup.append(master.service.stop)
    ok_store, liar_store = open_store(tmp_path / "ok"), open_store(tmp_path / "liar")
    cleanup += [_closer(ok_store), _closer(liar_store)]
    ok, _ = _slave(ok_store, 2, master, SECRET)
    liar, _ = _slave(liar_store, 3, master, SECRET)  # knows the secret, wrong address
    cleanup += [ok.stop, liar.stop]
    await eventually(lambda: ok_store.max_offset == store.max_offset, "the registered slave")
    await eventually(
        lambda: refusals(caplog, "master", "registered broker 3 at 127.0.0.77") >= 1,
        "the liar refused",
    )
    assert set(master.service.slaves()) == {2} and liar_store.max_offset == 0


async def test_a_fake_master_cannot_feed_a_slave(
    tmp_path: Path,
    cleanup: list[Callable[[], Awaitable[Any]]],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_store = open_store(tmp_path / "fake")
    cleanup.append(_closer(fake_store))
    fake_store.epoch_file.begin_epoch(1, 0)
    produce(fake_store, 10, "evil")
    fake = HAMasterService(
        fake_store, replace(CONFIG, secret=b"not-the-group-secret-at-all"), master_epoch=1,
        on_slave_ack=lambda b, o: None, on_slave_disconnect=lambda b: None, now_ms=Clock(1_000),
    )  # fmt: skip
    await fake.start("127.0.0.1", 0)
    cleanup.append(fake.stop)
    victim_store = open_store(tmp_path / "victim")
    cleanup.append(_closer(victim_store))
    victim = HASlaveService(
        victim_store, AUTH_CONFIG, broker_id=2, on_confirm_offset=lambda _: None
    )
    cleanup.append(victim.stop)
    victim_task = asyncio.create_task(victim.run(fake.bound_address))
    # Neither proves the other's secret (the fake master, checking first, closes the
    # link); the victim comes back and is turned away again.
    await eventually(
        lambda: refusals(caplog, "master", "authentication failed") >= 2, "turned away twice"
    )
    assert victim_store.max_offset == 0 and not victim.connected
    assert not victim_task.done()  # it keeps refusing and retrying
