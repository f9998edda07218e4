"""`brokergroup chaos` refuses a TLS local runtime at once (issue 36 item 1): its controller
probes speak plain HTTP and its producers/consumers plaintext, so a run with
`--set local.tls=permissive|enforcing` would start a runtime and then fail in its first probe.
It says why on stderr and exits 2 before any runtime starts (no runtime directory made);
`local.tls=disabled` is not refused by this check."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokergroup_cli.main import main


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_a_tls_runtime_is_refused_before_anything_starts(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime_dir = tmp_path / "rt"
    code = main(
        ["chaos", "--set", f"local.tls={mode}", "--faults", "kill-master", "--windows", "1",
         "--out", str(tmp_path / "out"), "--dir", str(runtime_dir)]
    )  # fmt: skip
    assert code == 2
    assert "cannot use local.tls" in capsys.readouterr().err
    assert not runtime_dir.exists()
