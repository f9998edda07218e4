"""One way to read a peer broker's HTTP port (consumer offsets, metadata, retention floor):
the session carries the broker credential; a peer that is down, slow, answers non-200 or
sends no JSON yields None (logged at debug: peers come and go, the next round asks again)."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp

from brokergroup_broker.core.broker_settings import PEER_HTTP_TIMEOUT_S, http_address_of

log = logging.getLogger(__name__)


async def peer_json(session: aiohttp.ClientSession, client_address: str, path: str) -> Any:
    """The JSON body of GET `path` on the broker whose client address is `client_address`,
    or None."""
    url = f"http://{http_address_of(client_address)}{path}"
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=PEER_HTTP_TIMEOUT_S)
        ) as response:
            if response.status != 200:
                log.debug("%s from %s: HTTP %s", path, client_address, response.status)
                return None
            return await response.json()
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        log.debug("%s from %s: %s", path, client_address, exc)
        return None
