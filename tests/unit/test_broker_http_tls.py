"""The broker's HTTP port over TLS (`brokergroup broker --http-tls`, issue 36 item 1;
brokergroup_broker.core.http_status, peer_http, docs/security.md).

A real `StatusServer` on 127.0.2.9 with a certificate of a test CA:
- a client verifying the CA gets `/healthz` open and `/v1/status` with the bearer credential,
  `/metrics` open, inside TLS; the bearer check is unchanged under TLS (401 without it);
- plain HTTP to the port gets no answer (HTTPS only, not a port that serves both);
- a client trusting another CA gets no session;
- a peer broker's read (`peer_json` over a `PeerHttp` with the CA) gets the JSON, the same
  read in plain HTTP gets None;
- the local runtime: `local.tlsHttp` needs local.tls, and adds `--http-tls` to the brokers'
  command lines only (never the controllers').
"""

from __future__ import annotations

import datetime
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from brokergroup_broker.core.http_status import StatusServer, bearer_header
from brokergroup_broker.core.peer_http import PeerHttp, peer_json
from brokergroup_cli.local.config import ConfigError, build_config
from brokergroup_cli.local.plan import Layout
from brokergroup_remoting.certificates import issue, make_ca
from brokergroup_remoting.tls import client_context, server_context

HOST = "127.0.2.9"
TOKEN = "bg1.broker.Qw.YnJva2VyLWE.mac-of-the-group"


class Source:
    def status(self) -> dict[str, Any]:
        return {"role": "MASTER"}

    def readiness(self) -> tuple[bool, list[str]]:
        return True, []

    def consumer_offsets_snapshot(self) -> dict[str, Any]:
        return {"version": 1, "offsets": {}}

    def metadata_snapshot(self) -> dict[str, Any]:
        return {}

    def metrics_text(self) -> bytes:
        return b"brokergroup_broker_role 1\n"


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    now = datetime.datetime.now(datetime.UTC)
    for name in ("ours", "other"):
        ca = make_ca(f"{name}-ca", now=now)
        ca.write(tmp_path / f"{name}-ca.crt", tmp_path / f"{name}-ca.key")
        issue(ca, "broker", [HOST], now=now).write(
            tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
        )
    return {
        "ca": tmp_path / "ours-ca.crt",
        "other_ca": tmp_path / "other-ca.crt",
        "cert": tmp_path / "ours.crt",
        "key": tmp_path / "ours.key",
    }


@pytest.fixture
async def port(pki: dict[str, Path]) -> AsyncIterator[int]:
    server = StatusServer(Source(), token=TOKEN)
    await server.start(HOST, 0, tls=server_context(pki["cert"], pki["key"]))
    assert server._runner is not None
    yield int(server._runner.addresses[0][1])
    await server.stop()


async def _get(url: str, tls: ssl.SSLContext | bool, headers: dict[str, str]) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=tls, timeout=aiohttp.ClientTimeout(total=5)) as r,
    ):
        return r.status, await r.text()


async def test_https_with_the_ca_is_answered_and_the_credential_still_checked(
    port: int, pki: dict[str, Path]
) -> None:
    ca = client_context(pki["ca"])
    base = f"https://{HOST}:{port}"
    assert (await _get(f"{base}/healthz", ca, {}))[0] == 200
    assert (await _get(f"{base}/v1/status", ca, {}))[0] == 401
    status, body = await _get(f"{base}/v1/status", ca, bearer_header(TOKEN))
    assert status == 200 and '"MASTER"' in body
    status, body = await _get(f"{base}/metrics", ca, {})
    assert status == 200 and "brokergroup_broker_role 1" in body


async def test_plain_http_gets_no_answer(port: int) -> None:
    with pytest.raises(aiohttp.ClientError):
        await _get(f"http://{HOST}:{port}/healthz", True, {})


async def test_a_client_trusting_another_ca_gets_no_session(
    port: int, pki: dict[str, Path]
) -> None:
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await _get(f"https://{HOST}:{port}/healthz", client_context(pki["other_ca"]), {})


async def test_a_peer_reads_over_https_and_not_in_plaintext(
    port: int, pki: dict[str, Path]
) -> None:
    client_address = f"{HOST}:{port - 2}"  # the HTTP port is the client port + 2
    tls = client_context(pki["ca"], cert_file=pki["cert"], key_file=pki["key"])
    async with aiohttp.ClientSession(headers=bearer_header(TOKEN)) as session:
        assert await peer_json(PeerHttp(session, tls), client_address, "/v1/status") == {
            "role": "MASTER"
        }
        assert await peer_json(PeerHttp(session), client_address, "/v1/status") is None


def test_the_local_setting_needs_tls_and_reaches_the_brokers_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"local\.tlsHttp needs local\.tls"):
        build_config(tmp_path, 3, ["local.tlsHttp=true"])
    config = build_config(tmp_path, 3, ["local.tls=enforcing", "local.tlsHttp=true"])
    layout = Layout(config.root_dir)
    assert "--http-tls" in layout.tls_argv(config, broker=True)
    assert "--http-tls" not in layout.tls_argv(config, broker=False)
    off = build_config(tmp_path, 3, ["local.tls=enforcing"])
    assert "--http-tls" not in layout.tls_argv(off, broker=True)
