"""Users on the name server (docs/security.md "Users with rights").

A stock client signs its route lookups with the user's pair, so the name server (in every
controller node, beside the replicated state) accepts users' signatures too: the SecretKey
comes from the state (opened with the broker credential root, cached per sealed value). A
user may make the name server's reads (routes, cluster info, topic lists), as a group's
client pair may: routes are not secret to a client that may reach the brokers, and a stock
client asks for the routes of system topics too. What a user may do with a topic is decided
where it is done, on the brokers.

An AccessKey held by users of several clusters signs with the first cluster's (by name)
SecretKey here: keep a user's AccessKey unique across the clusters of one name server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from brokergroup_controller.namesrv import access
from brokergroup_controller.state import ControllerState
from brokergroup_controller.users_seal import SealError, SecretSealer
from brokergroup_remoting import RemotingCommand
from brokergroup_remoting.net import ServerAuth

log = logging.getLogger(__name__)


class StateUsers:
    """Users' SecretKeys as the replicated state has them (`read` runs a function on it)."""

    def __init__(
        self,
        read: Callable[[Callable[[ControllerState], str | None]], str | None],
        root: str | None,
    ) -> None:
        self._read = read
        self._sealer = SecretSealer(root)
        self._opened: dict[str, str] = {}

    def secret_for(self, access_key: str) -> str | None:
        def sealed_of(state: ControllerState) -> str | None:
            for _, users in sorted(state.users.items()):
                user = users.users.get(access_key)
                if user is not None and user.enabled:
                    return user.sealed_secret_key
            return None

        sealed = self._read(sealed_of)
        if sealed is None:
            return None
        secret = self._opened.get(sealed)
        if secret is None:
            try:
                secret = self._sealer.open(sealed, access_key)
            except SealError as exc:
                log.error("%s", exc)
                return None
            if len(self._opened) > 10_000:
                self._opened.clear()
            self._opened[sealed] = secret
        return secret


def with_users(auth: ServerAuth, users: StateUsers) -> ServerAuth:
    """`auth` (the release's and the groups' pairs, first) extended by the users, who may
    make the reads only."""
    pair_secret, pair_authorize = auth.secret_for, auth.authorize

    def secret_for(access_key: str) -> str | None:
        secret = pair_secret(access_key)
        return secret if secret is not None else users.secret_for(access_key)

    def authorize(access_key: str, cmd: RemotingCommand) -> str | None:
        if pair_secret(access_key) is not None:
            return None if pair_authorize is None else pair_authorize(access_key, cmd)
        if cmd.code in access.READS:
            return None
        return f"User:{access_key} may make only the name server's reads, not request {cmd.code}"

    return ServerAuth(
        secret_for=secret_for,
        exempt_codes=auth.exempt_codes,
        authorize=authorize,
        unknown_key_reason=auth.unknown_key_reason,
    )
