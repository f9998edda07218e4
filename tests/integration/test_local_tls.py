"""TLS on every port of the local runtime (`--set local.tls=enforcing`, issue 36 item 1).

One runtime for the module, every client-facing address enforcing TLS (the controllers' name
servers, the stable master address, the brokers' remoting and client protocol ports) and every
internal link mutual TLS (the controllers' HTTPS API and their forwarding, broker →
controller, HA replication). `local status --json` names the mode and the CA.

- A stock RocketMQ 5.3.1 client started with `-Dtls.enable=true` sends and consumes every
  message whole and in queue order; without it, it finds no route; a Python client verifying
  the name server against the CA is answered.
- `brokergroup produce`/`consume` (the CA found from the runtime's directory) send and read
  every message over TLS, and a socket tap (tests/unit/socket_tap.py: a loopback proxy in
  this test between the client and the port) in front of the master's client protocol port,
  its remoting port and a controller's HTTP API shows no message body, key, credential or
  API path in clear during them.
- The master's HA port is mutual TLS: without a certificate of the CA there is no session,
  with one the HA challenge comes inside it.
- A master SIGKILL under TLS fails over: every acknowledged message is read whole from the
  new master (HA over mutual TLS kept the slaves in sync), the new master takes writes, and
  the restarted broker rejoins the SyncStateSet over TLS.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import ssl
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.store.message import body_crc
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from brokergroup_remoting.tls import client_context
from tests.integration.local_harness import brokergroup
from tests.integration.stock_client_harness import StockRuntime, stock_runtime
from tests.unit.socket_tap import SocketTap
from tools.rocketmq.stock_client import StockClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TOPIC = "TlsOrders"
#: The test runtime's ports (local_harness TEST_SETTINGS): the broker's client port, its HA
#: port (+1) and remoting port (+3), the controllers' API.
CLIENT_PORT, HA_PORT, REMOTING_PORT, API_PORT = 20911, 20912, 20914, 19878
#: What must never cross a tapped port in clear: produce's keys and body filler, a remoting
#: body.
IN_CLEAR = (b"TLSBODY", b"0123456789abcdef", b"REMOTING-BODY-IN-CLEAR")


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockRuntime]:
    with stock_runtime(tmp_path_factory.mktemp("tls"), ("local.tls=enforcing",)) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def sealed_client(rt: StockRuntime) -> StockClient:
    return replace(rt.client, jvm_options=("-Dtls.enable=true",))


def messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in lines if "summary" not in x]


def test_status_names_the_mode_and_the_ca(rt: StockRuntime) -> None:
    status = rt.status()
    assert status["tlsMode"] == "enforcing"
    assert Path(status["caFile"]).read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")


async def test_a_verifying_client_is_answered_by_the_name_server(rt: StockRuntime) -> None:
    status = rt.status()
    client = await RemotingClient.connect(
        status["namesrvAddress"].split(";")[0],
        credentials=Credentials(status["accessKey"], status["secretKey"]),
        tls=client_context(Path(status["caFile"])),  # host name checked against the SANs
    )
    try:
        answer = await client.invoke(
            request(RequestCode.GET_BROKER_CLUSTER_INFO, 0, None), timeout_s=10
        )
    finally:
        await client.close()
    assert answer.code == ResponseCode.SUCCESS
    assert "broker-a" in json.loads(answer.body or b"{}").get("brokerAddrTable", {})


def test_a_tls_client_sends_and_consumes_every_message_in_queue_order(
    sealed_client: StockClient,
) -> None:
    sent = messages(sealed_client.run("send", kind="sync", topic=TOPIC, count=30, run="tls"))
    assert [m["status"] for m in sent] == ["SEND_OK"] * 30
    got = messages(
        sealed_client.run(
            "consume", kind="orderly", topic=TOPIC, group="tls-orderly", count=30, idle_s=30
        )
    )
    assert sorted((m["body"], m["msgId"]) for m in got) == sorted(
        (m["body"], m["msgId"]) for m in sent
    )
    by_queue: dict[int, list[int]] = {}
    for m in got:
        by_queue.setdefault(m["queueId"], []).append(m["queueOffset"])
        assert base64.b64decode(m["body"]).startswith(m["keys"].removeprefix("key-").encode())
    assert all(offsets == sorted(offsets) for offsets in by_queue.values()), by_queue


def test_a_plaintext_client_finds_no_route(rt: StockRuntime) -> None:
    try:
        lines = rt.client.run("send", kind="sync", topic=TOPIC, count=1, run="plain", timeout_s=120)
    except RuntimeError as exc:  # the client gives up: its name server request got no answer
        reasons = ("No route info", "connect to", "send request to")
        assert any(reason in str(exc) for reason in reasons), str(exc)[-2000:]
    else:
        assert [m["status"] for m in messages(lines)] != ["SEND_OK"], lines


def _env(rt: StockRuntime) -> dict[str, str]:
    """A user's environment pointed at this runtime (its controllers, keys, credential and
    CA)."""
    env = {k: v for k, v in os.environ.items() if k != "BROKERGROUP_CA_FILE"}
    env["BROKERGROUP_LOCAL_DIR"] = str(rt.runtime.root)
    hosts = [c["address"].rsplit(":", 1)[0] for c in rt.status()["controllers"]]
    env["BROKERGROUP_CONTROLLER_ADDRESSES"] = ",".join(f"{h}:{API_PORT}" for h in hosts)
    return env


async def _brokergroup(rt: StockRuntime, *args: str) -> str:
    """`brokergroup ARGS` in a fresh process while this test's taps keep relaying."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "brokergroup_cli.main", *args, env=_env(rt),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, f"brokergroup {args}: {err.decode()[-3000:]}"
    return out.decode()


