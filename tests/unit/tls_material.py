"""Certificates for the TLS tests (brokergroup_remoting.certificates), written to files as a
server loads them: a CA, a server certificate of that CA, one of another CA, an expired one."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from brokergroup_remoting.certificates import Issued, issue, make_ca


@dataclass(frozen=True)
class Material:
    ca_file: Path
    cert_file: Path
    key_file: Path
    other_ca_file: Path
    other_cert_file: Path
    other_key_file: Path
    expired_cert_file: Path
    expired_key_file: Path


def _write(directory: Path, name: str, issued: Issued) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    issued.write(cert, key)
    return cert, key


def make_material(directory: Path, now: datetime.datetime) -> Material:
    """A CA, a server certificate for localhost/127.0.0.1, one from another CA and an
    expired one, written under `directory`."""
    ca = make_ca("brokergroup test CA", now=now)
    other_ca = make_ca("someone else's CA", now=now)
    ca_file, _ = _write(directory, "ca", ca)
    other_ca_file, _ = _write(directory, "other-ca", other_ca)
    names = ["localhost", "127.0.0.1"]
    cert, key = _write(directory, "server", issue(ca, "broker-a-0", names, now=now))
    other_cert, other_key = _write(directory, "other", issue(other_ca, "impostor", names, now=now))
    long_ago = now - datetime.timedelta(days=400)
    expired = issue(ca, "broker-old", names, now=long_ago, valid_days=30)
    expired_cert, expired_key = _write(directory, "expired", expired)
    return Material(
        ca_file, cert, key, other_ca_file, other_cert, other_key, expired_cert, expired_key
    )
