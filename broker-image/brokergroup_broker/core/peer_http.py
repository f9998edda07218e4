"""One way to read a peer broker's HTTP port (consumer offsets, metadata, retention floor):
the session carries the broker credential; a peer that is down, slow, answers non-200 or
sends no JSON yields None (logged at debug: peers come and go, the next round asks again).

With `--http-tls` every broker of the group serves its HTTP port over HTTPS only, so the
peers are read over HTTPS with `tls` (verified against the group's CA, this broker's own
certificate presented; `server_name`: the name the peer's certificate is checked for
instead of its address, as HA's `--ha-tls-server-name`)."""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from brokergroup_broker.core.broker_settings import PEER_HTTP_TIMEOUT_S, http_address_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PeerHttp:
    """How this broker reaches its peers' HTTP ports: the session (with the group's broker
    credential) and, under `--http-tls`, the client context."""

    session: aiohttp.ClientSession
    tls: ssl.SSLContext | None = field(default=None, repr=False)
    server_name: str | None = None

    @property
    def scheme(self) -> str:
        return "http" if self.tls is None else "https"


async def peer_json(http: PeerHttp, client_address: str, path: str) -> Any:
    """The JSON body of GET `path` on the broker whose client address is `client_address`,
    or None."""
    url = f"{http.scheme}://{http_address_of(client_address)}{path}"
    try:
        async with http.session.get(
            url,
            timeout=aiohttp.ClientTimeout(total=PEER_HTTP_TIMEOUT_S),
            ssl=True if http.tls is None else http.tls,
            server_hostname=http.server_name if http.tls is not None else None,
        ) as response:
            if response.status != 200:
                log.debug("%s from %s: HTTP %s", path, client_address, response.status)
                return None
            return await response.json()
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        log.debug("%s from %s: %s", path, client_address, exc)
        return None
