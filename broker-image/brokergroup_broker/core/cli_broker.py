"""`brokergroup broker …` (docs/architecture.md, Commands).

`register` only declares arguments (brokergroup_broker/cli.py imports this
module and calls it) (cheap imports);
`run_broker_command` loads the config once, builds the controller client
and runs `Broker` under asyncio until SIGTERM/SIGINT, then stops it
gracefully (pending produces get the protocol server's grace period, a
master tells the controller it is going away so failover starts at once).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import ssl
import sys
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger("brokergroup_broker")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "broker",
        help="run one broker of a replica group",
        description="Run a broker: commit log store, AutoSwitch HA, client protocol.",
    )
    parser.add_argument("--cluster-name", required=True)
    parser.add_argument("--broker-name", required=True)
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument(
        "--controller-addresses",
        required=True,
        help="comma-separated controller API addresses host:port",
    )
    parser.add_argument("--controller-token-file", type=Path, default=None)
    parser.add_argument(
        "--ha-secret-file",
        type=Path,
        default=None,
        help="the group's HA secret: slaves and master prove it before any HA frame",
    )
    parser.add_argument(
        "--insecure-no-ha-auth",
        action="store_true",
        help="dev only: an unauthenticated HA port (anyone who reaches it can pose as a slave)",
    )
    parser.add_argument("--bind-address", default="0.0.0.0")
    parser.add_argument(
        "--advertise-address",
        default=None,
        help="address registered with the controller (default: the bind address)",
    )
    parser.add_argument("--client-port", type=int, default=10911)
    parser.add_argument(
        "--remoting-port",
        type=int,
        default=None,
        help="RocketMQ remoting port for stock clients (default: client port + 3); open only "
        "with --remoting-key-file or --insecure-no-remoting-auth",
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="gRPC port for the RocketMQ 5 SDKs (default: client port + 4; -1: none); served "
        "with the remoting port, under its key pairs (docs/grpc.md)",
    )
    parser.add_argument(
        "--remoting-key-file",
        type=Path,
        default=None,
        help='JSON {"accessKey", "secretKey"}: the group\'s BROKER key pair; it signs the '
        "registrations with the name servers and the remoting port accepts it",
    )
    parser.add_argument(
        "--remoting-client-key-file",
        type=Path,
        default=None,
        help="the group's CLIENT key pair (same format): what stock clients sign with "
        "(AclClientRPCHook); the remoting port accepts it too. Needs --remoting-key-file",
    )
    parser.add_argument(
        "--remoting-client-key-optional",
        action="store_true",
        help="a missing --remoting-client-key-file means no client pair (the port then takes "
        "the broker pair alone): the file is an optional key of the pod's Secret",
    )
    parser.add_argument(
        "--insecure-no-client-auth",
        action="store_true",
        help="dev only: a client port (--client-port) that serves connections without a key "
        "pair; without it the port needs --remoting-key-file (the group's pairs, "
        "docs/protocol.md 'Authentication')",
    )
    parser.add_argument(
        "--insecure-no-remoting-auth",
        action="store_true",
        help="dev only: a remoting port that takes unsigned requests",
    )
    parser.add_argument(
        "--remoting-tls-mode",
        choices=["disabled", "permissive", "enforcing"],
        default="disabled",
        help="RocketMQ's tls.server.mode for the remoting port (permissive serves plaintext "
        "and TLS clients on one port; enforcing TLS only); needs --tls-cert-file/--tls-key-file",
    )
    parser.add_argument(
        "--client-tls-mode",
        choices=["disabled", "permissive", "enforcing"],
        default=None,
        help="the same modes for the client protocol port (default: --remoting-tls-mode)",
    )
    parser.add_argument(
        "--grpc-tls-mode",
        choices=["disabled", "permissive", "enforcing"],
        default=None,
        help="the same modes for the gRPC port (default: --remoting-tls-mode; "
        "grpc_front/tls_front.py)",
    )
    parser.add_argument(
        "--tls-cert-file", help="PEM certificate of this broker's TLS ports and links"
    )
    parser.add_argument("--tls-key-file", help="PEM private key of --tls-cert-file")
    parser.add_argument(
        "--tls-ca-file",
        help="the CA (PEM): the name servers are reached over TLS, verified against it; with "
        "--tls-cert-file/--tls-key-file HA replication runs mutual TLS",
    )
    parser.add_argument(
        "--ha-tls-server-name",
        default=None,
        help="HA's mutual TLS: verify the master's certificate for this name instead of its "
        "address (Kubernetes: the group's Service name; a pod IP is in no certificate)",
    )
    parser.add_argument(
        "--namesrv-plaintext",
        action="store_true",
        help="register with the name servers in plaintext even with --tls-ca-file (their "
        "TLS mode is disabled; HA and the controllers' API still use the CA)",
    )
    parser.add_argument(
        "--controller-tls",
        action="store_true",
        help="reach the controllers' HTTPS API (controller --api-tls), verified against "
        "--tls-ca-file, presenting --tls-cert-file",
    )
    parser.add_argument(
        "--http-tls",
        action="store_true",
        help="serve the HTTP port (probes, /v1/status, /metrics) over HTTPS only with "
        "--tls-cert-file, and read the peers' HTTP ports over HTTPS verified against "
        "--tls-ca-file (every broker of the group the same; off by default)",
    )
    parser.add_argument(
        "--namesrv-addresses",
        default="",
        help="name servers to register the remoting port with (host:9876, ';' or ',' separated)",
    )
    parser.add_argument("--config", type=Path, default=None, help="broker.json (camelCase)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one config field (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(func=run_broker_command)


def run_broker_command(args: argparse.Namespace) -> int:
    from brokergroup_broker.core.broker_settings import BrokerSettings
    from brokergroup_broker.core.config import BrokerConfigError, load_broker_config
    from brokergroup_broker.core.registration import RegistrationFailed
    from brokergroup_controller.api import INCARNATION_ENV
    from brokergroup_controller.client import tls_context
    from brokergroup_remoting.tls import client_context, load_server_tls

    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_broker_config(args.config, args.overrides)
    except BrokerConfigError as exc:
        print(f"brokergroup broker: {exc}", file=sys.stderr)
        return 2
    token = None
    if args.controller_token_file is not None:
        token = args.controller_token_file.read_text().strip()
    ha_secret: bytes | None = None
    if args.ha_secret_file is not None:
        if args.insecure_no_ha_auth:
            print("brokergroup broker: --ha-secret-file and --insecure-no-ha-auth conflict",
                  file=sys.stderr)  # fmt: skip
            return 2
        try:
            ha_secret = args.ha_secret_file.read_bytes().strip()
        except OSError as exc:
            print(f"brokergroup broker: cannot read --ha-secret-file: {exc}", file=sys.stderr)
            return 2
        if len(ha_secret) < 16:
            print(f"brokergroup broker: {args.ha_secret_file} must hold at least 16 bytes",
                  file=sys.stderr)  # fmt: skip
            return 2
    elif not args.insecure_no_ha_auth:
        print(
            "brokergroup broker: --ha-secret-file is required (or --insecure-no-ha-auth for "
            "development): the HA port authenticates its peers (docs/security.md)",
            file=sys.stderr,
        )
        return 2
    advertise = args.advertise_address
    if advertise is None:
        if args.bind_address in ("0.0.0.0", "::", ""):
            print(
                "brokergroup broker: --advertise-address is required when binding all "
                "interfaces (the controller must record a reachable address)",
                file=sys.stderr,
            )
            return 2
        advertise = args.bind_address
    pairs = _remoting_pairs(args)
    if isinstance(pairs, str):
        print(f"brokergroup broker: {pairs}", file=sys.stderr)
        return 2
    remoting_credentials, remoting_client_credentials = pairs
    if remoting_credentials is None and not args.insecure_no_client_auth:
        print(
            "brokergroup broker: --remoting-key-file is required (or --insecure-no-client-auth "
            "for development): the client port authenticates with the group's key pairs "
            "(docs/security.md)",
            file=sys.stderr,
        )
        return 2
    if remoting_credentials is not None and args.insecure_no_client_auth:
        print("brokergroup broker: --remoting-key-file and --insecure-no-client-auth conflict",
              file=sys.stderr)  # fmt: skip
        return 2
    remoting_on = remoting_credentials is not None or args.insecure_no_remoting_auth
    namesrv = tuple(
        a.strip() for a in str(args.namesrv_addresses).replace(";", ",").split(",") if a.strip()
    )
    if namesrv and not remoting_on:
        print("brokergroup broker: --namesrv-addresses needs the remoting port "
              "(--remoting-key-file)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        remoting_tls = load_server_tls(
            args.remoting_tls_mode, args.tls_cert_file, args.tls_key_file
        )
        namesrv_tls = (
            None
            if args.tls_ca_file is None or args.namesrv_plaintext
            else client_context(Path(args.tls_ca_file))
        )
        client_tls = load_server_tls(
            args.client_tls_mode or args.remoting_tls_mode, args.tls_cert_file, args.tls_key_file
        )
        grpc_tls = load_server_tls(
            args.grpc_tls_mode or args.remoting_tls_mode,
            args.tls_cert_file,
            args.tls_key_file,
            alpn=("h2",),
        )
        ha_tls_server, ha_tls_client = _ha_tls(args)
        if args.controller_tls and not (args.tls_ca_file and args.tls_cert_file):
            raise ValueError(
                "--controller-tls needs --tls-ca-file, --tls-cert-file, --tls-key-file"
            )
        controller_tls = (
            tls_context(args.tls_ca_file, args.tls_cert_file, args.tls_key_file)
            if args.controller_tls
            else None
        )
        http_tls, http_tls_client = _http_tls(args)
    except (OSError, ssl.SSLError, ValueError) as exc:
        print(f"brokergroup broker: {exc}", file=sys.stderr)
        return 2
    settings = BrokerSettings(
        cluster_name=args.cluster_name,
        broker_name=args.broker_name,
        data_dir=args.data_dir,
        controller_addresses=tuple(
            a.strip() for a in str(args.controller_addresses).split(",") if a.strip()
        ),
        controller_token=token,
        bind_address=args.bind_address,
        advertise_address=advertise,
        client_port=args.client_port,
        ha_secret=ha_secret,
        remoting_port=(
            (args.remoting_port if args.remoting_port is not None else args.client_port + 3)
            if remoting_on
            else None
        ),
        grpc_port=(
            (args.grpc_port if args.grpc_port is not None else args.client_port + 4)
            if remoting_on and args.grpc_port != -1
            else None
        ),
        remoting_credentials=remoting_credentials,
        remoting_client_credentials=remoting_client_credentials,
        namesrv_addresses=namesrv,
        remoting_tls=remoting_tls,
        namesrv_tls=namesrv_tls,
        client_tls=client_tls,
        grpc_tls=grpc_tls,
        ha_tls_server=ha_tls_server,
        ha_tls_client=ha_tls_client,
        ha_tls_server_name=args.ha_tls_server_name,
        controller_tls=controller_tls,
        http_tls=http_tls,
        http_tls_client=http_tls_client,
        # Set by whoever started this process (pod uid, local supervisor).
        incarnation=os.environ.get(INCARNATION_ENV) or uuid.uuid4().hex,
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    from brokergroup_broker import kernels
    from brokergroup_remoting import event_loop

    try:
        kernels.check()
        failed = event_loop.run(_main(settings, config))
    except (event_loop.EventLoopError, kernels.KernelError) as exc:
        print(f"brokergroup broker: {exc}", file=sys.stderr)
        return 2
    except RegistrationFailed as exc:
        log.error("registration failed: %s", exc)
        return 1
    return 1 if failed else 0


def _ha_tls(args: argparse.Namespace) -> tuple[Any, Any]:
    """(master, slave) contexts of HA's mutual TLS: on when the certificate, key and CA are
    all given (both ends of an internal link hold certificates); else (None, None)."""
    from brokergroup_remoting.tls import client_context, server_context

    if not (args.tls_cert_file and args.tls_key_file and args.tls_ca_file):
        return None, None
    cert, key, ca = Path(args.tls_cert_file), Path(args.tls_key_file), Path(args.tls_ca_file)
    return (
        server_context(cert, key, client_ca_file=ca),
        client_context(ca, cert_file=cert, key_file=key),
    )


def _http_tls(args: argparse.Namespace) -> tuple[Any, Any]:
    """(server, peer client) contexts of `--http-tls`; (None, None) without it."""
    from brokergroup_remoting.tls import client_context, server_context

    if not args.http_tls:
        return None, None
    if not (args.tls_cert_file and args.tls_key_file and args.tls_ca_file):
        raise ValueError("--http-tls needs --tls-cert-file, --tls-key-file and --tls-ca-file")
    cert, key, ca = Path(args.tls_cert_file), Path(args.tls_key_file), Path(args.tls_ca_file)
    return server_context(cert, key), client_context(ca, cert_file=cert, key_file=key)


def _remoting_pairs(args: argparse.Namespace) -> tuple[Any, Any] | str:
    """(broker pair, client pair) from the key files, or why not (naming the file, never
    the secret): a derived pair must be this group's, of the role its flag says."""
    from brokergroup_broker.core.remoting_keys import pair_mismatch
    from brokergroup_controller.credentials import Role
    from brokergroup_remoting.keys import read_key_file

    if args.remoting_client_key_file is not None and args.remoting_key_file is None:
        return "--remoting-client-key-file needs --remoting-key-file (the group's broker pair)"
    if args.remoting_client_key_optional and args.remoting_client_key_file is None:
        return "--remoting-client-key-optional needs --remoting-client-key-file"
    if args.remoting_key_file is not None and args.insecure_no_remoting_auth:
        return "--remoting-key-file and --insecure-no-remoting-auth conflict"
    pairs: list[Any] = []
    for flag, path, role in (
        ("--remoting-key-file", args.remoting_key_file, Role.BROKER),
        ("--remoting-client-key-file", args.remoting_client_key_file, Role.CLIENT),
    ):
        if path is None:
            pairs.append(None)
            continue
        if role is Role.CLIENT and args.remoting_client_key_optional and not path.exists():
            log.info("%s %s is not there: the remoting port takes the broker pair alone",
                     flag, path)  # fmt: skip
            pairs.append(None)
            continue
        try:
            pair = read_key_file(str(path))
        except (OSError, ValueError) as exc:
            return f"{flag}: {exc}"
        why = pair_mismatch(pair, role, args.cluster_name, args.broker_name)
        if why is not None:
            return f"{flag} {path}: {why}"
        pairs.append(pair)
    return pairs[0], pairs[1]


