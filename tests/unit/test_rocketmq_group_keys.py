"""Per-group RocketMQ key pairs (credentials.derive_rocketmq_pair, RocketMQKeys): derived
from the broker credential root, named by their AccessKey, checked without a registry."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from brokergroup_controller.credentials import (
    Principal,
    RocketMQKeyPair,
    RocketMQKeys,
    Role,
    derive_credential,
    derive_rocketmq_pair,
    rocketmq_principal_of,
)

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
