"""The broker's side of TLS on RocketMQ remoting (issue 36 item 1): its start-up flags and
its name-server link.

`brokergroup broker --remoting-tls-mode permissive|enforcing` needs a certificate and key
that load, and a bad one stops start-up with exit 2 and the reason (nothing is opened);
`--tls-ca-file` makes the broker's REGISTER_BROKER go over TLS, verified against that CA,
so it registers with a name server that enforces TLS — and a link without it does not.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest

from brokergroup_broker.core.cli_broker import main as broker_main
from brokergroup_broker.remoting_front.namesrv_link import NameServerLink, Registration
from brokergroup_controller.namesrv.server import NameServer
from brokergroup_remoting.net import Credentials, ServerAuth
from brokergroup_remoting.tls import ServerTls, TlsMode, client_context, server_context
from tests.unit.tls_material import make_material

KEYS = {"brokerAccessKey": "brokerSecretKey-1234"}
PAIR = Credentials("brokerAccessKey", "brokerSecretKey-1234")
NOW = datetime.datetime.now(datetime.UTC)


def _broker_argv(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "broker",
        "--cluster-name", "DefaultCluster",
        "--broker-name", "broker-a",
        "--data-dir", str(tmp_path / "data"),
        "--controller-addresses", "127.0.0.1:1",
        "--bind-address", "127.0.0.1",
        "--insecure-no-ha-auth",
        "--insecure-no-client-auth",
        "--insecure-no-remoting-auth",
        *extra,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--remoting-tls-mode", "enforcing"], "needs a certificate and key file"),
        (
            ["--remoting-tls-mode", "permissive", "--tls-cert-file", "/nonexistent.crt",
             "--tls-key-file", "/nonexistent.key"],
            "cannot load the TLS certificate /nonexistent.crt",
        ),
        (["--tls-ca-file", "/nonexistent-ca.pem"], "No such file"),
    ],
)  # fmt: skip
def test_a_tls_setting_that_cannot_work_stops_start_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], reason: str
) -> None:
    assert broker_main(_broker_argv(tmp_path, *flags)) == 2
    assert reason in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # refused before the store was touched


async def test_the_name_server_link_registers_over_tls_with_the_ca(tmp_path: Path) -> None:
    material = make_material(tmp_path, NOW)
    tls = ServerTls(TlsMode.ENFORCING, server_context(material.cert_file, material.key_file))
    namesrv = NameServer(dict, auth=ServerAuth(secret_for=KEYS.get), tls=tls)
    await namesrv.start("127.0.0.1", 0)
    address = f"127.0.0.1:{namesrv.port}"

    def registration(broker_addr: str) -> Registration:
        return Registration(
            cluster_name="DefaultCluster",
            broker_name="broker-a",
            broker_id=0,
            broker_addr=broker_addr,
            ha_server_addr="127.0.0.1:10912",
            auto_create_topic=False,
            default_queue_nums=4,
        )

    sealed = NameServerLink(
        (address,),
        registration("127.0.0.1:10911"),
        lambda: {"Orders": 4},
        PAIR,
        timeout_ms=2000,
        tls=client_context(material.ca_file),
    )
    plain = NameServerLink(
        (address,), registration("127.0.0.1:20911"), lambda: {"Orders": 4}, PAIR, timeout_ms=2000
    )
    tasks = [asyncio.create_task(sealed.run()), asyncio.create_task(plain.run())]
    try:
        for _ in range(500):
            if namesrv.registry.get("DefaultCluster", "127.0.0.1:10911") is not None:
                break
            await asyncio.sleep(0.01)
        registered = sorted(r.broker_addr for r in namesrv.registry)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await namesrv.close()
    assert registered == ["127.0.0.1:10911"]
