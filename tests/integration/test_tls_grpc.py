"""TLS on the gRPC endpoint of `local up --set local.tls=enforcing` (issue 36 item 1).

One runtime for the module (three controllers, three brokers, TLS enforcing). The broker's
gRPC port (client port + 4) ends TLS in front of grpcio (grpc_front/tls_front.py); the
group's stable gRPC endpoint (`local status --json` grpcEndpoint) passes the TLS bytes
through to the master, whose certificate names that address too.

- The official Python SDK (rocketmq-python-client, `tls_enable=True`, trusting the
  runtime's CA through grpc's GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) sends messages with a
  random marker in their bodies and receives them all, whole, through a socket tap
  (tests/unit/socket_tap.py) in front of the endpoint: the tap saw TLS records (the
  ClientHello first) and never the marker, the keys or the AccessKey in clear.
- A plaintext gRPC channel (what the SDK's default `tls_enable=False` opens) is refused,
  at the stable endpoint and at the master's own gRPC port; a TLS channel verifying the port
  against the CA is answered by the service on both.
- A TLS channel that trusts another CA gets no session.
- The Java SDK (rocketmq-client-java, `enableSsl(true)`: tools/rocketmq/GrpcSdkClient.java
  ssl=true) sends and receives every message (skipped, saying why, without Java or Maven).

A certificate rotation under load (issue 36 "Must show"): while `brokergroup produce` sends
over TLS, the runtime's server certificate and key files are replaced by a new certificate
of the same CA; within seconds, with no process restarted, a new connection to the master's
remoting port, its gRPC port and a controller's API is handed the new certificate (tls.py
reload_changed); the producer's established connections go on; every acknowledged message
is read back whole, and the masterEpoch and master are those of before (no failover).

TLS floods (issue 36 item 6): for ATTACK_SECONDS, half ClientHellos (a handshake record
header, then silence), slow handshakes (a byte every half second) and plaintext HTTP/2
connections are thrown at the master's gRPC, remoting and client ports and a controller's
name server and API; meanwhile a legit TLS client is answered every round (a verified gRPC
call through the stable endpoint, a TLS session on the master's remoting port), and after
it the master and masterEpoch are those of before (no election).

Permissive (TLS and plaintext on one port) is shown on a real front and grpcio server in
tests/unit/test_grpc_tls_front.py. On the code before this front end the broker's gRPC
port was plaintext only under every mode: the SDK's TLS channel got no session (the runtime
fixture's TLS send failed) and the plaintext channel was served.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as service_pb
from rocketmq.grpc_protocol import service_pb2_grpc as service_grpc

from brokergroup_remoting.certificates import Issued, issue, names_of
from brokergroup_remoting.tls import client_context
from tests.integration.local_harness import Runtime, brokergroup, local_runtime, wait_for
from tests.unit.socket_tap import SocketTap

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

GRPC_PORT = 20883
#: local_harness's client port 20911 + 4 (gRPC) and + 3 (remoting); its controllers' API.
BROKER_GRPC_PORT = 20915
BROKER_REMOTING_PORT = 20914
API_PORT = 19878
NAMESRV_PORT = 19876
CLIENT_PORT = 20911
#: Sent while the certificate files are replaced (≈ 30 s on a loaded 2-core machine).
ROTATION_MESSAGES = 20_000
ATTACK_SECONDS = float(os.environ.get("BROKERGROUP_ATTACK_SECONDS", "15"))
REPO = Path(__file__).resolve().parents[2]

#: The SDK program: send COUNT messages whose bodies carry MARKER, receive them, print JSON.
SDK_PROGRAM = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer
from rocketmq import SimpleConsumer
endpoint, ak, sk, topic, marker, count = sys.argv[1:7]
config = ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=10)
producer = Producer(config, (topic,), tls_enable=True)
producer.startup()
sent = []
try:
    for i in range(int(count)):
        m = Message()
        m.topic = topic
        m.body = f"{marker}-{i}".encode()
        m.keys = f"{marker}-key-{i}"
        sent.append(producer.send(m).message_id)
finally:
    producer.shutdown()
consumer = SimpleConsumer(config, topic + "Group", {topic: FilterExpression("*")},
                          await_duration=2, tls_enable=True)
consumer.startup()
got = []
deadline = time.monotonic() + 120
try:
    while len(got) < int(count) and time.monotonic() < deadline:
        try:
            batch = consumer.receive(32, 15) or []
        except Exception:  # a master change under load: the next receive goes on
            time.sleep(0.5)
            continue
        for m in batch:
            consumer.ack(m)
            got.append({"id": m.message_id, "body": m.body.decode(), "keys": list(m.keys)})
finally:
    consumer.shutdown()
print(json.dumps({"sent": sent, "got": got}))
"""


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    root = tmp_path_factory.mktemp("tls-grpc")
    with local_runtime(root, ("local.tls=enforcing", f"local.proxyGrpcPort={GRPC_PORT}")) as r:
        result = r.up(brokers=3)
        assert result.returncode == 0, result.stderr + r.logs()
        wait_for("a master", lambda: r.status() if r.status().get("master") else None, 90, r)
        yield r


