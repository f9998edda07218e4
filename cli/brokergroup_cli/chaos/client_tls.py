"""How a chaos run reaches a runtime that runs TLS (`--set local.tls=permissive|enforcing`,
issue 36; docs/security.md "TLS").

A run's every connection to the runtime goes over TLS when the runtime has it on, in
both modes (permissive would still take plaintext; a run that proves nothing is lost
under TLS must not quietly speak plaintext there): the probes of the controllers' API
(HTTPS, as `brokergroup admin`), the own workload's producers and consumers and the
checker's read-back (TLS to the brokers' client ports, as `brokergroup produce`), the
brokers' HTTP ports when they are HTTPS (local.tlsHttp), and the stock Java client and
its `mqadmin updateTopic` (`-Dtls.enable=true`, verifying every server against the CA).

Pure: `choose` takes what `brokergroup local status --json` shows (`tlsMode`,
`caFile`) and whether the brokers' HTTP ports serve HTTPS, and returns the
`ClientTls`; `stock_jvm_options` gives the stock client's TlsSystemConfig switches.
The SSL context is not a second client configuration: `ClientTls.context` is the admin
CLI's (`brokergroup_controller.admin.resolve_api_tls` with the CA named), the one
context `brokergroup produce` uses for the controllers and the brokers alike.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from brokergroup_remoting.stock_tls import TLS_MODES

DISABLED = "disabled"
#: The `local up` setting a run passes on with `--set`.
TLS_SETTING = "local.tls"


@dataclass(frozen=True)
class ClientTls:
    """The TLS a run's clients use against one runtime."""

    mode: str = DISABLED
    """The runtime's `tls.server.mode` (RocketMQ's disabled / permissive / enforcing)."""
    ca_file: Path | None = None
    """The runtime's CA: every server is verified against it (host name included)."""
    http_tls: bool = False
    """The brokers' HTTP ports (`/v1/status`, probes) serve HTTPS only (local.tlsHttp)."""

    @property
    def enabled(self) -> bool:
        return self.mode != DISABLED

    @property
    def api_scheme(self) -> str:
        """The controllers' API: HTTPS only whenever the runtime has TLS on."""
        return "https" if self.enabled else "http"

    @property
    def broker_http_scheme(self) -> str:
        return "https" if self.http_tls else "http"

    def context(self) -> ssl.SSLContext | None:
        """The admin CLI's client context for this CA (None: plaintext). ValueError names
        a CA file that does not load."""
        if not self.enabled:
            return None
        from brokergroup_controller.admin import resolve_api_tls

        return resolve_api_tls(str(self.ca_file))

    def stock_jvm_options(self) -> tuple[str, ...]:
        """The stock RocketMQ Java client's TLS (TlsSystemConfig reads system properties):
        TLS on every connection, no test mode (which trusts any server), each server
        verified against the runtime's CA. Empty while TLS is off."""
        if not self.enabled:
            return ()
        return (
            "-Dtls.enable=true",
            "-Dtls.test.mode.enable=false",
            "-Dtls.client.authServer=true",
            f"-Dtls.client.trustCertPath={self.ca_file}",
        )


PLAINTEXT = ClientTls()


def choose(status: Mapping[str, object], *, http_tls: bool = False) -> ClientTls:
    """The client TLS for a runtime from its `local status --json` fields (`tlsMode`,
    `caFile`; a status without them is a runtime without TLS) and whether its brokers'
    HTTP ports are HTTPS. ValueError: a mode RocketMQ does not have, TLS on without a
    CA to verify against, or HTTPS brokers' ports without TLS."""
    mode = status.get("tlsMode") or DISABLED
    if not isinstance(mode, str) or mode not in TLS_MODES:
        raise ValueError(f"tlsMode {mode!r} is not one of {', '.join(TLS_MODES)}")
    ca_file = status.get("caFile")
    if mode == DISABLED:
        if http_tls:
            raise ValueError("the brokers' HTTP ports serve HTTPS but tlsMode is disabled")
        return PLAINTEXT
    if not isinstance(ca_file, str) or not ca_file:
        raise ValueError(f"tlsMode {mode} but the status names no caFile to verify against")
    return ClientTls(mode, Path(ca_file), http_tls)


def requested_mode(settings: Sequence[str]) -> str:
    """The `local.tls` a run's `--set` settings ask for (the last one wins, as in `local
    up`); disabled when none does."""
    mode = DISABLED
    for item in settings:
        key, sep, value = item.partition("=")
        if sep and key.strip() == TLS_SETTING:
            mode = value.strip()
    return mode


def target_refusal(target: str, settings: Sequence[str]) -> str | None:
    """Why `target` cannot run with these settings' TLS, or None. Only the local targets
    take `local.tls`; the plain RocketMQ group (`rocketmq`) would ignore it and the run
    would claim TLS it never had."""
    mode = requested_mode(settings)
    if mode == DISABLED or target in ("local", "local-rocketmq"):
        return None
    return (
        f"{TLS_SETTING}={mode} applies to the local targets (local, local-rocketmq): the "
        f"{target} target's stock group runs without TLS"
    )
