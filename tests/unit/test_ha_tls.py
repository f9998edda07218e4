"""HA replication over mutual TLS (issue 36 item 1, ha/link.py), real sockets on 127.0.0.1.

The master holds a certificate of the test CA and asks every slave for one chaining to it
(CERT_REQUIRED); a slave verifies the master against the CA. Checked:

- a slave with a certificate of the CA replicates byte for byte, the HA secret's challenge
  inside the session; a socket tap between them (tests/unit/socket_tap.py) sees a TLS
  handshake and not one record body, while the same tap on a bare-TCP pair sees the bodies
  (so the tap would catch them);
- a slave with no certificate, one of another CA, or a plaintext slave is refused before
  any frame: it never registers, its store stays empty;
- a slave refuses a master whose certificate is of another CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.ha import HAConfig, HAMasterService, HASlaveService
from brokergroup_broker.store import MessageInput, MessageStore
from brokergroup_remoting.tls import client_context, server_context
from tests.unit.conftest import Clock, eventually
from tests.unit.socket_tap import SocketTap
from tests.unit.test_ha_replication import (
    CONFIG,
    STORE_HOST,
    _closer,
    commit_log_bytes,
    open_store,
)
from tests.unit.tls_material import Material, make_material

SECRET = b"the-group-ha-secret-for-tests"
MARKER = b"HA-BODY-IN-CLEAR-"
Closers = list[Callable[[], Awaitable[Any]]]


@pytest.fixture
async def closers() -> AsyncIterator[Closers]:
    """Async closers run in reverse order, even when the test fails."""
    pending: Closers = []
    yield pending
    for close in reversed(pending):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(close(), 30)


@pytest.fixture
def material(tmp_path: Path) -> Material:
    return make_material(tmp_path, datetime.datetime.now(datetime.UTC))


def _produce(store: MessageStore, count: int) -> None:
    for start in range(0, count, 5):
        batch = [
            MessageInput(topic="ha-tls", queue_id=i % 2, body=MARKER + str(i).encode() * 20)
            for i in range(start, min(start + 5, count))
        ]
        store.put_messages(batch, STORE_HOST, 1_700_000_000_000)


def _master_tls(m: Material, *, other: bool = False) -> HAConfig:
    cert, key = (m.other_cert_file, m.other_key_file) if other else (m.cert_file, m.key_file)
    return replace(
        CONFIG, secret=SECRET, tls_server=server_context(cert, key, client_ca_file=m.ca_file)
    )


async def _master(tmp_path: Path, config: HAConfig, closers: Closers) -> HAMasterService:
    store = open_store(tmp_path / "master")
    closers.append(_closer(store))
    store.epoch_file.begin_epoch(1, 0)
    _produce(store, 40)
    service = HAMasterService(
        store, config, master_epoch=1, on_slave_ack=lambda _b, _o: None,
        on_slave_disconnect=lambda _b: None, now_ms=Clock(1_000),
    )  # fmt: skip
    await service.start("127.0.0.1", 0)
    closers.append(service.stop)
    return service


async def _slave(
    tmp_path: Path, name: str, config: HAConfig, address: tuple[str, int], closers: Closers
) -> tuple[MessageStore, HASlaveService]:
    store = open_store(tmp_path / name)
    closers.append(_closer(store))
    service = HASlaveService(store, config, broker_id=2, on_confirm_offset=lambda _: None)
    task = asyncio.create_task(service.run(address))

    async def stop() -> None:
        await service.stop()
        await asyncio.wait_for(task, 10)

    closers.append(stop)
    return store, service


async def _tap(address: tuple[str, int], closers: Closers) -> tuple[SocketTap, tuple[str, int]]:
    tap = SocketTap(address)
    bound = await tap.start()
    closers.append(tap.close)
    return tap, bound


def _refused(caplog: pytest.LogCaptureFixture, logger: str) -> int:
    return sum(
        1
        for r in caplog.records
        if r.name == f"brokergroup_broker.ha.{logger}" and "no TLS session" in r.getMessage()
    )


async def test_replication_runs_inside_mutual_tls_and_no_body_crosses_in_clear(
    tmp_path: Path, material: Material, closers: Closers
) -> None:
    m = material
    master = await _master(tmp_path, _master_tls(m), closers)
    tap, through_tap = await _tap(master.bound_address, closers)
    slave_tls = client_context(m.ca_file, cert_file=m.cert_file, key_file=m.key_file)
    store, slave = await _slave(
        tmp_path, "slave", replace(CONFIG, secret=SECRET, tls_client=slave_tls), through_tap,
        closers,
    )  # fmt: skip
    master_store = master._store
    _produce(master_store, 40)  # some while streaming, too
    await eventually(lambda: store.max_offset == master_store.max_offset, "the TLS slave")
    assert commit_log_bytes(store) == commit_log_bytes(master_store)
    assert slave.connected and set(master.slaves()) == {2}
    # A TLS handshake each way (record type 0x16), and no body in the captured bytes.
    assert tap.to_server[:1] == b"\x16" and tap.to_client[:1] == b"\x16"
    assert MARKER in commit_log_bytes(master_store)["00000000000000000000"]
    assert MARKER not in tap.seen and len(tap.seen) > 2 * 80 * len(MARKER)

    # The same tap on a bare-TCP pair sees the bodies: it would have caught them.
    plain = await _master(tmp_path / "plain", replace(CONFIG, secret=SECRET), closers)
    plain_tap, plain_address = await _tap(plain.bound_address, closers)
    plain_store, _ = await _slave(
        tmp_path / "plain", "slave", replace(CONFIG, secret=SECRET), plain_address, closers
    )
    await eventually(lambda: plain_store.max_offset == plain._store.max_offset, "plain slave")
    assert MARKER in plain_tap.seen


@pytest.mark.parametrize("slave_has", ["no certificate", "another CA's certificate", "no TLS"])
async def test_a_slave_without_a_certificate_of_the_ca_is_refused(
    tmp_path: Path,
    material: Material,
    closers: Closers,
    caplog: pytest.LogCaptureFixture,
    slave_has: str,
) -> None:
    m = material
    master = await _master(tmp_path, _master_tls(m), closers)
    tls: Any = {
        "no certificate": client_context(m.ca_file),
        "another CA's certificate": client_context(
            m.ca_file, cert_file=m.other_cert_file, key_file=m.other_key_file
        ),
        "no TLS": None,
    }[slave_has]
    # The plaintext slave skips the secret so it speaks first (its handshake frame).
    secret = None if tls is None else SECRET
    store, slave = await _slave(
        tmp_path, "slave", replace(CONFIG, secret=secret, tls_client=tls),
        master.bound_address, closers,
    )  # fmt: skip
    await eventually(lambda: _refused(caplog, "master") >= 2, "the master refused twice")
    assert store.max_offset == 0 and not slave.connected
    assert master.slaves() == {}


async def test_a_slave_refuses_a_master_of_another_ca(
    tmp_path: Path, material: Material, closers: Closers, caplog: pytest.LogCaptureFixture
) -> None:
    m = material
    master = await _master(tmp_path, _master_tls(m, other=True), closers)
    slave_tls = client_context(m.ca_file, cert_file=m.cert_file, key_file=m.key_file)
    store, slave = await _slave(
        tmp_path, "slave", replace(CONFIG, secret=SECRET, tls_client=slave_tls),
        master.bound_address, closers,
    )  # fmt: skip
    await eventually(lambda: _refused(caplog, "slave") >= 2, "the slave refused twice")
    assert store.max_offset == 0 and not slave.connected
    assert master.slaves() == {}
