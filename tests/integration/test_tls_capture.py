"""A capture of the ports the socket taps cannot sit in front of (issue 36 "Must show": a
capture of every port's traffic during a produce/consume run shows no message body in
clear). test_local_tls.py and test_tls_grpc.py tap the client, remoting, API and gRPC ports
with a relay; the links here are opened by the runtime's own processes to each other, so
this module captures the loopback interface itself (loopback_capture.py: AF_PACKET, needs
root; skips saying why without it).

One `local up --set local.tls=enforcing --set local.tlsHttp=true` runtime (three
controllers, three brokers; the controllers' RocketMQ remoting port opened with the release
pair, as `--engine rocketmq` opens it). During the capture, with a random marker:
`brokergroup produce` sends COUNT messages (the marker in every key and body, over TLS to
the master) to a topic named after it and `brokergroup consume` reads them all back; a
signed route query for the marker topic goes to a name server and a signed
CONTROLLER_GET_REPLICA_INFO for a marker broker name to a controller's remoting port, both
over TLS; a stock RocketMQ 5.3.1 client with `-Dtls.enable=true` routes through the name
servers and sends to the marker topic. Then, per port:

- **name server** (every controller's): the route queries (ours, the stock client's) and
  the brokers' registrations (which carry the marker topic) crossed it; the marker and the
  client AccessKey never appear in clear;
- **controller remoting port** (9879): the request was answered inside TLS; the marker
  never appears in clear. Its real users are stock brokers (`local up --engine rocketmq`),
  which have no TLS in the local runtime yet (config refuses local.tls with that engine):
  that test skips and says so;
- **HA replication** (client port + 1): at least the bodies' bytes crossed it twice (two
  slaves; allAckInSyncStateSet made every send wait for them), and no marker in clear;
- **broker HTTP port** (client port + 2, `--http-tls`): the supervisor's prober and the
  peers' reads crossed it; no `/v1/status` and no broker credential in clear; a client
  verifying the CA is answered, plain HTTP is not, and the prober `local status` uses reads
  every broker over HTTPS.

Each check can fail: `BROKERGROUP_CAPTURE_PLAINTEXT=1` runs the same module on a runtime
without TLS (and clients without it), where every "not in clear" assertion fails — the
negative control, run by hand (measured: the marker in 11 of 22 name-server streams, 1 of
14 controller-remoting streams, 2 of 4 HA streams; `/v1/status` in 16 of 32 HTTP streams).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import pytest

from brokergroup_cli.local.config import LocalConfig
from brokergroup_cli.local.probe import Prober
from brokergroup_cli.local.state import RuntimeState
from brokergroup_remoting import RequestCode
from brokergroup_remoting.command import request
from brokergroup_remoting.keys import read_key_file
from brokergroup_remoting.net import RemotingClient
from brokergroup_remoting.tls import client_context
from tests.integration.local_harness import brokergroup, wait_for
from tests.integration.loopback_capture import LoopbackCapture, capture_unavailable
from tests.integration.stock_client_harness import StockRuntime, stock_runtime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PLAINTEXT = os.environ.get("BROKERGROUP_CAPTURE_PLAINTEXT") == "1"
#: local_harness's ports: name server, the controllers' default remoting port, the broker's
#: client port + 1 (HA) and + 2 (HTTP).
NAMESRV_PORT, CONTROLLER_REMOTING_PORT, HA_PORT, HTTP_PORT = 19876, 9879, 20912, 20913
API_PORT = 19878
COUNT, SIZE = 200, 1024
#: Addresses of this module's own (the other ports stay local_harness's).
HOSTS = (
    "local.controllerHosts=127.0.1.171,127.0.1.172,127.0.1.173",
    "local.brokerFirstHost=127.0.1.180",
    "local.brokerLastHost=127.0.1.189",
    "local.masterEndpointHost=127.0.1.170",
    # Not the default 8081/8080: a stock proxy elsewhere on this machine may hold *:8081.
    "local.proxyGrpcPort=20885",
    "local.proxyRemotingPort=20886",
)
TLS = () if PLAINTEXT else ("local.tls=enforcing", "local.tlsHttp=true")


@dataclass
class Captured:
    rt: StockRuntime
    status: dict[str, Any]
    capture: LoopbackCapture
    marker: bytes
    produced: dict[str, Any]
    consumed: list[dict[str, Any]]
    stock_sent: list[str]
    remoting_answers: list[int]


def _env(rt: StockRuntime) -> dict[str, str]:
    """`brokergroup` pointed at this runtime: its directory (credentials, key pair, and the
    CA when TLS is on) and its controllers."""
    env = {k: v for k, v in os.environ.items() if k != "BROKERGROUP_CA_FILE"}
    env["BROKERGROUP_LOCAL_DIR"] = str(rt.runtime.root)
    hosts = [c["address"].rsplit(":", 1)[0] for c in rt.status()["controllers"]]
    env["BROKERGROUP_CONTROLLER_ADDRESSES"] = ",".join(f"{h}:{API_PORT}" for h in hosts)
    return env


def _brokergroup(rt: StockRuntime, *args: str) -> str:
    done = brokergroup(*args, timeout_s=300, env=_env(rt))
    assert done.returncode == 0, f"brokergroup {args}: {done.stderr[-3000:]}"
    return done.stdout


async def _remoting_requests(rt: StockRuntime, marker: str) -> list[int]:
    """Signed requests carrying the marker, over TLS (unless PLAINTEXT): a route query for
    the marker topic to a name server (the client pair, as a stock client asks) and a
    CONTROLLER_GET_REPLICA_INFO for a marker broker name to a controller's remoting port
    (the release pair it was opened with). Their answers' codes."""
    root, status = rt.runtime.root, rt.status()
    host = status["controllers"][0]["address"].rsplit(":", 1)[0]
    calls = (
        (NAMESRV_PORT, "client-keys.json", RequestCode.GET_ROUTEINFO_BY_TOPIC, "topic"),
        (CONTROLLER_REMOTING_PORT, "namesrv-keys.json", RequestCode.CONTROLLER_GET_REPLICA_INFO,
         "brokerName"),
    )  # fmt: skip
    codes = []
    for port, keys, code, name in calls:
        client = await RemotingClient.connect(
            f"{host}:{port}",
            credentials=read_key_file(str(root / keys)),
            tls=None if PLAINTEXT else client_context(root / "tls" / "ca.crt"),
        )
        try:
            answer = await client.invoke(request(code, 0, {name: f"Cap{marker}"}), timeout_s=30)
        finally:
            await client.close()
        codes.append(answer.code)
    return codes


