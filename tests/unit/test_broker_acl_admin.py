"""mqadmin's ACL admin codes on a built-in broker (issue 36; remoting_front/acl_admin.py):
AUTH_CREATE_USER 3001 … AUTH_LIST_ACL 3010, what `mqadmin createUser … listAcl` send to a
broker, are answered REQUEST_CODE_NOT_SUPPORTED with a remark naming the mqadmin subcommand
and the brokergroup command that does the same (the users are the controllers', changed
only with the admin credential, which never reaches a broker). On a real socket over the
port `Broker` opens: signed with either group pair, every code gets its remark and the
connection goes on serving; unsigned, the code is refused NO_PERMISSION before anything is
decoded, as every request is. Before acl_admin.py these codes answered "request code 3001
not supported", which names no way out.
"""

from __future__ import annotations

import json
from pathlib import Path

from brokergroup_broker.core.broker_settings import remoting_auth_of
from brokergroup_broker.remoting_front import FrontSettings, RemotingFront, RemotingFrontServer
from brokergroup_broker.store import MessageStore
from brokergroup_controller.credentials import Role
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import RemotingClient
from tests.unit.test_broker_group_keys import group_settings, pair
from tests.unit.test_broker_remoting_front import unconfirmed_produce_path

#: What mqadmin 5.3 sends for each subcommand, with the header field it names the user by.
SENT = [
    (RequestCode.AUTH_CREATE_USER, "createUser", {}, {"username": "app", "password": "s"}),
    (RequestCode.AUTH_UPDATE_USER, "updateUser", {}, {"username": "app", "password": "t"}),
    (RequestCode.AUTH_DELETE_USER, "deleteUser", {"username": "app"}, None),
    (RequestCode.AUTH_GET_USER, "getUser", {"username": "app"}, None),
    (RequestCode.AUTH_LIST_USER, "listUser", {"filter": ""}, None),
    (RequestCode.AUTH_CREATE_ACL, "createAcl", {"subject": "User:app"}, {"subject": "User:app"}),
    (RequestCode.AUTH_UPDATE_ACL, "updateAcl", {"subject": "User:app"}, {"subject": "User:app"}),
    (RequestCode.AUTH_DELETE_ACL, "deleteAcl", {"subject": "User:app"}, None),
    (RequestCode.AUTH_GET_ACL, "getAcl", {"subject": "User:app"}, None),
    (RequestCode.AUTH_LIST_ACL, "listAcl", {"subjectFilter": "", "resourceFilter": ""}, None),
]
INSTEAD = {
    "createUser": "brokergroup admin user create",
    "updateUser": "brokergroup admin user update",
    "deleteUser": "brokergroup admin user delete",
    "getUser": "brokergroup admin user get",
    "listUser": "brokergroup admin user list",
    "createAcl": "brokergroup admin user update --allow/--deny",
    "updateAcl": "brokergroup admin user update --allow/--deny",
    "deleteAcl": "brokergroup admin user update --allow/--deny",
    "getAcl": "brokergroup admin user get",
    "listAcl": "brokergroup admin user list",
}


async def test_acl_admin_codes_are_refused_with_the_way_that_works(
    store: MessageStore, tmp_path: Path
) -> None:
    front = RemotingFront(
        unconfirmed_produce_path(store, tmp_path),
        FrontSettings("C", "broker-a", ("127.0.0.1", 10911), auto_create_topic=True),
    )
    server = RemotingFrontServer(front, remoting_auth_of(group_settings(tmp_path)))
    await server.start("127.0.0.1", 0)
    answers: list[tuple[str, int, str]] = []
    try:
        for signer in (pair(Role.CLIENT), pair(Role.BROKER), None):
            client = await RemotingClient.connect(f"127.0.0.1:{server.port}", credentials=signer)
            try:
                for code, subcommand, fields, body in SENT:
                    raw = b"" if body is None else json.dumps(body).encode()
                    answer = await client.invoke(request(code, 0, fields, raw), 5.0)
                    answers.append((subcommand, answer.code, answer.remark or ""))
                if signer is not None:  # the connection still serves
                    beat = json.dumps({"clientID": "c1", "consumerDataSet": []}).encode()
                    served = await client.invoke(request(RequestCode.HEART_BEAT, 0, {}, beat), 5)
                    assert served.code == ResponseCode.SUCCESS
            finally:
                await client.close()
    finally:
        await server.close()
    signed = answers[: 2 * len(SENT)]
    assert [(s, c) for s, c, _ in signed] == 2 * [
        (sub, ResponseCode.REQUEST_CODE_NOT_SUPPORTED) for _, sub, _, _ in SENT
    ]
    for (subcommand, _, remark), (code, *_) in zip(signed, 2 * SENT, strict=True):
        assert remark == (
            f"mqadmin {subcommand} (request code {int(code)}) is not served by a brokergroup "
            "broker: a cluster's users are kept by its controllers for every group at once and "
            "only the release's admin credential changes them; use "
            f"`{INSTEAD[subcommand]}` (local runtime), a BrokerGroupUser resource (Kubernetes) "
            "or the controllers' users API (/v1/clusters/<cluster>/users, admin credential)"
        )
    unsigned = answers[2 * len(SENT) :]
    assert {c for _, c, _ in unsigned} == {ResponseCode.NO_PERMISSION}
    assert store.max_offset == 0
