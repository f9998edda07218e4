"""The HTTP side of controller access control: who is this (credentials.py), hooked into
app.py's route wrapper; what they may do is access.py's, decided by the service
(`endpoints.Endpoints.authorize`) for every front end alike.

Order per request (so nothing richer than headers is parsed unauthenticated):

1. `authenticate(request)`: the Authorization header alone → `Principal`, or
   401. /healthz, /readyz and /metrics never get here (they are open).
2. The body or query is parsed into the typed request (400 naming the field).
3. `caller(request)`: the principal, origin host and connection as a
   `requests.Caller`; the service checks access.py's rules with it (403 with
   the reason): every node role and group, the leader also addresses,
   against the group's registered brokers and the request's origin host.

The origin host is the TCP peer, or, for a request a follower forwarded, the
host that follower saw: it sends it in `X-Brokergroup-Origin` with a MAC
keyed by the nodes' shared Raft password, so a client cannot claim to be a
forwarding node (a forged forwarded request is 401).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from aiohttp import web

from brokergroup_controller.credentials import (
    AuthenticationError,
    CredentialKeys,
    Principal,
    Role,
    authenticate,
)
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.http_support import FORWARDED_HEADER
from brokergroup_controller.requests import Caller

ORIGIN_HEADER = "X-Brokergroup-Origin"
ORIGIN_PROOF_HEADER = "X-Brokergroup-Origin-Proof"

PRINCIPAL_KEY = web.RequestKey("brokergroup.principal", Principal)
ORIGIN_KEY: web.RequestKey[str | None] = web.RequestKey("brokergroup.origin")

_INSECURE = Principal(Role.ADMIN)


def origin_proof(
    node_secret: str, origin: str, method: str, path_qs: str, authorization: str
) -> str:
    """MAC of a forwarded request's origin host, bound to the request line and credential."""
    message = "\0".join(("origin", origin, method, path_qs, authorization))
    mac = hmac.new(node_secret.encode(), message.encode(), hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


class ApiAuth:
    """Access control of one node; `keys` None = --insecure-no-auth (everything allowed)."""

    def __init__(self, keys: CredentialKeys | None, node_secret: str | None) -> None:
        self._keys = keys
        self._node_secret = node_secret

    @property
    def enabled(self) -> bool:
        return self._keys is not None

    def _origin_proof(self, origin: str, request: web.Request) -> str:
        assert self._node_secret is not None
        authorization = request.headers.get("Authorization", "")
        return origin_proof(
            self._node_secret, origin, request.method, request.path_qs, authorization
        )

    def forwarding_headers(self, request: web.Request) -> dict[str, str]:
        """Headers a follower adds when it forwards `request` to the leader."""
        origin = request.get(ORIGIN_KEY)
        if not self.enabled or not isinstance(origin, str) or self._node_secret is None:
            return {}
        return {ORIGIN_HEADER: origin, ORIGIN_PROOF_HEADER: self._origin_proof(origin, request)}

    def authenticate(self, request: web.Request) -> Principal:
        """Step 1: the principal (kept on the request) and the origin host; 401 otherwise."""
        if self._keys is None:
            request[PRINCIPAL_KEY] = _INSECURE
            return _INSECURE
        try:
            principal = authenticate(request.headers.get("Authorization"), self._keys)
        except AuthenticationError as exc:
            raise ControllerError(ErrorCode.UNAUTHORIZED, str(exc)) from None
        request[PRINCIPAL_KEY] = principal
        request[ORIGIN_KEY] = self._origin(request)
        return principal

    def _origin(self, request: web.Request) -> str | None:
        if not request.headers.get(FORWARDED_HEADER):
            return request.remote
        origin = request.headers.get(ORIGIN_HEADER, "")
        proof = request.headers.get(ORIGIN_PROOF_HEADER, "")
        if not origin or not hmac.compare_digest(
            proof.encode(), self._origin_proof(origin, request).encode()
        ):
            raise ControllerError(
                ErrorCode.UNAUTHORIZED,
                "a forwarded request must carry the forwarding node's origin proof",
            )
        return origin

    def caller(self, request: web.Request) -> Caller:
        """The authenticated request's caller for the service (`requests.Caller`): its
        principal (None without authentication: nothing is checked), origin host, and
        its connection unless a follower relayed it (a heartbeat's close watch)."""
        relayed = bool(request.headers.get(FORWARDED_HEADER))
        return Caller(
            request[PRINCIPAL_KEY] if self.enabled else None,
            request.get(ORIGIN_KEY),
            connection=None if relayed else request.transport,
        )
