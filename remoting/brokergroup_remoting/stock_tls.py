"""TLS of stock RocketMQ 5.3 processes (brokers and the proxy), as RocketMQ reads it: one
rendering for the operator's engine rocketmq (paths in the pod) and `local up --engine
rocketmq` (paths under the runtime's directory). Pure: paths in, properties and options out.

RocketMQ's TlsSystemConfig takes `tls.server.mode` (disabled / permissive / enforcing: the
remoting server's port), `tls.enable` (every outgoing remoting connection of the JVM: to the
name servers, the controllers, other brokers) and `tls.test.mode.enable` from system
properties only; the certificate paths also from the file `tls.config.file` names, which
TlsHelper.buildSslContext reads again each time it builds a context. RocketMQ's defaults are
permissive with `tls.test.mode.enable=true`: a self-signed certificate made at start, and
clients that trust any server. The stock proxy takes its gRPC and remoting server certificate
from rmq-proxy.json instead (ProxyConfig tlsTestModeEnable / tlsCertPath / tlsKeyPath;
RemotingProtocolServer copies them over TlsSystemConfig's), `proxy_settings`.

Stock HA replication (DefaultHAService / AutoSwitchHAService, DefaultHAConnection,
AutoSwitchHAClient) is plain java.nio SocketChannels with no TLS option: nothing here
reaches it (docs/security.md).
"""

from __future__ import annotations

TLS_MODES = ("disabled", "permissive", "enforcing")


def tls_properties(cert_file: str, key_file: str, trust_file: str) -> dict[str, str]:
    """The `tls.config.file` of a stock broker or proxy: its remoting port serves `cert_file`
    (no client certificate asked: stock clients hold none), and its own connections (with
    `tls.enable`) verify the server against `trust_file` and present the same certificate.
    `key_file` is PKCS#8 PEM, as Netty reads it."""
    return {
        "tls.server.certPath": cert_file,
        "tls.server.keyPath": key_file,
        "tls.server.need.client.auth": "none",
        "tls.server.authClient": "false",
        "tls.client.certPath": cert_file,
        "tls.client.keyPath": key_file,
        "tls.client.trustCertPath": trust_file,
        "tls.client.authServer": "true",
    }


def tls_jvm_options(mode: str, config_file: str, client_tls: bool) -> list[str]:
    """The system properties TlsSystemConfig reads: the server mode, no test mode (RocketMQ's
    default serves a self-signed test certificate), the file above (`config_file`), and
    `tls.enable` for the process's own connections when every server it dials serves TLS
    (`client_tls`; with it off they stay plaintext)."""
    if mode not in TLS_MODES:
        raise ValueError(f"tls.server.mode {mode!r} is not one of {', '.join(TLS_MODES)}")
    options = [
        f"-Dtls.server.mode={mode}",
        "-Dtls.test.mode.enable=false",
        f"-Dtls.config.file={config_file}",
    ]
    if client_tls:
        options.append("-Dtls.enable=true")
    return options


def proxy_settings(cert_file: str, key_file: str) -> dict[str, object]:
    """rmq-proxy.json's TLS: the certificate its gRPC port (ProxyAndTlsProtocolNegotiator) and
    remoting port (RemotingProtocolServer) serve, instead of the self-signed test one."""
    return {"tlsTestModeEnable": False, "tlsCertPath": cert_file, "tlsKeyPath": key_file}
