"""The local runtime's TLS material (`--set local.tls=permissive|enforcing`, issue 36).

`up` makes, under DIR/tls/, a CA (kept across `up`s, like the other secrets: a client that
trusts `caFile` keeps trusting the runtime) and one server certificate signed by it for
every address a client or a process of this runtime dials: the controllers' (name server,
remoting port), the stable master address, the brokers' range, 127.0.0.1 and localhost.
The server certificate is made again when its names change (another address range) or when
it has less than `RENEW_BEFORE` left; the CA when it has less than that left (then every
certificate with it). Keys are written 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

from brokergroup_cli.local.config import LocalConfig
from brokergroup_cli.local.plan import Layout
from brokergroup_remoting.certificates import Issued, issue, make_ca, names_of, not_after
from brokergroup_remoting.tls import client_context

#: A certificate with less than this left is made again at the next `up`.
RENEW_BEFORE = datetime.timedelta(days=30)
CA_DAYS = 3650
SERVER_DAYS = 365


def server_names(config: LocalConfig) -> list[str]:
    """Every address the runtime's TLS ports are dialled at, in a stable order."""
    names = ["localhost", "127.0.0.1", *config.controller_hosts, config.master_endpoint_host]
    first = ipaddress.ip_address(config.broker_first_host)
    last = ipaddress.ip_address(config.broker_last_host)
    names += [str(ipaddress.ip_address(n)) for n in range(int(first), int(last) + 1)]
    return list(dict.fromkeys(names))


def ensure_certificates(config: LocalConfig, layout: Layout, now: datetime.datetime) -> None:
    """DIR/tls/{ca.crt,ca.key,server.crt,server.key}, made or renewed as the module says."""
    layout.tls_dir.mkdir(mode=0o700, exist_ok=True)
    ca = _read(layout.ca_file, layout.ca_key_file)
    if ca is None or not_after(ca.cert_pem) - now < RENEW_BEFORE:
        ca = make_ca(f"brokergroup local CA ({layout.root.name})", now=now, valid_days=CA_DAYS)
        ca.write(layout.ca_file, layout.ca_key_file)
        layout.tls_cert_file.unlink(missing_ok=True)
    names = server_names(config)
    server = _read(layout.tls_cert_file, layout.tls_key_file)
    if (
        server is None
        or names_of(server.cert_pem) != names
        or not_after(server.cert_pem) - now < RENEW_BEFORE
        or server.certificate.issuer != ca.certificate.subject
    ):
        issue(ca, config.cluster_name, names, now=now, valid_days=SERVER_DAYS).write(
            layout.tls_cert_file, layout.tls_key_file
        )


def controller_tls(config: LocalConfig, layout: Layout) -> ssl.SSLContext | None:
    """How this runtime's own processes (the supervisor and its prober, `local status`)
    reach the controllers' HTTPS API: verified against the CA, the runtime's certificate
    presented (mutual TLS); None while local.tls is disabled (plain HTTP)."""
    if config.tls == "disabled":
        return None
    return client_context(
        layout.ca_file, cert_file=layout.tls_cert_file, key_file=layout.tls_key_file
    )


def broker_http_tls(config: LocalConfig, layout: Layout) -> ssl.SSLContext | None:
    """How the supervisor's prober and `local status` read the brokers' HTTPS ports
    (local.tlsHttp): verified against the CA; None while they are plain HTTP."""
    if not config.tls_http:
        return None
    return client_context(layout.ca_file)


def _read(cert_file: Path, key_file: Path) -> Issued | None:
    if not cert_file.exists() or not key_file.exists():
        return None
    return Issued(cert_file.read_bytes(), key_file.read_bytes())
