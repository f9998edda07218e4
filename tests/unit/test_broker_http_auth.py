"""The broker's HTTP port asks a credential of everything but its probes (DESIGN.md §11,
brokergroup_broker.core.http_status, docs/security.md).

A real `StatusServer` on 127.0.2.8 with a scripted `StatusSource`: `/healthz` and `/readyz`
answer anyone (the kubelet probes them); `/v1/status` and `/v1/consumer-offsets` answer
401 without a credential, with a wrong one and with another scheme, and 200 with the
group's broker credential as a bearer token; the source is not asked for a refused read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from brokergroup_broker.core.http_status import StatusServer, bearer_header

HOST = "127.0.2.8"
TOKEN = "bg1.broker.Qw.YnJva2VyLWE.mac-of-the-group"


class Source:
    def __init__(self) -> None:
        self.reads: list[str] = []

    def status(self) -> dict[str, Any]:
        self.reads.append("status")
        return {"role": "MASTER"}

    def readiness(self) -> tuple[bool, list[str]]:
        return True, []

    def consumer_offsets_snapshot(self) -> dict[str, Any]:
        self.reads.append("offsets")
        return {"version": 1, "offsets": {}}


@pytest.fixture
async def port() -> AsyncIterator[tuple[str, Source]]:
    source = Source()
    server = StatusServer(source, token=TOKEN)
    await server.start(HOST, 0)
    assert server._runner is not None
    site_port = server._runner.addresses[0][1]
    yield f"http://{HOST}:{site_port}", source
    await server.stop()


async def _get(url: str, headers: dict[str, str]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
        return r.status, await r.json(content_type=None)


async def test_probes_are_open(port: tuple[str, Source]) -> None:
    base, _ = port
    assert (await _get(f"{base}/healthz", {}))[0] == 200
    assert (await _get(f"{base}/readyz", {}))[0] == 200


@pytest.mark.parametrize("path", ["/v1/status", "/v1/consumer-offsets"])
@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "no credential"),
        (bearer_header("bg1.broker.Qw.YnJva2VyLWI.other-group"), "not this group's broker"),
        ({"Authorization": f"Basic {TOKEN}"}, "not this group's broker"),
    ],
    ids=["none", "wrong", "basic"],
)
async def test_other_paths_need_the_groups_broker_credential(
    port: tuple[str, Source], path: str, headers: dict[str, str], reason: str
) -> None:
    base, source = port
    status, body = await _get(base + path, headers)
    assert status == 401 and body["error"] == "UNAUTHORIZED" and reason in body["message"]
    assert source.reads == []
    status, _ = await _get(base + path, bearer_header(TOKEN))
    assert status == 200 and len(source.reads) == 1