def _stock_send(rt: StockRuntime, topic: str, marker: str) -> list[str]:
    """A stock 5.3.1 client (`-Dtls.enable=true` unless PLAINTEXT) routes through the name
    servers and sends a few messages: their statuses. Its default 3 s send timeout can run
    out on a loaded machine; the route query it made first still crossed the name server,
    so a timeout is recorded, not failed on (the sends are checked by test_local_tls)."""
    client = rt.client if PLAINTEXT else replace(rt.client, jvm_options=("-Dtls.enable=true",))
    try:
        lines = client.run("send", kind="sync", topic=topic, count=5, run=marker, timeout_s=120)
    except RuntimeError as exc:
        return [f"failed: {str(exc).splitlines()[-1][:200]}"]
    return [str(x["status"]) for x in lines if "summary" not in x]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Captured]:
    reason = capture_unavailable()
    if reason is not None:
        pytest.skip(reason)
    marker = f"M{secrets.token_hex(8)}"
    topic = f"Cap{marker}"
    root = tmp_path_factory.mktemp("capture")
    # The built-in engine's runtime leaves the controllers' remoting port closed (only stock
    # brokers use it): open it with the release pair, the file `up` writes before it starts
    # the controllers, as `--engine rocketmq` does (rocketmq_engine.controller_args).
    remoting = f"controller.remotingCredentialsFile={root / 'local' / 'namesrv-keys.json'}"
    with stock_runtime(root, (*HOSTS, *TLS, remoting)) as rt:
        status = rt.wait_healthy()
        capture = LoopbackCapture(
            frozenset({NAMESRV_PORT, CONTROLLER_REMOTING_PORT, HA_PORT, HTTP_PORT})
        )
        capture.start()
        try:
            produced = json.loads(_brokergroup(
                rt, "produce", "--topic", topic, "--count", str(COUNT), "--size", str(SIZE),
                "--batch", "8", "--key-prefix", f"{marker}-", "--json",
            ))  # fmt: skip
            consumed = [
                json.loads(line)
                for line in _brokergroup(
                    rt, "consume", "--topic", topic, "--from-beginning", "--json",
                    "--max-messages", str(COUNT),
                ).splitlines()
                if line.startswith("{")
            ]  # fmt: skip
            with ThreadPoolExecutor(1) as pool:  # its own loop, whoever runs this fixture
                codes = pool.submit(asyncio.run, _remoting_requests(rt, marker)).result()
            stock_sent = _stock_send(rt, topic, marker)

            # The brokers' HTTP ports are read by the supervisor every poll (300 ms here)
            # and by the peers every second: wait until the capture holds some of it.
            def http_seen() -> dict[str, Any] | None:
                seen = sum(map(len, capture.of_port(HTTP_PORT)))
                return {"bytes": seen} if seen > 20_000 else None

            wait_for("captured HTTP traffic", http_seen, 60, rt.runtime)
        finally:
            capture.stop()
        yield Captured(rt, status, capture, marker.encode(), produced, consumed, stock_sent, codes)


