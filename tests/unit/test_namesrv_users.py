"""Users on the name server (docs/security.md "Users with rights"; namesrv/users.py): a
user's signature verifies against the SecretKey in the replicated state (sealed there), the
user may make the reads only, a disabled or deleted user is an unknown AccessKey, and the
pairs keep their own rules."""

from __future__ import annotations

from collections.abc import Callable

from brokergroup_controller.credentials import RocketMQKeyPair, RocketMQKeys
from brokergroup_controller.namesrv.serve import name_server_auth
from brokergroup_controller.namesrv.users import StateUsers, with_users
from brokergroup_controller.state import ControllerState, DeleteUser, PutUser, canonical_policies
from brokergroup_controller.users_seal import SecretSealer
from brokergroup_remoting import RequestCode
from brokergroup_remoting.acl import sign, verify
from brokergroup_remoting.command import request
from brokergroup_remoting.net import ServerAuth

ROOT = "broker-credential-root-of-the-test"
ADMIN = RocketMQKeyPair("adminAK", "admin-secret-1")


def _auth(state: ControllerState) -> ServerAuth:
    def read(reader: Callable[[ControllerState], str | None]) -> str | None:
        return reader(state)

    keys = RocketMQKeys(ADMIN, ROOT)
    return with_users(name_server_auth(keys), StateUsers(read, ROOT))


def test_users_read_routes_only() -> None:
    state = ControllerState()
    sealed = SecretSealer(ROOT).seal("app-secret-01")
    state.apply(PutUser("C", "", "app", sealed, canonical_policies([])))
    auth = _auth(state)
    route = sign(
        request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": "T"}), "app", "app-secret-01"
    )
    check = verify(route, auth.secret_for)
    assert check.ok and auth.authorize is not None
    assert auth.authorize("app", route) is None
    register = request(RequestCode.REGISTER_BROKER, 0, {"clusterName": "C"})
    assert "only the name server's reads" in (auth.authorize("app", register) or "")
    wrong = sign(
        request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": "T"}), "app", "x-secret-99"
    )
    assert not verify(wrong, auth.secret_for).ok
    assert auth.authorize("adminAK", register) is None
    state.apply(PutUser("C", "", "app", None, canonical_policies([]), enabled=False))
    assert auth.secret_for("app") is None
    state.apply(DeleteUser("C", "", "app"))
    assert auth.secret_for("app") is None