def _master_host(status: dict[str, Any]) -> str:
    return str(status["master"]["address"]).rsplit(":", 1)[0]


async def _tap(host: str, port: int) -> tuple[SocketTap, str]:
    tap = SocketTap((host, port))
    bound = await tap.start()
    return tap, f"{bound[0]}:{bound[1]}"


def _consumed(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


async def test_produce_and_consume_over_tls_with_no_body_in_clear(rt: StockRuntime) -> None:
    status = rt.wait_healthy()
    host = _master_host(status)
    controller = status["controllers"][0]["address"]
    client_tap, client_address = await _tap(host, CLIENT_PORT)
    api_tap, api_address = await _tap(controller.rsplit(":", 1)[0], API_PORT)
    remoting_tap, remoting_address = await _tap(host, REMOTING_PORT)
    try:
        # The client port: produce and consume through the tap (a static broker address).
        summary = json.loads(await _brokergroup(
            rt, "produce", "--topic", "TlsCli", "--count", "40", "--size", "200", "--batch", "4",
            "--key-prefix", "TLSBODY-", "--broker-address", client_address, "--json",
        ))  # fmt: skip
        assert summary["acked"] == 40 and summary["failed"] == 0, summary
        # Discovery through the tapped API: the controllers' HTTPS.
        more = json.loads(await _brokergroup(
            rt, "produce", "--topic", "TlsCli", "--count", "10", "--size", "200",
            "--key-prefix", "TLSBODY-late-", "--controller-addresses", api_address, "--json",
        ))  # fmt: skip
        assert more["acked"] == 10 and more["failed"] == 0, more
        read = _consumed(await _brokergroup(
            rt, "consume", "--topic", "TlsCli", "--from-beginning", "--json",
            "--max-messages", "50", "--broker-address", client_address,
        ))  # fmt: skip
        keys = sorted(m["key"] for m in read)
        assert keys == sorted(
            [f"TLSBODY-{i}" for i in range(40)] + [f"TLSBODY-late-{i}" for i in range(10)]
        )
        for m in read:
            assert m["body"].startswith(m["key"] + " 0123456789abcdef")
            assert m["bodyCrc"] == body_crc(m["body"].encode())
        by_queue: dict[int, list[int]] = {}
        for m in read:
            by_queue.setdefault(m["queueId"], []).append(m["queueOffset"])
        assert all(o == list(range(o[0], o[0] + len(o))) for o in by_queue.values()), by_queue

        # The remoting port: a SEND_MESSAGE_V2 over TLS through the tap.
        credentials = Credentials(status["accessKey"], status["secretKey"])
        remoting = await RemotingClient.connect(
            remoting_address, credentials=credentials,
            tls=client_context(Path(status["caFile"])), server_hostname=host,
        )  # fmt: skip
        try:
            fields = {
                "a": "pg", "b": "TlsRemoting", "c": "TBW102", "d": "4", "e": "-1", "f": "0",
                "g": "1700000000000", "h": "0", "i": "UNIQ_KEY\x01NM\x02", "j": "0",
                "k": "false", "m": "false", "n": "broker-a",
            }  # fmt: skip
            answer = await remoting.invoke(
                request(RequestCode.SEND_MESSAGE_V2, 0, fields, b"REMOTING-BODY-IN-CLEAR"),
                timeout_s=10,
            )
        finally:
            await remoting.close()
        assert answer.code == ResponseCode.SUCCESS, answer
    finally:
        for tap in (client_tap, api_tap, remoting_tap):
            await tap.close()
    token = (rt.runtime.root / "client-credential").read_text().strip().encode()
    for name, tap in (("client", client_tap), ("api", api_tap), ("remoting", remoting_tap)):
        assert tap.connections >= 1 and len(tap.seen) > 500, (name, tap.connections)
        assert tap.to_server[:1] == b"\x16" or name == "client", name  # the ClientHello first
        for clear in (*IN_CLEAR, token, status["accessKey"].encode(), b"replica-info"):
            assert clear not in tap.seen, (name, clear)
    # The client port's clear challenge, then TLS records only.
    assert client_tap.to_client[:4] == b"BGH1" and client_tap.to_server[:1] == b"\x16"


def _ha_hello(host: str, context: ssl.SSLContext) -> bytes:
    """The first bytes a master's HA port sends inside a TLS session; b"" when none."""
    try:
        with (
            socket.create_connection((host, HA_PORT), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=host) as sealed,
        ):
            return sealed.recv(4)
    except (ssl.SSLError, ConnectionError):
        return b""


def _assert_ha_is_mutual_tls(rt: StockRuntime, status: dict[str, Any]) -> None:
    host, ca = _master_host(status), Path(status["caFile"])
    tls_dir = rt.runtime.root / "tls"
    # A certificate of the CA: a session, and the HA secret's challenge inside it.
    holder = client_context(ca, cert_file=tls_dir / "server.crt", key_file=tls_dir / "server.key")
    assert _ha_hello(host, holder) == b"BGH1"
    # No certificate: the master ends the handshake (TLS 1.3 tells the client at its read).
    assert _ha_hello(host, client_context(ca)) == b""


def test_the_ha_port_is_mutual_tls(rt: StockRuntime) -> None:
    _assert_ha_is_mutual_tls(rt, rt.wait_healthy())


def test_a_master_sigkill_under_tls_fails_over_with_every_acknowledged_message(
    rt: StockRuntime, tmp_path: Path
) -> None:
    rt.wait_healthy()
    acks = tmp_path / "acks.jsonl"

    def produce(prefix: str, count: int) -> None:
        done = brokergroup(
            "produce", "--topic", "TlsFailover", "--count", str(count), "--size", "300",
            "--batch", "5", "--key-prefix", prefix, "--ack-log", str(acks), "--json",
            env=_env(rt), timeout_s=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]

    produce("before-", 300)
    killed = rt.kill_master()
    after = rt.wait_healthy(min_epoch=killed["masterEpoch"] + 1)
    assert after["master"]["address"] != killed["master"]["address"]
    # The new master replicates to the restarted broker over mutual TLS too.
    _assert_ha_is_mutual_tls(rt, after)
    produce("after-", 50)
    acked = [json.loads(line) for line in acks.read_text().splitlines()]
    assert len(acked) == 350
    read = brokergroup(
        "consume", "--topic", "TlsFailover", "--from-beginning", "--json",
        "--max-messages", "350", env=_env(rt), timeout_s=120,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr[-3000:]
    got = {m["key"]: m for m in _consumed(read.stdout)}
    for ack in acked:
        m = got.get(ack["key"])
        assert m is not None, f"acknowledged {ack['key']} not readable on the new master"
        assert (m["queueId"], m["queueOffset"], m["bodyCrc"]) == (
            ack["queueId"], ack["queueOffset"], ack["bodyCrc"],
        ), ack  # fmt: skip
