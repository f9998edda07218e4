"""The Secrets the operator writes for a BrokerGroup (pure; DESIGN.md §11).

`<bg>-credentials` holds what the group's broker pods mount: the broker and client
credentials derived for the group (cluster = namespace, brokerName = group), its RocketMQ
broker and client key pairs derived the same way, and the HA secret. The operator writes
it unless spec.controller.secretName names the user's own. `<bg>-rocketmq-client` holds
the group's RocketMQ client pair alone, for applications to mount. The release Secret
(release_secret.py) is never copied into either: a broker pod holds only what names its
group.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from brokergroup_controller.credentials import Role as CredentialRole
from brokergroup_controller.credentials import derive_credential, derive_rocketmq_pair
from brokergroup_operator import rocketmq_config as rmq
from brokergroup_operator.model import Engine
from brokergroup_operator.release_secret import HA_SECRET_KEY
from brokergroup_operator.spec import GroupContext

BROKER_CREDENTIAL_KEY = "broker-credential"
CLIENT_CREDENTIAL_KEY = "client-credential"
CLIENT_ACCESS_KEY = "accessKey"
CLIENT_SECRET_KEY = "secretKey"


def group_secret(ctx: GroupContext) -> dict[str, Any] | None:
    """The group's own Secret: its derived broker and client credentials (cluster
    name = namespace, as the broker command says), its RocketMQ broker and client
    pairs derived the same way, and the HA secret. None when the user brings
    spec.controller.secretName. The release's own pair (the controllers' admin
    pair) is never copied here: a broker pod holds only what names its group."""
    if ctx.own_secret is not None:
        return None
    secrets = ctx.secrets
    assert secrets is not None and secrets.broker_credential_root and secrets.ha_secret
    root = secrets.broker_credential_root
    extra = {}
    if ctx.engine is Engine.ROCKETMQ:
        assert ctx.group_pairs_on
    if ctx.group_pairs_on:
        # Both engines: stock brokers sign with the broker pair; built-in brokers sign
        # their name server registrations with it and accept it and the client pair on
        # their remoting port.
        extra[rmq.CREDENTIALS_KEY] = derive_rocketmq_pair(
            root, CredentialRole.BROKER, ctx.namespace, ctx.name
        ).to_json()
        extra[rmq.CLIENT_CREDENTIALS_KEY] = derive_rocketmq_pair(
            root, CredentialRole.CLIENT, ctx.namespace, ctx.name
        ).to_json()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": ctx.object_meta(ctx.secret),
        "type": "Opaque",
        "stringData": {
            **extra,
            BROKER_CREDENTIAL_KEY: derive_credential(
                root, CredentialRole.BROKER, ctx.namespace, ctx.name
            ),
            CLIENT_CREDENTIAL_KEY: derive_credential(
                root, CredentialRole.CLIENT, ctx.namespace, ctx.name
            ),
            HA_SECRET_KEY: secrets.ha_secret,
        },
    }


def credentials_hash(ctx: GroupContext) -> str | None:
    """The digest of the group Secret the operator writes, for the pod template (None
    with the user's own Secret: they roll the pods when they change it)."""
    derived = group_secret(ctx)
    return None if derived is None else _digest(derived["stringData"])


def _digest(data: Mapping[str, str]) -> str:
    """16 hex digits of a keyed-by-label SHA-256 over the Secret's data: it changes with
    any value, and says nothing of them (they are 256-bit HMAC outputs and a random HA
    secret, out of reach of a search from the digest)."""
    canonical = json.dumps(dict(data), sort_keys=True).encode()
    return hashlib.sha256(b"brokergroup pod credentials v1\0" + canonical).hexdigest()[:16]


def client_secret(ctx: GroupContext) -> dict[str, Any] | None:
    """`<bg>-rocketmq-client`: the group's RocketMQ client pair and nothing else, so an
    application's pods can mount it (and RBAC grant it) without any broker credential.
    The pair reads routes from the name servers and sends and consumes on the group's
    brokers; it cannot register a broker or act on the controllers. None when the
    operator writes no pairs for the group (the user's own Secret, or no release pair)."""
    if not ctx.group_pairs_on:
        return None
    assert ctx.secrets is not None and ctx.secrets.broker_credential_root
    pair = derive_rocketmq_pair(
        ctx.secrets.broker_credential_root, CredentialRole.CLIENT, ctx.namespace, ctx.name
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": ctx.object_meta(ctx.client_secret),
        "type": "Opaque",
        "stringData": {
            CLIENT_ACCESS_KEY: pair.access_key,
            CLIENT_SECRET_KEY: pair.secret_key,
            rmq.CREDENTIALS_KEY: pair.to_json(),
        },
    }