@pytest.fixture(scope="module")
def status(rt: Runtime) -> dict[str, Any]:
    found = rt.status()
    assert found["tlsMode"] == "enforcing" and found["grpcEndpoint"].endswith(f":{GRPC_PORT}")
    return found


def _query_route(
    address: str, credentials: grpc.ChannelCredentials | None
) -> service_pb.QueryRouteResponse:
    """An unsigned QueryRoute: the service answers it (UNAUTHORIZED in its status) when the
    channel gets through; the channel's own error when it does not."""
    options = (("grpc.ssl_target_name_override", address.rsplit(":", 1)[0]),)
    if credentials is None:
        channel = grpc.insecure_channel(address)
    else:
        channel = grpc.secure_channel(address, credentials, options)
    with channel:
        stub = service_grpc.MessagingServiceStub(channel)
        request = service_pb.QueryRouteRequest(topic=pb.Resource(name="T"))
        answer: service_pb.QueryRouteResponse = stub.QueryRoute(request, timeout=10)
        return answer


def _master_grpc(status: dict[str, Any]) -> str:
    return f"{status['master']['address'].rsplit(':', 1)[0]}:{BROKER_GRPC_PORT}"


def test_plaintext_grpc_is_refused_and_tls_answered(status: dict[str, Any]) -> None:
    ca = Path(status["caFile"]).read_bytes()
    for address in (status["grpcEndpoint"], _master_grpc(status)):
        with pytest.raises(grpc.RpcError) as refused:
            _query_route(address, None)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, address
        answer = _query_route(address, grpc.ssl_channel_credentials(root_certificates=ca))
        assert answer.status.code == 40100, (address, answer)  # reached the service


