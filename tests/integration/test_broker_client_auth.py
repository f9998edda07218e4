"""A credential on every broker port, on a real broker process (DESIGN.md §11; docs/security.md
"Client protocol", "Broker HTTP"; docs/protocol.md "Authentication").

How: one broker with the group's RocketMQ pairs (`--remoting-key-file`,
`--remoting-client-key-file`), as the local runtime and the operator start it. A client
without the pair opens raw sockets and sends what a producer and a consumer would —
SEND_MESSAGES, PULL_MESSAGES and COMMIT_CONSUMER_OFFSET frames — before and instead of
a HELLO: the broker must answer none of them and close. Then `brokergroup produce` and
`consume` with the client pair's key file do the real work, and the read-back shows only
their messages and the consumer offset only they committed: nothing the unauthenticated
client sent took effect. The same commands without a key file are told at once that the
credential is missing (not "no master" after the retry budget). The HTTP port answers its
probes to anyone and its status and consumer offsets to the broker credential only.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from brokergroup_broker.protocol.codec import FrameDecoder, encode_request
from brokergroup_broker.protocol.messages import (
    CommitConsumerOffsetRequest,
    ProduceMessage,
    PullMessagesRequest,
    SendMessagesRequest,
)
from brokergroup_controller.credentials import Role, derive_credential
from tests.integration.broker_harness import BROKER_NAME, CLUSTER, BrokerGroupHarness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BLOCK = 41
TOPIC = "authed"
GROUP = "g-auth"


def _unauthenticated_exchange(address: str, payload: bytes) -> tuple[bytes, list[object]]:
    """Send `payload` right after connecting, read until the broker closes: (every byte
    received, the response frames among them if any decode)."""
    host, port = address.rsplit(":", 1)
    received = b""
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(payload)
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):  # TimeoutError: left open
                break
            if not chunk:
                break
            received += chunk
    frames: list[object] = []
    decoder = FrameDecoder()
    # A broker that serves without a handshake answers with frames from byte 0.
    try:
        decoder.feed(received)
        frames.extend(decoder.frames())
    except Exception:  # not frames: the handshake's challenge and refusal
        pass
    return received, frames


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def _http_json(url: str, token: str) -> object:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def _http(url: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_an_unauthenticated_client_cannot_produce_consume_or_commit(tmp_path: Path) -> None:
    with BrokerGroupHarness(tmp_path, block=BLOCK, replicas=1, client_auth=True) as group:
        group.start_all()
        master = group.wait_for_master()
        broker = group.brokers[master]

        # ---- without the pair: frames sent instead of a HELLO are never served.
        payload = b"".join(
            [
                encode_request(1, SendMessagesRequest(TOPIC, 0, (ProduceMessage(TOPIC, b"x"),))),
                encode_request(2, PullMessagesRequest(TOPIC, 0, 0, 32)),
                encode_request(3, CommitConsumerOffsetRequest(GROUP, TOPIC, 0, 1000)),
            ]
        )
        received, frames = _unauthenticated_exchange(broker.address, payload)
        assert frames == [], f"the broker served an unauthenticated client: {frames}"
        assert received.startswith(b"BGH1") and b"no credential" in received, received
        offsets = _http_json(f"{broker.http}/v1/consumer-offsets", group.broker_credential)
        assert GROUP not in json.dumps(offsets)  # the intruder's commit was not taken

        # ---- the CLI with the group's client pair works.
        client_credential = tmp_path / "client-credential"
        client_credential.write_text(
            derive_credential(
                group.controllers.broker_credential_root, Role.CLIENT, CLUSTER, BROKER_NAME
            )
        )
        env = {**os.environ, "BROKERGROUP_LOCAL_DIR": str(tmp_path / "no-runtime")}
        env.pop("BROKERGROUP_KEY_FILE", None)
        where = [
            "--controller-addresses", ",".join(group.controllers.api_addresses),
            "--controller-token-file", str(client_credential),
            "--cluster-name", CLUSTER, "--broker-name", BROKER_NAME,
        ]  # fmt: skip
        key = ["--key-file", str(group.client_key_file)]
        produced = _cli("produce", "--topic", TOPIC, "--count", "10", "--queue-id", "0",
                        "--json", *where, *key, env=env)  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        assert json.loads(produced.stdout)["acked"] == 10

        consumed = _cli("consume", "--topic", TOPIC, "--from-beginning", "--group", GROUP,
                        "--idle-timeout-ms", "1000", "--json", *where, *key, env=env)  # fmt: skip
        assert consumed.returncode == 0, consumed.stderr
        lines = [json.loads(line) for line in consumed.stdout.splitlines()]
        # Only the CLI's ten: the unauthenticated send stored nothing.
        assert len(lines) == 10 and all(line["body"] != "x" for line in lines)
        # The group's offset is the one the CLI committed: consuming again finds nothing.
        again = _cli("consume", "--topic", TOPIC, "--group", GROUP, "--idle-timeout-ms",
                     "500", "--json", *where, *key, env=env)  # fmt: skip
        assert again.returncode == 0 and again.stdout == "", again.stderr
        assert "consumed 0 messages" in again.stderr

        # ---- the same commands without a key file are told so, not "no master".
        refused = _cli("produce", "--topic", TOPIC, "--count", "3", *where, env=env)
        assert refused.returncode == 1
        assert "refused: " in refused.stderr and "no credential" in refused.stderr
        assert "no master" not in refused.stderr
        refused = _cli("consume", "--topic", TOPIC, "--group", GROUP, *where, env=env)
        assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr

        # ---- HTTP: probes open, status and consumer offsets for the broker credential.
        assert _http(f"{broker.http}/healthz") == 200
        assert _http(f"{broker.http}/readyz") == 200
        for path in ("/v1/status", "/v1/consumer-offsets"):
            assert _http(broker.http + path) == 401
            assert _http(broker.http + path, client_credential.read_text()) == 401
            assert _http(broker.http + path, group.broker_credential) == 200
