"""Per-group RocketMQ key pairs (credentials.derive_rocketmq_pair, RocketMQKeys): derived
from the broker credential root, named by their AccessKey, checked without a registry."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from brokergroup_broker.core.remoting_keys import group_server_auth
from brokergroup_controller.credentials import (
    Principal,
    RocketMQKeyPair,
    RocketMQKeys,
    Role,
    derive_credential,
    derive_rocketmq_pair,
    rocketmq_principal_of,
)
from brokergroup_remoting import RequestCode, request
from brokergroup_remoting.net import Credentials

ROOT = "a-broker-credential-root"
ADMIN = RocketMQKeyPair("releaseAccessKey", "releaseSecretKey")
names = st.text(min_size=1, max_size=40)
roles = st.sampled_from([Role.BROKER, Role.CLIENT])


@given(roles, names, names)
def test_a_derived_access_key_names_its_group_and_the_root_gives_its_secret(
    role: Role, cluster: str, broker: str
) -> None:
    pair = derive_rocketmq_pair(ROOT, role, cluster, broker)
    keys = RocketMQKeys(ADMIN, ROOT)
    assert keys.secret_for(pair.access_key) == pair.secret_key
    assert keys.principal(pair.access_key) == Principal(role, (cluster, broker))
    # Another root, or no root, knows no secret for it; the API token is another secret.
    assert RocketMQKeys(ADMIN, "another-root").secret_for(pair.access_key) != pair.secret_key
    assert RocketMQKeys(ADMIN, None).secret_for(pair.access_key) is None
    assert pair.secret_key not in derive_credential(ROOT, role, cluster, broker)
    assert json.loads(pair.to_json()) == {
        "accessKey": pair.access_key,
        "secretKey": pair.secret_key,
    }


@given(roles, names, names, st.data())
def test_an_altered_access_key_names_no_one_or_someone_else(
    role: Role, cluster: str, broker: str, data: st.DataObject
) -> None:
    pair = derive_rocketmq_pair(ROOT, role, cluster, broker)
    i = data.draw(st.integers(0, len(pair.access_key) - 1))
    c = data.draw(st.characters(codec="ascii"))
    altered = pair.access_key[:i] + c + pair.access_key[i + 1 :]
    owner = rocketmq_principal_of(altered)
    if altered != pair.access_key:
        assert owner != Principal(role, (cluster, broker))
        assert RocketMQKeys(ADMIN, ROOT).secret_for(altered) != pair.secret_key


def test_the_admin_pair_and_malformed_keys() -> None:
    keys = RocketMQKeys(ADMIN, ROOT)
    assert keys.secret_for(ADMIN.access_key) == ADMIN.secret_key
    assert keys.principal(ADMIN.access_key) == Principal(Role.ADMIN)
    pair = derive_rocketmq_pair(ROOT, Role.CLIENT, "default", "orders")
    for bad in (
        "",
        "bg1",
        "bg1.admin.ZGVmYXVsdA.b3JkZXJz",  # admin is never derived
        "bg1.client.ZGVmYXVsdA==.b3JkZXJz",  # padding: a second spelling
        "bg1.client..b3JkZXJz",
        "bg1.client.%%%.b3JkZXJz",
        pair.access_key + ".x",
        "bg2" + pair.access_key[3:],
    ):
        assert rocketmq_principal_of(bad) is None, bad
        assert keys.secret_for(bad) is None, bad
    assert pair.secret_key not in repr(pair)
    assert ROOT not in repr(keys) and ADMIN.secret_key not in repr(keys)


def test_a_group_port_gives_each_pair_its_role_for_admin_requests() -> None:
    """group_server_auth knows each verified signer's role from its pair: a derived pair's
    from its AccessKey, a release-wide pair's from being the client pair or not."""
    group = ("DefaultCluster", "broker-a")
    derived = {r: derive_rocketmq_pair(ROOT, r, *group) for r in (Role.BROKER, Role.CLIENT)}
    plain_broker, plain_client = Credentials("rb", "sb"), Credentials("rc", "sc")
    pairs = (
        Credentials(derived[Role.BROKER].access_key, derived[Role.BROKER].secret_key),
        Credentials(derived[Role.CLIENT].access_key, derived[Role.CLIENT].secret_key),
        plain_broker,
        plain_client,
    )
    auth = group_server_auth(pairs, group, client_pair=plain_client)
    assert auth.authorize is not None
    admin = request(RequestCode.UPDATE_AND_CREATE_TOPIC, 1, {"topic": "T"})
    send = request(RequestCode.SEND_MESSAGE_V2, 2, {"b": "T"})
    refused = {
        pair.access_key: auth.authorize(pair.access_key, admin) is not None for pair in pairs
    }
    assert refused == {
        pairs[0].access_key: False,
        pairs[1].access_key: True,
        "rb": False,
        "rc": True,
    }
    assert all(auth.authorize(pair.access_key, send) is None for pair in pairs)
