"""HTTPS on the controller's API (issue 36 item 1; `--api-tls`, docs/security.md "TLS"): one
real controller node (`app.serve`, its Raft node, its aiohttp site) on 127.0.0.1 with the test
CA's certificate, and `ControllerClient`s on real sockets.

- a client verifying the node against the CA reads with its bearer credential, with or without
  a certificate of its own (probes and the admin CLI hold none; brokers and controllers
  present theirs); `/healthz` answers over HTTPS;
- a plaintext HTTP client gets no answer; a client trusting another CA refuses the node; a
  client presenting a certificate of another CA is refused by the node;
- `--api-tls` without a CA, or with a certificate that does not load, stops start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import unused_port

from brokergroup_controller.app import serve
from brokergroup_controller.client import ControllerClient, ControllerUnavailable, tls_context
from brokergroup_controller.config import ControllerConfig
from tests.unit.tls_material import Material, make_material

TOKEN = "tls-test-token"


@pytest.fixture
def material(tmp_path: Path) -> Material:
    return make_material(tmp_path, datetime.datetime.now(datetime.UTC))


def _config(tmp_path: Path, m: Material, api_port: int, **changes: object) -> ControllerConfig:
    values: dict[str, object] = {
        "node_id": 1,
        "peers": (f"127.0.0.1:{unused_port()}",),
        "data_dir": str(tmp_path / "data"),
        "bind_address": "127.0.0.1",
        "api_port": api_port,
        "remoting_port": 0,
        "namesrv_port": 0,
        "token": TOKEN,
        "broker_credential_root": "tls-test-broker-credential-root",
        "raft_password": "tls-test-raft-password",
        "raft_fsync": False,
        "tls_cert_file": str(m.cert_file),
        "tls_key_file": str(m.key_file),
        "tls_ca_file": str(m.ca_file),
        "api_tls": True,
    }
    values.update(changes)
    return ControllerConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
async def node(tmp_path: Path, material: Material) -> AsyncIterator[str]:
    """The address of a running single-node controller serving HTTPS."""
    port = unused_port()
    config = _config(tmp_path, material, port)
    config.validate()
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, stop=stop))
    address = f"127.0.0.1:{port}"
    try:
        context = tls_context(str(material.ca_file))
        async with ControllerClient([address], TOKEN, tls=context, request_timeout_s=15) as c:
            await c.request("GET", "/v1/groups")  # up and leading
        yield address
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)


async def _groups(address: str, tls: ssl.SSLContext | None) -> dict[str, object]:
    async with ControllerClient([address], TOKEN, tls=tls, request_timeout_s=1.5) as client:
        return await client.request("GET", "/v1/groups")


async def test_clients_verifying_the_ca_are_answered_with_or_without_a_certificate(
    node: str, material: Material
) -> None:
    m = material
    anonymous = await _groups(node, tls_context(str(m.ca_file)))
    mutual = await _groups(node, tls_context(str(m.ca_file), str(m.cert_file), str(m.key_file)))
    assert anonymous == mutual and anonymous["code"] == "SUCCESS"
    verifying = tls_context(str(m.ca_file))
    assert verifying is not None
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"https://{node}/healthz", ssl=verifying) as answer,
    ):
        assert answer.status == 200


@pytest.mark.parametrize(
    "client", ["plain HTTP", "trusts another CA", "presents another CA's certificate"]
)
async def test_clients_without_the_right_tls_get_no_answer(
    node: str, material: Material, client: str
) -> None:
    m = material
    tls: ssl.SSLContext | None = {
        "plain HTTP": None,
        "trusts another CA": tls_context(str(m.other_ca_file)),
        "presents another CA's certificate": tls_context(
            str(m.ca_file), str(m.other_cert_file), str(m.other_key_file)
        ),
    }[client]
    with pytest.raises(ControllerUnavailable) as refused:
        await _groups(node, tls)
    if client == "trusts another CA":
        assert "CERTIFICATE_VERIFY_FAILED" in " ".join(refused.value.attempts)
    # The node still answers the right client afterwards.
    assert (await _groups(node, tls_context(str(m.ca_file))))["code"] == "SUCCESS"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        (
            {"tls_ca_file": None},
            "--api-tls needs --tls-cert-file, --tls-key-file and --tls-ca-file",
        ),
        ({"tls_cert_file": "/nonexistent.crt"}, "cannot load the API's TLS files"),
    ],
)
def test_an_api_tls_setting_that_cannot_work_stops_start_up(
    tmp_path: Path, material: Material, changes: dict[str, object], reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        _config(tmp_path, material, unused_port(), **changes).validate()
