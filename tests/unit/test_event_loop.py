"""The event loop of every server process (brokergroup_remoting/event_loop.py, issue 38).

`choose` (pure): auto picks uvloop where installed, else the standard loop; an explicit
choice is honoured or refused with a clear error, never silently replaced. `run` makes the
process's one loop of the configured kind.

Then the socket paths that differ between loops, on real loopback sockets and on every
installed loop (each case runs its own loop through `asyncio.Runner`, not pytest-asyncio's):
the local master-address forwarder piping plaintext and TLS connections (its protocol
objects take the transports uvloop hands them: an `isinstance(transport,
asyncio.Transport)` check failed every forwarded connection under uvloop, and a send through
the local runtime's stable master address with it), and the remoting server's first-byte
sniffing (MSG_PEEK, add_reader, connect_accepted_socket with and without TLS).
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from brokergroup_cli.local.master_endpoint import MasterForwarder
from brokergroup_cli.local.state import RuntimeState
from brokergroup_cli.local.status import build_snapshot
from brokergroup_remoting import RemotingCommand, event_loop
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.event_loop import EVENT_LOOP_ENV, EventLoopError, LoopKind, choose
from brokergroup_remoting.net import (
    Connection,
    Credentials,
    RemotingClient,
    RemotingServer,
    ServerAuth,
)
from brokergroup_remoting.tls import ServerTls, TlsMode, client_context, server_context
from tests.unit.tls_material import Material, make_material

HOST = "127.0.0.1"
#: Bound on one round trip (liveness, never a timing assert).
BOUND_S = 10
ECHO = 9001
GOOD = Credentials("rocketmq2", "12345678")

LOOPS = [
    pytest.param(LoopKind.ASYNCIO, id="asyncio"),
    pytest.param(
        LoopKind.UVLOOP,
        id="uvloop",
        marks=pytest.mark.skipif(
            not event_loop.uvloop_installed(), reason="uvloop is not installed (extra fast)"
        ),
    ),
]


def test_auto_is_uvloop_where_installed_else_the_standard_loop() -> None:
    for requested in (None, "", "auto", " AUTO "):
        assert choose(requested, uvloop_available=True) is LoopKind.UVLOOP
        assert choose(requested, uvloop_available=False) is LoopKind.ASYNCIO


def test_an_explicit_choice_is_honoured_or_refused_never_replaced() -> None:
    assert choose("asyncio", uvloop_available=True) is LoopKind.ASYNCIO
    assert choose("uvloop", uvloop_available=True) is LoopKind.UVLOOP
    with pytest.raises(EventLoopError, match="uvloop package is not installed"):
        choose("uvloop", uvloop_available=False)
    with pytest.raises(EventLoopError, match="not one of auto, asyncio, uvloop"):
        choose("trio", uvloop_available=True)


def test_run_makes_the_configured_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    async def which() -> LoopKind:
        return event_loop.running()

    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert event_loop.run(which()) is LoopKind.ASYNCIO
    monkeypatch.setenv(EVENT_LOOP_ENV, "bogus")
    with pytest.raises(EventLoopError):
        event_loop.run(which())
    if event_loop.uvloop_installed():
        monkeypatch.setenv(EVENT_LOOP_ENV, "uvloop")
        assert event_loop.run(which()) is LoopKind.UVLOOP
        monkeypatch.delenv(EVENT_LOOP_ENV)
        assert event_loop.run(which()) is LoopKind.UVLOOP


def on(kind: LoopKind, main: Coroutine[Any, Any, Any]) -> Any:
    """Run `main` on a fresh loop of `kind` (bounded)."""

    async def bounded() -> Any:
        assert event_loop.running() is kind
        return await asyncio.wait_for(main, 3 * BOUND_S)

    with asyncio.Runner(loop_factory=event_loop.loop_factory(kind)) as runner:
        return runner.run(bounded())


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Material:
    return make_material(tmp_path_factory.mktemp("tls"), datetime.datetime.now(datetime.UTC))


async def _echo_master() -> tuple[asyncio.Server, str]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(b"master:" + line)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, HOST, 0)
    return server, f"{HOST}:{server.sockets[0].getsockname()[1]}"


async def _through_forwarder(tls: ServerTls | None, ca_file: Path | None) -> list[bytes]:
    """Three lines through a forwarder to an echoing master, on two connections."""
    master, target = await _echo_master()
    forwarder = MasterForwarder(name="test", hold_ms=BOUND_S * 1000, tls=tls)
    await forwarder.start(HOST, 0)
    forwarder.set_target(target)
    answers: list[bytes] = []
    try:
        for lines in ([b"one\n", b"two\n"], [b"three\n"]):
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    HOST,
                    forwarder.port,
                    ssl=None if ca_file is None else client_context(ca_file),
                ),
                BOUND_S,
            )
            for line in lines:
                writer.write(line)
                answers.append(await asyncio.wait_for(reader.readline(), BOUND_S))
            writer.close()
    finally:
        await forwarder.close()
        master.close()
        await master.wait_closed()
    return answers


@pytest.mark.parametrize("kind", LOOPS)
def test_the_forwarder_pipes_plaintext_connections_on_every_loop(kind: LoopKind) -> None:
    answers = on(kind, _through_forwarder(None, None))
    assert answers == [b"master:one\n", b"master:two\n", b"master:three\n"]


@pytest.mark.parametrize("kind", LOOPS)
def test_the_forwarder_ends_tls_sessions_on_every_loop(kind: LoopKind, material: Material) -> None:
    tls = ServerTls(TlsMode.ENFORCING, server_context(material.cert_file, material.key_file))
    answers = on(kind, _through_forwarder(tls, material.ca_file))
    assert answers == [b"master:one\n", b"master:two\n", b"master:three\n"]


async def _remoting_round_trips(tls: ServerTls) -> list[str]:
    """A permissive remoting port: a plaintext and a TLS client, each echoed."""

    async def echo(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return response_to(cmd, fields={"text": cmd.fields()["text"]})

    server = RemotingServer(
        {ECHO: echo}, auth=ServerAuth({GOOD.access_key: GOOD.secret_key}.get), name="t", tls=tls
    )
    await server.start(HOST, 0)
    texts: list[str] = []
    try:
        for text, context in (("plain", None), ("sealed", client_context(None))):
            client = await RemotingClient.connect(
                f"{HOST}:{server.port}", credentials=GOOD, tls=context
            )
            try:
                answer = await client.invoke(request(ECHO, 0, {"text": text}), timeout_s=BOUND_S)
                texts.append(answer.fields()["text"])
            finally:
                await client.close()
    finally:
        await server.close()
    return texts


@pytest.mark.parametrize("kind", LOOPS)
def test_a_permissive_remoting_port_sniffs_the_first_byte_on_every_loop(
    kind: LoopKind, material: Material
) -> None:
    tls = ServerTls(TlsMode.PERMISSIVE, server_context(material.cert_file, material.key_file))
    assert on(kind, _remoting_round_trips(tls)) == ["plain", "sealed"]


def test_local_status_names_the_loop_the_supervisor_runs_on() -> None:
    """The supervisor records its loop in state.json (and starts its children on it);
    `local status --json` names it as `eventLoop`."""
    state = RuntimeState(
        root_dir="/tmp/bg",
        supervisor_pid=1,
        supervisor_start_ticks=2,
        started_at_ms=3,
        updated_at_ms=4,
        event_loop="uvloop",
    )
    read_back = RuntimeState.from_json(json.loads(json.dumps(state.to_json())))
    assert read_back == state
    snapshot = build_snapshot(
        read_back,
        cluster_name="DefaultCluster",
        broker_name="broker-a",
        raft_port=9880,
        replica_info=None,
        raft={},
        broker_status={},
        process_alive={},
        supervisor_alive=True,
        now_ms=5,
    )
    assert snapshot.to_json()["eventLoop"] == "uvloop"
    older = state.to_json()
    del older["eventLoop"]  # a state file written before the field: unknown, not an error
    assert RuntimeState.from_json(older).event_loop is None