def test_a_client_trusting_another_ca_gets_no_session(
    status: dict[str, Any], tmp_path: Path
) -> None:
    import datetime

    from brokergroup_remoting.certificates import make_ca

    other = make_ca("someone else", now=datetime.datetime.now(datetime.UTC))
    with pytest.raises(grpc.RpcError) as refused:
        _query_route(
            status["grpcEndpoint"], grpc.ssl_channel_credentials(root_certificates=other.cert_pem)
        )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_the_python_sdk_over_tls_with_no_body_in_clear(status: dict[str, Any]) -> None:
    host, port = status["grpcEndpoint"].rsplit(":", 1)
    tap = SocketTap((host, int(port)))
    bound = await tap.start()
    marker = "MARK" + secrets.token_hex(8)
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": status["caFile"]}
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SDK_PROGRAM, f"{bound[0]}:{bound[1]}", status["accessKey"],
            status["secretKey"], "TlsGrpc", marker, "20", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        await tap.close()
    assert proc.returncode == 0, err.decode()[-3000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert len(result["sent"]) == 20
    assert sorted((m["id"], m["body"]) for m in result["got"]) == sorted(
        (mid, f"{marker}-{i}") for i, mid in enumerate(result["sent"])
    )
    assert tap.connections >= 1 and len(tap.seen) > 1000
    assert tap.to_server[:1] == b"\x16"  # a ClientHello first
    for clear in (marker.encode(), status["accessKey"].encode(), b"TlsGrpc"):
        assert clear not in tap.seen, clear


@pytest.fixture(scope="module")
def java_sdk() -> Path:
    try:
        done = subprocess.run([str(REPO / "tools/rocketmq/fetch_sdk.sh")], capture_output=True,
                              text=True, timeout=600, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"the Java SDK could not be fetched: {exc}")
    if done.returncode != 0:
        pytest.skip(f"the Java SDK could not be fetched: {done.stderr.strip()[-300:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _java(home: Path, status: dict[str, Any], **options: str) -> list[dict[str, Any]]:
    args = {"endpoint": status["grpcEndpoint"], "ak": status["accessKey"],
            "sk": status["secretKey"], "ssl": "true", **options}  # fmt: skip
    done = subprocess.run(
        ["java", "-cp", f"{home}/classes:{home}/lib/*", "GrpcSdkClient",
         *(f"{k}={v}" for k, v in args.items())],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert lines and "summary" in lines[-1], done.stdout[-2000:]
    return lines[:-1]


def test_the_java_sdk_sends_and_receives_over_tls(status: dict[str, Any], java_sdk: Path) -> None:
    sent = _java(java_sdk, status, mode="send", topic="TlsGrpcJava", count="10", run="tj")
    got = _java(java_sdk, status, mode="receive", topic="TlsGrpcJava", group="TlsJavaGroup",
                count="10")  # fmt: skip
    key = lambda m: (m["messageId"], m["body"])  # noqa: E731
    assert sorted(map(key, got)) == sorted(map(key, sent))
    assert len(sent) == 10


def _serial_at(host: str, port: int, ca_file: Path) -> int:
    """The serial number of the certificate a new TLS connection to host:port is handed."""
    context = client_context(ca_file)
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as sealed,
    ):
        der = sealed.getpeercert(binary_form=True)
    assert der is not None
    from cryptography import x509

    return int(x509.load_der_x509_certificate(der).serial_number)


def _acked_at_least(acks: Path, count: int) -> dict[str, Any] | None:
    lines = len(acks.read_text().splitlines()) if acks.exists() else 0
    return {"acked": lines} if lines >= count else None


def _env(rt: Runtime) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "BROKERGROUP_CA_FILE"}
    env["BROKERGROUP_LOCAL_DIR"] = str(rt.root)
    hosts = [c["address"].rsplit(":", 1)[0] for c in rt.status()["controllers"]]
    env["BROKERGROUP_CONTROLLER_ADDRESSES"] = ",".join(f"{h}:{API_PORT}" for h in hosts)
    return env


def test_a_certificate_rotation_under_load_loses_nothing_and_elects_no_one(
    rt: Runtime, tmp_path: Path
) -> None:
    before = rt.status()
    epoch, master = before["masterEpoch"], before["master"]["address"]
    host = master.rsplit(":", 1)[0]
    controller_host = before["controllers"][0]["address"].rsplit(":", 1)[0]
    tls_dir = rt.root / "tls"
    ca_file = tls_dir / "ca.crt"
    ports = ((host, BROKER_REMOTING_PORT), (host, BROKER_GRPC_PORT), (controller_host, API_PORT))
    old = {p: _serial_at(*p, ca_file) for p in ports}
    acks = tmp_path / "acks.jsonl"
    producer = subprocess.Popen(
        [sys.executable, "-m", "brokergroup_cli.main", "produce", "--topic", "TlsRotate",
         "--count", str(ROTATION_MESSAGES), "--size", "200", "--batch", "5", "--key-prefix", "rot-",
         "--ack-log", str(acks), "--json"],
        env=_env(rt), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:

        def started() -> dict[str, Any] | None:
            if producer.poll() not in (None, 0):
                pytest.fail(f"produce failed: {producer.communicate()[1][-3000:]}")
            return _acked_at_least(acks, 50)

        wait_for("the producer's first acknowledgements", started, 120, rt)
        ca = Issued(ca_file.read_bytes(), (tls_dir / "ca.key").read_bytes())
        names = names_of((tls_dir / "server.crt").read_bytes())
        renewed = issue(ca, "renewed", names, now=datetime.datetime.now(datetime.UTC))
        renewed.write(tls_dir / "server.crt", tls_dir / "server.key")
        assert producer.poll() is None, "the producer finished before the rotation: no load"
        new_serial = renewed.certificate.serial_number
        deadline = time.monotonic() + 60
        seen = dict(old)
        while time.monotonic() < deadline and any(v != new_serial for v in seen.values()):
            time.sleep(0.5)
            seen = {p: _serial_at(*p, ca_file) for p in ports}
        assert all(v == new_serial for v in seen.values()), (seen, new_serial, old)
        out, err = producer.communicate(timeout=300)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    assert producer.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["acked"] == ROTATION_MESSAGES and summary["failed"] == 0, summary
    after = rt.status()
    assert (after["masterEpoch"], after["master"]["address"]) == (epoch, master)
    acked = [json.loads(line) for line in acks.read_text().splitlines()]
    read = brokergroup(
        "consume", "--topic", "TlsRotate", "--from-beginning", "--json",
        "--max-messages", str(len(acked)), env=_env(rt), timeout_s=180,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr[-3000:]
    got = {}
    for line in read.stdout.splitlines():
        if line.startswith("{"):
            m = json.loads(line)
            got[m["key"]] = m
    for ack in acked:
        m = got.get(ack["key"])
        assert m is not None, f"acknowledged {ack['key']} not read back"
        assert (m["queueId"], m["queueOffset"], m["bodyCrc"]) == (
            ack["queueId"], ack["queueOffset"], ack["bodyCrc"],
        ), ack  # fmt: skip


def _attack(targets: list[tuple[str, int]], stop: threading.Event) -> dict[str, int]:
    """Half ClientHellos and slow handshakes held open, plaintext HTTP/2 prefaces, until
    `stop`; counts of what was thrown."""
    held: list[socket.socket] = []
    thrown = {"half_hello": 0, "slow": 0, "plain": 0}
    try:
        for host, port in targets:
            for i in range(120):
                with contextlib.suppress(OSError):
                    sock = socket.create_connection((host, port), timeout=2)
                    sock.setblocking(False)
                    with contextlib.suppress(OSError):
                        sock.send(b"\x16\x03\x01\x02\x00" if i % 2 else b"\x16")
                    held.append(sock)
                    thrown["half_hello" if i % 2 else "slow"] += 1
        while not stop.is_set():
            for sock in held[1::2]:  # the slow ones: one more byte
                with contextlib.suppress(OSError):
                    sock.send(b"\x03")
            for host, port in targets:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection((host, port), timeout=2) as plain,
                ):
                    plain.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                    thrown["plain"] += 1
            stop.wait(0.5)
    finally:
        for sock in held:
            sock.close()
    return thrown


def test_tls_handshake_floods_leave_the_group_serving(rt: Runtime) -> None:
    before = rt.status()
    epoch, master = before["masterEpoch"], before["master"]["address"]
    host = master.rsplit(":", 1)[0]
    controller_host = before["controllers"][0]["address"].rsplit(":", 1)[0]
    ca_file = Path(before["caFile"])
    ca = ca_file.read_bytes()
    targets = [
        (host, BROKER_GRPC_PORT), (host, BROKER_REMOTING_PORT), (host, CLIENT_PORT),
        (controller_host, NAMESRV_PORT), (controller_host, API_PORT),
    ]  # fmt: skip
    stop = threading.Event()
    thrown: dict[str, int] = {}
    attacker = threading.Thread(target=lambda: thrown.update(_attack(targets, stop)))
    attacker.start()
    served = rounds = 0
    try:
        deadline = time.monotonic() + ATTACK_SECONDS
        while time.monotonic() < deadline:
            rounds += 1
            answer = _query_route(
                before["grpcEndpoint"], grpc.ssl_channel_credentials(root_certificates=ca)
            )
            _serial_at(host, BROKER_REMOTING_PORT, ca_file)
            served += answer.status.code == 40100
            time.sleep(0.5)
    finally:
        stop.set()
        attacker.join(60)
    assert rounds >= 3 and served == rounds, (served, rounds)
    assert thrown["half_hello"] >= 100 and thrown["plain"] >= 10, thrown
    after = rt.status()
    assert (after["masterEpoch"], after["master"]["address"]) == (epoch, master)
