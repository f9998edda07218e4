"""The built-in broker's remoting port checks its group's key pairs only (DESIGN.md §11,
issue 19 item 4; brokergroup_broker.core.remoting_keys).

A broker gets its group's BROKER pair (`--remoting-key-file`, which also signs its name-server
registrations) and CLIENT pair (`--remoting-client-key-file`), both derived from a broker
credential root it never sees. On a real socket, over the port `Broker` opens
(`remoting_auth_of(settings)`): a request signed with either pair is served; one signed with
another group's pair, or with the release's admin pair, is NO_PERMISSION with the reason and
never reaches the handler. The command line refuses a key file holding another group's (or
the other role's) pair, naming the file and never the secret.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from brokergroup_broker.core.broker_settings import BrokerSettings, remoting_auth_of
from brokergroup_broker.core.cli_broker import register, run_broker_command
from brokergroup_broker.core.remoting_keys import foreign_pair_reason
from brokergroup_broker.remoting_front import FrontSettings, RemotingFront, RemotingFrontServer
from brokergroup_broker.store import MessageStore
from brokergroup_controller.credentials import Role, derive_rocketmq_pair
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.acl import SignatureFault
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.unit.test_broker_remoting_front import unconfirmed_produce_path

ROOT = "broker-credential-root-for-tests"
ADMIN = Credentials("bgReleaseAdmin01", "release-admin-secret-0123")


def pair(role: Role, broker_name: str = "broker-a", cluster: str = "C") -> Credentials:
    derived = derive_rocketmq_pair(ROOT, role, cluster, broker_name)
    return Credentials(derived.access_key, derived.secret_key)


def group_settings(tmp_path: Path) -> BrokerSettings:
    return BrokerSettings(
        "C", "broker-a", tmp_path, ("127.0.0.1:1",), None, "127.0.0.1", "127.0.0.1",
        remoting_port=0,
        remoting_credentials=pair(Role.BROKER),
        remoting_client_credentials=pair(Role.CLIENT),
    )  # fmt: skip


async def heartbeat(port: int, signer: Credentials) -> tuple[int, str]:
    client = await RemotingClient.connect(f"127.0.0.1:{port}", credentials=signer)
    try:
        body = json.dumps({"clientID": "c1", "consumerDataSet": [{"groupName": "g"}]}).encode()
        answer = await client.invoke(request(RequestCode.HEART_BEAT, 0, {}, body), 5.0)
        listed = await client.invoke(
            request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, 0, {"consumerGroup": "g"}), 5.0
        )
        assert answer.code == listed.code  # both refused, or both served
        return answer.code, answer.remark or ""
    finally:
        await client.close()


async def test_the_group_pairs_are_served_and_every_other_pair_is_refused(
    store: MessageStore,
    tmp_path: Path,
) -> None:
    settings = group_settings(tmp_path)
    front = RemotingFront(
        unconfirmed_produce_path(store, tmp_path),
        FrontSettings("C", "broker-a", ("127.0.0.1", 10911), auto_create_topic=True),
    )
    server = RemotingFrontServer(front, remoting_auth_of(settings))
    await server.start("127.0.0.1", 0)
    try:
        for signer in (pair(Role.CLIENT), pair(Role.BROKER)):
            assert await heartbeat(server.port, signer) == (ResponseCode.SUCCESS, "")
        refused = (
            pair(Role.CLIENT, "broker-b"),  # another group of the same cluster
            pair(Role.BROKER, "broker-b"),
            pair(Role.CLIENT, cluster="D"),
            ADMIN,  # the release pair: the controllers', never a broker's
            Credentials(pair(Role.CLIENT).access_key, "a-guessed-secret-01"),
        )
        answers = [await heartbeat(server.port, signer) for signer in refused]
    finally:
        await server.close()
    unknown = SignatureFault.UNKNOWN_ACCESS_KEY.value
    elsewhere = "; this broker serves group (C, broker-a): sign with that group's pair"
    assert answers == [
        (ResponseCode.NO_PERMISSION, f"{unknown}: it is the client pair of group (C, broker-b)"
         + elsewhere),
        (ResponseCode.NO_PERMISSION, f"{unknown}: it is the broker pair of group (C, broker-b)"
         + elsewhere),
        (ResponseCode.NO_PERMISSION, f"{unknown}: it is the client pair of group (D, broker-a)"
         + elsewhere),
        (ResponseCode.NO_PERMISSION, unknown),  # not a derived key: nothing to name
        (ResponseCode.NO_PERMISSION, SignatureFault.MISMATCH.value),
    ]  # fmt: skip
    for signer in refused:  # a refusal names the pair's public parts, never a secret
        assert all(signer.secret_key not in remark for _, remark in answers)
    assert store.max_offset == 0


def key_file(tmp_path: Path, name: str, signer: Credentials) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"accessKey": signer.access_key, "secretKey": signer.secret_key}))
    return path


def broker_args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args([
        "broker", "--cluster-name", "C", "--broker-name", "broker-a",
        "--data-dir", str(tmp_path / "data"), "--controller-addresses", "127.0.0.1:1",
        "--insecure-no-ha-auth", "--bind-address", "127.0.0.1", *extra,
    ])  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "signer", "reason"),
    [
        ("--remoting-key-file", pair(Role.BROKER, "broker-b"),
         "is the broker pair of group (C, broker-b), not the broker pair of this broker's group "
         "(C, broker-a)"),
        ("--remoting-key-file", pair(Role.CLIENT),
         "is the client pair of group (C, broker-a), not the broker pair"),
        ("--remoting-client-key-file", pair(Role.CLIENT, cluster="D"),
         "is the client pair of group (D, broker-a), not the client pair"),
    ],
)  # fmt: skip
def test_a_key_file_of_another_group_or_role_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, signer: Credentials,
    reason: str,
) -> None:  # fmt: skip
    files = {
        "--remoting-key-file": key_file(tmp_path, "broker.json", pair(Role.BROKER)),
        "--remoting-client-key-file": key_file(tmp_path, "client.json", pair(Role.CLIENT)),
    }
    files[flag] = key_file(tmp_path, "wrong.json", signer)
    argv = [str(a) for item in files.items() for a in item]
    assert run_broker_command(broker_args(tmp_path, *argv)) == 2
    err = capsys.readouterr().err
    assert f"{flag} {tmp_path / 'wrong.json'}: its AccessKey " in err and reason in err
    assert signer.secret_key not in err
    assert not (tmp_path / "data").exists()  # refused before anything was created


def test_a_client_key_file_needs_the_broker_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = key_file(tmp_path, "client.json", pair(Role.CLIENT))
    assert run_broker_command(broker_args(tmp_path, "--remoting-client-key-file", str(client))) == 2
    assert "--remoting-client-key-file needs --remoting-key-file" in capsys.readouterr().err


def test_a_pair_of_this_group_the_broker_was_not_given_says_which_flag_gives_it() -> None:
    assert foreign_pair_reason(pair(Role.CLIENT).access_key, "C", "broker-a") == (
        "it is this group's client pair, which this broker was not given "
        "(--remoting-client-key-file)"
    )
    assert foreign_pair_reason(ADMIN.access_key, "C", "broker-a") is None
