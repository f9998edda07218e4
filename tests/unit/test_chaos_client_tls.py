"""How a chaos run chooses its clients' TLS for a runtime (issue 36; chaos/client_tls.py).

`choose` reads what `local status --json` shows (tlsMode, caFile) and whether the brokers'
HTTP ports are HTTPS: TLS in both permissive and enforcing (a run under permissive must not
quietly speak plaintext), nothing while disabled, and a clear error for a status it cannot
trust (an unknown mode, TLS without a CA). The context is the admin CLI's, loaded from the
CA: a real CA file made here verifies, a missing one is named. The stock Java client's
options trust the CA (no test mode, which trusts any server). A TLS setting on the plain
RocketMQ target, which would ignore it, is refused before anything starts; on the local
targets it is no longer refused (the old refusal said "cannot use local.tls").
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import pytest

from brokergroup_cli.chaos.cli import run_chaos
from brokergroup_cli.chaos.client_tls import (
    PLAINTEXT,
    ClientTls,
    choose,
    requested_mode,
    target_refusal,
)
from brokergroup_cli.chaos.runner import Schedule
from brokergroup_cli.main import main
from brokergroup_remoting.certificates import make_ca


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_tls_on_in_either_mode_means_tls_verified_against_the_status_ca(mode: str) -> None:
    tls = choose({"tlsMode": mode, "caFile": "/rt/tls/ca.crt", "namesrvAddress": "x:9876"})
    assert tls == ClientTls(mode, Path("/rt/tls/ca.crt"), False)
    assert (tls.enabled, tls.api_scheme, tls.broker_http_scheme) == (True, "https", "http")
    assert choose({"tlsMode": mode, "caFile": "/c"}, http_tls=True).broker_http_scheme == "https"


def test_a_runtime_without_tls_is_plaintext_everywhere() -> None:
    for status in ({"tlsMode": "disabled", "caFile": None}, {}, {"tlsMode": None}):
        tls = choose(status)
        assert tls == PLAINTEXT
        assert (tls.enabled, tls.api_scheme, tls.broker_http_scheme) == (False, "http", "http")
        assert tls.context() is None
        assert tls.stock_jvm_options() == ()


@pytest.mark.parametrize(
    ("status", "http_tls", "says"),
    [
        ({"tlsMode": "strict", "caFile": "/c"}, False, "'strict' is not one of"),
        ({"tlsMode": 3}, False, "3 is not one of"),
        ({"tlsMode": "enforcing"}, False, "names no caFile"),
        ({"tlsMode": "permissive", "caFile": ""}, False, "names no caFile"),
        ({"tlsMode": "disabled"}, True, "HTTPS but tlsMode is disabled"),
    ],
)
def test_a_status_that_cannot_be_trusted_is_a_clear_error(
    status: dict[str, object], http_tls: bool, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        choose(status, http_tls=http_tls)


def test_the_context_is_the_admin_clis_verifying_context_for_that_ca(tmp_path: Path) -> None:
    ca = make_ca("chaos test CA", now=datetime.datetime.now(datetime.UTC), valid_days=2)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    context = ClientTls("enforcing", ca_file).context()
    assert context is not None
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    subjects = [dict(x[0] for x in c["subject"]) for c in context.get_ca_certs()]
    assert {"commonName": "chaos test CA"} in subjects  # the runtime's CA is trusted
    with pytest.raises(ValueError, match=str(tmp_path / "gone.crt")):
        ClientTls("enforcing", tmp_path / "gone.crt").context()


def test_the_stock_client_trusts_the_runtime_ca_not_any_server() -> None:
    assert ClientTls("permissive", Path("/rt/tls/ca.crt")).stock_jvm_options() == (
        "-Dtls.enable=true",
        "-Dtls.test.mode.enable=false",
        "-Dtls.client.authServer=true",
        "-Dtls.client.trustCertPath=/rt/tls/ca.crt",
    )


def test_the_mode_a_run_asks_for_is_the_last_local_tls_setting() -> None:
    assert requested_mode(()) == "disabled"
    assert requested_mode(("allAckInSyncStateSet=false",)) == "disabled"
    assert requested_mode(("local.tls=permissive", "x=1", "local.tls=enforcing")) == "enforcing"
    assert requested_mode(("local.tlsHttp=true", "local.tls = permissive")) == "permissive"


def test_only_the_local_targets_take_local_tls() -> None:
    tls = ("local.tls=enforcing",)
    assert target_refusal("local", tls) is None
    assert target_refusal("local-rocketmq", tls) is None
    assert target_refusal("rocketmq", ("local.tls=disabled",)) is None
    refusal = target_refusal("rocketmq", tls)
    assert refusal is not None and "local.tls=enforcing applies to the local targets" in refusal


def test_the_rocketmq_target_with_tls_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime_dir = tmp_path / "rt"
    code = main(
        ["chaos", "--target", "rocketmq", "--set", "local.tls=enforcing", "--faults",
         "kill-master", "--windows", "1", "--out", str(tmp_path / "out"), "--dir",
         str(runtime_dir)]
    )  # fmt: skip
    assert code == 2
    assert "applies to the local targets" in capsys.readouterr().err
    assert not runtime_dir.exists()
    with pytest.raises(ValueError, match="applies to the local targets"):
        run_chaos(
            Schedule(("kill-master",), 1, 1), tmp_path / "out", runtime_dir=runtime_dir,
            settings=("local.tls=permissive",), target="rocketmq",
        )  # fmt: skip
    assert not runtime_dir.exists()