async def _main(settings: Any, config: Any) -> bool:
    from brokergroup_broker.core.broker import Broker
    from brokergroup_broker.core.controller_link import ControllerLink
    from brokergroup_controller.client import ControllerClient

    _tune_gc()

    client = ControllerClient(
        settings.controller_addresses,
        settings.controller_token,
        request_timeout_s=config.controller_request_timeout_ms / 1000,
        # From the broker's own address, like its HA client: one host per broker.
        source_host=None
        if settings.bind_address in ("0.0.0.0", "::", "")
        else settings.bind_address,
        tls=settings.controller_tls,
    )
    broker = Broker(
        settings, config, ControllerLink(client, settings.cluster_name, settings.broker_name)
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, broker.request_stop)
    await broker.run()
    return broker.failed


#: Young-generation threshold of the cyclic GC. Python's default (700 allocations)
#: runs a collection every ~100 produced messages (each allocates a few objects);
#: profiles of the master under load showed the collector at ~7% of its CPU. The
#: hot path makes almost no reference cycles, so collecting 30x less often costs
#: little memory.
_GC_GEN0_THRESHOLD = 20_000


def _tune_gc() -> None:
    """Freeze what start-up allocated (modules, config) so full collections do not
    walk it again and again, and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(_GC_GEN0_THRESHOLD, gen1, gen2)


def main(argv: list[str] | None = None) -> int:
    """`python -m brokergroup_broker.core.cli_broker broker …`: the broker alone,
    without importing the other components' commands (tests, images)."""
    parser = argparse.ArgumentParser(prog="brokergroup")
    subparsers = parser.add_subparsers(dest="command", required=True)
    register(subparsers)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
