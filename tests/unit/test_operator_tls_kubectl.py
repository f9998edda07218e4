"""`kubectl brokergroup status` shows the certificate's expiry from the operator's record
(status.tls, written by tls_material.py): days left, expired, the cluster CA's, in text and
JSON; a group without spec.tls shows no such line."""

from __future__ import annotations

import datetime
from typing import Any

from brokergroup_cli.kubectl_plugin.view import group_status, render_text

NOW = datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC)


def body(tls: dict[str, Any] | None) -> dict[str, Any]:
    status: dict[str, Any] = {"ready": "3/3", "masterEpoch": 2}
    if tls is not None:
        status["tls"] = tls
    return {
        "metadata": {"name": "bg", "namespace": "ns"},
        "spec": {"replicas": 3},
        "status": status,
    }


RECORD = {
    "mode": "enforcing",
    "issuer": "operator",
    "secretName": "bg-tls",
    "notAfter": "2027-01-31T00:00:00Z",
    "caNotAfter": "2031-12-31T00:00:00Z",
    "digest": "0123456789abcdef",
}


def tls_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("tls:")]


def test_status_shows_the_certificate_and_ca_expiry_with_days_left() -> None:
    assert tls_lines(render_text(group_status(body(RECORD)), NOW)) == [
        "tls: enforcing, issuer operator, certificate bg-tls, expires 2027-01-31T00:00:00Z "
        "(30 days left), cluster CA expires 2031-12-31T00:00:00Z (1825 days left)"
    ]
    assert group_status(body(RECORD)).to_json()["tls"] == RECORD


def test_an_expired_certificate_says_so() -> None:
    expired = {**RECORD, "notAfter": "2026-12-22T00:00:00Z"}
    (line,) = tls_lines(render_text(group_status(body(expired)), NOW))
    assert "expires 2026-12-22T00:00:00Z (EXPIRED 10 days ago)" in line


def test_the_users_own_secret_and_no_tls() -> None:
    own = {"mode": "permissive", "issuer": "secret", "secretName": "mine"}
    assert tls_lines(render_text(group_status(body(own)), NOW)) == [
        "tls: permissive, issuer secret, certificate mine (the user's own: expiry not known "
        "to the operator)"
    ]
    assert tls_lines(render_text(group_status(body(None)), NOW)) == []
    assert group_status(body(None)).to_json()["tls"] is None
