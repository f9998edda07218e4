"""Which key pairs the built-in broker's remoting port accepts (pure; DESIGN.md §11).

A broker holds its group's two RocketMQ pairs, derived from the broker credential root by
whoever starts it (the local runtime, the operator): the BROKER pair (`--remoting-key-file`),
which also signs its name-server registrations, and the CLIENT pair
(`--remoting-client-key-file`), which the group's applications sign with. The port checks
signatures against these pairs only. The broker never holds the root, so another group's
pair or the release's admin pair is an unknown AccessKey: NO_PERMISSION before the header
is read.

A key file whose AccessKey is a derived one must name this broker's group and the role its
flag says; a pair that is not derived (a release-wide pair, as before per-group pairs) is
taken as it is.

The broker's own client port (`brokergroup_broker.protocol.auth`) takes the same two
pairs (`client_port_auth`), so an application holds one pair for both front ends.

Who may do what on the remoting port (least privilege, RocketMQ ACL 2.0's `Topic:*`
Create being an admin right): every request is a client operation except those in
`ADMIN_REQUEST_CODES` (the metadata writes: UPDATE_AND_CREATE_TOPIC,
DELETE_TOPIC_IN_BROKER, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP), which
only the BROKER pair may make (the broker never holds the release's admin pair); the client pair is answered NO_PERMISSION
before the header is read (`admin_refusal`). A send still creates its topic where
autoCreateTopicEnable is on.
"""

from __future__ import annotations

import hmac

from brokergroup_broker.protocol.auth import ClientPortAuth
from brokergroup_controller.credentials import Role, rocketmq_principal_of
from brokergroup_remoting import RemotingCommand, RequestCode
from brokergroup_remoting.net import Credentials, ServerAuth

#: Requests of the remoting port only the group's broker pair may make.
ADMIN_REQUEST_CODES: frozenset[int] = frozenset(
    int(code)
    for code in (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    )
)


def pair_mismatch(pair: Credentials, role: Role, cluster_name: str, broker_name: str) -> str | None:
    """Why `pair` cannot be this broker's `role` pair (None: it can). Names no secret."""
    principal = rocketmq_principal_of(pair.access_key)
    if principal is None:
        return None  # not a derived AccessKey: a release-wide pair
    if principal.role == role and principal.group == (cluster_name, broker_name):
        return None
    cluster, name = principal.group or ("", "")
    return (
        f"its AccessKey is the {principal.role} pair of group ({cluster}, {name}), "
        f"not the {role} pair of this broker's group ({cluster_name}, {broker_name})"
    )


def foreign_pair_reason(access_key: str, cluster_name: str, broker_name: str) -> str | None:
    """What a derived AccessKey this broker does not hold names, for the refusal's remark
    (its group and role: public parts of the key, never a secret); None for other keys."""
    principal = rocketmq_principal_of(access_key)
    if principal is None or principal.group is None:
        return None
    cluster, name = principal.group
    if (cluster, name) == (cluster_name, broker_name):
        flag = (
            "--remoting-client-key-file" if principal.role == Role.CLIENT else "--remoting-key-file"
        )
        return f"it is this group's {principal.role} pair, which this broker was not given ({flag})"
    return (
        f"it is the {principal.role} pair of group ({cluster}, {name}); this broker serves "
        f"group ({cluster_name}, {broker_name}): sign with that group's pair"
    )


def signer_role(access_key: str, client_keys: frozenset[str]) -> Role:
    """The role of a signer the port verified: what a derived AccessKey says, else CLIENT
    for the pair given as the client pair, BROKER for the other."""
    principal = rocketmq_principal_of(access_key)
    if principal is not None:
        return principal.role
    return Role.CLIENT if access_key in client_keys else Role.BROKER


def admin_refusal(role: Role, code: int) -> str | None:
    """Why a signer of `role` may not make request `code` (None: it may)."""
    if code in ADMIN_REQUEST_CODES and role is not Role.BROKER:
        return (
            f"request code {code} (changing a topic or a subscription group) is an admin "
            f"right: it needs the group's broker pair, not the {role} pair (a send creates its topic where "
            "autoCreateTopicEnable is on)"
        )
    return None


def group_server_auth(
    pairs: tuple[Credentials, ...],
    group: tuple[str, str],
    *,
    client_pair: Credentials | None = None,
) -> ServerAuth:
    """Requests must be signed with one of `pairs` (the pairs of `group`, (cluster, broker
    name)); a refusal of another group's pair says whose it is. `client_pair` (one of
    `pairs`, when it is not a derived one) may not make `ADMIN_REQUEST_CODES`."""
    if not pairs:
        raise ValueError("a signed remoting port needs at least one key pair")
    client_keys = frozenset(() if client_pair is None else (client_pair.access_key,))

    def secret_for(access_key: str) -> str | None:
        for pair in pairs:
            if hmac.compare_digest(access_key.encode(), pair.access_key.encode()):
                return pair.secret_key
        return None

    cluster_name, broker_name = group
    # A signer the port verified holds one of `pairs`: its role is known before any request.
    roles = {pair.access_key: signer_role(pair.access_key, client_keys) for pair in pairs}

    def authorize(access_key: str, cmd: RemotingCommand) -> str | None:
        role = roles.get(access_key)
        if role is None:
            role = signer_role(access_key, client_keys)
        return admin_refusal(role, cmd.code)

    return ServerAuth(
        secret_for=secret_for,
        authorize=authorize,
        unknown_key_reason=lambda key: foreign_pair_reason(key, cluster_name, broker_name),
    )


def client_port_auth(
    broker_pair: Credentials | None, client_pair: Credentials | None, group: tuple[str, str]
) -> ClientPortAuth | None:
    """What the client port checks: the group's broker and client pairs, each with its
    role (None when the broker holds neither: an open port, `--insecure-no-client-auth`)."""
    pairs = tuple(
        (pair, role)
        for pair, role in ((broker_pair, Role.BROKER), (client_pair, Role.CLIENT))
        if pair is not None
    )
    if not pairs:
        return None
    cluster_name, broker_name = group
    return ClientPortAuth(
        pairs, unknown_key_reason=lambda key: foreign_pair_reason(key, cluster_name, broker_name)
    )