def _assert_not_in_clear(streams: list[bytes], *secrets_: bytes, at_least: int) -> None:
    total = sum(map(len, streams))
    assert total >= at_least, f"only {total} bytes captured in {len(streams)} streams"
    for secret in secrets_:
        found = [i for i, data in enumerate(streams) if secret in data]
        assert not found, f"{secret!r} in clear in {len(found)} of {len(streams)} streams"


def test_every_message_was_acknowledged_and_read_back_whole(run: Captured) -> None:
    assert run.produced["acked"] == COUNT and run.produced["failed"] == 0, run.produced
    keys = sorted(m["key"] for m in run.consumed)
    assert keys == sorted(f"{run.marker.decode()}-{i}" for i in range(COUNT))
    assert all(m["body"].startswith(m["key"] + " ") for m in run.consumed)


def test_the_capture_dropped_nothing(run: Captured) -> None:
    assert run.capture.drops == 0


def test_the_name_server_carries_no_marker_in_clear(run: Captured) -> None:
    assert run.remoting_answers[0] is not None  # the route query was answered
    print("stock client through the name servers:", run.stock_sent)
    controllers = [c["address"].rsplit(":", 1)[0] for c in run.status["controllers"]]
    streams = run.capture.of_port(NAMESRV_PORT, controllers)
    access_key = run.status["accessKey"].encode()
    _assert_not_in_clear(streams, run.marker, access_key, at_least=2_000)


def test_the_controller_remoting_port_carries_no_marker_in_clear(run: Captured) -> None:
    assert run.remoting_answers[1] is not None
    streams = run.capture.of_port(CONTROLLER_REMOTING_PORT)
    _assert_not_in_clear(streams, run.marker, at_least=500)


def test_stock_brokers_on_the_controller_remoting_port() -> None:
    pytest.skip(
        "stock brokers (local up --engine rocketmq) are the controller remoting port's real "
        "users, and that engine has no TLS in the local runtime yet (LocalConfig refuses "
        "local.tls with engine rocketmq): the port's TLS is checked above with a signed "
        "request of our own"
    )


def test_ha_replication_carries_no_body_in_clear(run: Captured) -> None:
    brokers = [b["address"].rsplit(":", 1)[0] for b in run.rt.status()["brokers"]]
    streams = run.capture.of_port(HA_PORT, brokers)
    # Two slaves each received every body (allAckInSyncStateSet waited for both).
    _assert_not_in_clear(streams, run.marker, at_least=2 * COUNT * SIZE)


def test_the_broker_http_port_carries_no_path_or_credential_in_clear(run: Captured) -> None:
    credential = (run.rt.runtime.root / "broker-credential").read_text().strip().encode()
    streams = run.capture.of_port(HTTP_PORT)
    _assert_not_in_clear(streams, b"/v1/status", credential, at_least=20_000)


async def test_the_broker_http_port_answers_https_and_not_http(run: Captured) -> None:
    if PLAINTEXT:
        pytest.skip("the runtime serves plain HTTP in the negative control")
    root = run.rt.runtime.root
    ca = client_context(root / "tls" / "ca.crt")
    host = run.rt.status()["master"]["address"].rsplit(":", 1)[0]
    with urllib.request.urlopen(f"https://{host}:{HTTP_PORT}/healthz", context=ca) as r:
        assert json.loads(r.read()) == {"status": "ok"}
    with pytest.raises(OSError):  # a TLS port reads an HTTP request line as garbage
        urllib.request.urlopen(f"http://{host}:{HTTP_PORT}/healthz", timeout=5).read()
    # The supervisor's prober (the same one `local status` uses) reads every broker over it.
    config = LocalConfig.from_json(json.loads((root / "config.json").read_text()))
    state = RuntimeState.from_json(json.loads((root / "state.json").read_text()))
    token = (root / "broker-credential").read_text().strip()
    async with aiohttp.ClientSession() as session:
        prober = Prober(config, session, None, broker_token=token, broker_tls=ca)
        answers = [await prober.broker_status(b) for b in state.brokers]
    assert all(a is not None and a.get("brokerId") for a in answers), answers
