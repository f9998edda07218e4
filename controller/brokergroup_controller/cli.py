"""`brokergroup controller` and `brokergroup admin …` (docs/architecture.md, Commands).

Only argument declarations live here; handlers import the server, client
and pysyncobj lazily so `brokergroup --help` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

DEFAULT_CONTROLLER_ADDRESSES = "127.0.1.1:9878,127.0.1.2:9878,127.0.1.3:9878"


def register(subparsers: Any) -> None:
    """Add the `controller` and `admin` subcommands to the `brokergroup` parser."""
    controller = subparsers.add_parser(
        "controller",
        help="run one Raft controller node",
        description="Run one controller node (Raft via pysyncobj + HTTP API).",
    )
    controller.add_argument(
        "--node-id", type=int, required=True, help="1-based index of this node in --peers"
    )
    controller.add_argument(
        "--peers",
        required=True,
        help="every node's stable host:raftPort, comma separated (DNS names, never pod IPs)",
    )
    controller.add_argument("--data-dir", required=True, help="Raft journal and snapshots")
    controller.add_argument("--api-port", type=int, default=None, help="HTTP API port (9878)")
    controller.add_argument(
        "--bind-address", default=None, help="address to bind the HTTP API (0.0.0.0)"
    )
    controller.add_argument(
        "--raft-bind-address",
        default=None,
        help="address to bind the Raft port (default: this node's own host in --peers)",
    )
    controller.add_argument(
        "--admin-token-file",
        "--token-file",
        dest="token_file",
        help="file holding the admin credential (the operator's and `brokergroup admin`'s)",
    )
    controller.add_argument(
        "--broker-credential-root-file",
        help="file holding the root secret broker and client credentials are derived from",
    )
    controller.add_argument(
        "--raft-password-file",
        help="file holding the Raft port's shared secret (frames authenticated before decoding)",
    )
    controller.add_argument(
        "--namesrv-port", type=int, default=None, help="RocketMQ name server port (9876; 0: off)"
    )
    controller.add_argument(
        "--namesrv-key-file",
        help="JSON accessKey/secretKey the name server (port 9876) checks signatures with",
    )
    controller.add_argument(
        "--namesrv-master-address-template",
        metavar="TEMPLATE",
        help="stable address routes name as a group's master (brokerId 0), e.g. "
        "'{broker}-master.ns.svc:{port}' ({cluster}, {broker}, {port}: the master's port)",
    )
    controller.add_argument(
        "--namesrv-master-address",
        action="append",
        metavar="CLUSTER/BROKER=HOST:PORT",
        dest="namesrv_master_addresses",
        help="fixed master address of one group in routes (repeatable; ahead of the template)",
    )
    controller.add_argument(
        "--namesrv-master-only-routes",
        nargs="?",
        const="all",
        choices=["stock", "all", "none"],
        metavar="{stock,all,none}",
        help="which groups with a stable master address topic routes name by it alone, no "
        "slaves: stock (default) the groups of stock RocketMQ brokers (a client is then never "
        "counted twice after a failover; built-in groups keep their slaves), all (also the "
        "bare flag), none",
    )
    controller.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="dev only: no API token and an unauthenticated Raft port",
    )
    controller.add_argument(
        "--remoting-port", type=int, default=None, help="RocketMQ controller remoting port (9879)"
    )
    controller.add_argument(
        "--remoting-credentials-file",
        help='JSON {"accessKey","secretKey"} that remoting requests must be signed with',
    )
    controller.add_argument(
        "--remoting-tls-mode",
        choices=["disabled", "permissive", "enforcing"],
        default=None,
        help="RocketMQ's tls.server.mode for the name server and the remoting port "
        "(default disabled; permissive serves plaintext and TLS clients on one port)",
    )
    controller.add_argument("--tls-cert-file", help="PEM certificate of the TLS ports")
    controller.add_argument("--tls-key-file", help="PEM private key of --tls-cert-file")
    controller.add_argument(
        "--tls-ca-file",
        help="PEM CA of the internal links: with --api-tls, controllers verify each other "
        "(forwarding, mutual TLS) and the API verifies client certificates against it",
    )
    controller.add_argument(
        "--api-tls",
        action="store_true",
        help="serve the HTTP API over HTTPS only (needs --tls-cert-file, --tls-key-file and "
        "--tls-ca-file; docs/security.md 'TLS')",
    )
    controller.add_argument("--config", help="controller.json (camelCase settings)")
    controller.add_argument("--log-level", default="INFO", help="Python log level")
    controller.set_defaults(func=_run_controller)

    admin = subparsers.add_parser(
        "admin",
        help="inspect and operate the controller",
        description="Controller administration (like mqadmin).",
    )
    commands = admin.add_subparsers(dest="admin_command", required=True, metavar="ADMIN_COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--controller-addresses",
            default=DEFAULT_CONTROLLER_ADDRESSES,
            help="controller API addresses host:port, comma separated",
        )
        p.add_argument("--token-file", help="bearer token file (default: $BROKERGROUP_TOKEN)")
        p.add_argument(
            "--ca-file",
            help="the API is HTTPS: verify it against this CA (default $BROKERGROUP_CA_FILE, "
            "else the local runtime's tls/ca.crt when its TLS is on)",
        )
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.add_argument("--timeout", type=float, default=5.0, help="seconds per request")
        p.set_defaults(func=_run_admin)

    def broker_set(p: argparse.ArgumentParser, *, many: bool = False) -> None:
        p.add_argument("--cluster-name", default="DefaultCluster")
        if many:
            p.add_argument("--broker-name", required=True, nargs="+")
        else:
            p.add_argument("--broker-name", required=True)

    p = commands.add_parser("replica-info", help="a broker set with liveness per broker")
    broker_set(p)
    common(p)
    p = commands.add_parser(
        "sync-state-set", help="master, epochs and SyncStateSet (mqadmin getSyncStateSet)"
    )
    broker_set(p, many=True)
    common(p)
    p = commands.add_parser("elect-master", help="switch the master to a designated broker")
    broker_set(p)
    p.add_argument("--broker-id", type=int, required=True, help="designated new master")
    common(p)
    p = commands.add_parser(
        "switchover",
        help="move the live master to the best other in-sync replica (the controller ranks)",
    )
    broker_set(p)
    p.add_argument(
        "--eligible-broker-ids", help="comma separated BrokerIds that may take over (default: any)"
    )
    common(p)
    p = commands.add_parser(
        "clean-broker-data", help="forget brokers (mqadmin cleanBrokerMetadata)"
    )
    broker_set(p)
    p.add_argument("--broker-ids", help="comma separated BrokerIds (default: the whole set)")
    p.add_argument("--force", action="store_true", help="even if they are alive")
    common(p)
    p = commands.add_parser("raft", help="Raft status of every controller node")
    common(p)
    p = commands.add_parser("groups", help="every broker set")
    common(p)
    from brokergroup_controller.admin_users import add_user_commands

    add_user_commands(commands, common)
    p = commands.add_parser(
        "events",
        help="record controller events (elections, SyncStateSet changes) as JSON lines",
        description="Follow every group through GET /v1/watch and append one JSON line per "
        "election or SyncStateSet change (the format `brokergroup audit --events` reads).",
    )
    p.add_argument("--out", help="append to this file (default: stdout)")
    p.add_argument("--duration-s", type=float, default=None, help="stop after this long")
    p.add_argument(
        "--poll-timeout-ms", type=int, default=2000, help="long-poll timeout per request"
    )
    common(p)
    p = commands.add_parser(
        "derive-credential",
        help="print a group's broker or client credential (from the root; no controller call)",
        description="The broker or client credential of (clusterName, brokerName), derived "
        "from the root the controllers hold, as the operator and the local runtime derive "
        "it. Write it to a 0600 file and pass that as a broker's or producer's "
        "--controller-token-file (docs/security.md). With --rocketmq: the group's RocketMQ "
        'AccessKey/SecretKey pair instead, as the key-file line {"accessKey": …, '
        "\"secretKey\": …} (a stock client's AclClientRPCHook, a stock broker's "
        "innerClientAuthenticationCredentials, a built-in broker's --remoting-key-file).",
    )
    broker_set(p)
    p.add_argument("--role", choices=["broker", "client"], required=True)
    p.add_argument("--root-file", required=True, help="file holding the broker credential root")
    p.add_argument(
        "--rocketmq", action="store_true", help="print the group's RocketMQ key pair (JSON)"
    )
    p.set_defaults(func=_derive_credential)


def _derive_credential(args: argparse.Namespace) -> int:
    from pathlib import Path

    from brokergroup_controller.credentials import Role, derive_credential, derive_rocketmq_pair

    root = Path(args.root_file).read_text().strip()
    role = Role(args.role)
    if args.rocketmq:
        print(derive_rocketmq_pair(root, role, args.cluster_name, args.broker_name).to_json())
    else:
        print(derive_credential(root, role, args.cluster_name, args.broker_name))
    return 0


def _run_controller(args: argparse.Namespace) -> int:
    import logging
    import sys

    from brokergroup_controller import app as controller_app
    from brokergroup_controller.config import load_config

    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = load_config(
            config_path=args.config,
            node_id=args.node_id,
            peers=args.peers,
            data_dir=args.data_dir,
            api_port=args.api_port,
            bind_address=args.bind_address,
            raft_bind_address=args.raft_bind_address,
            token_file=args.token_file,
            raft_password_file=args.raft_password_file,
            broker_credential_root_file=args.broker_credential_root_file,
            insecure_no_auth=args.insecure_no_auth,
            remoting_port=args.remoting_port,
            remoting_credentials_file=args.remoting_credentials_file,
            namesrv_key_file=args.namesrv_key_file,
            namesrv_port=args.namesrv_port,
            namesrv_master_address_template=args.namesrv_master_address_template,
            namesrv_master_addresses=args.namesrv_master_addresses,
            namesrv_master_only_routes=args.namesrv_master_only_routes,
            remoting_tls_mode=args.remoting_tls_mode,
            tls_cert_file=args.tls_cert_file,
            tls_key_file=args.tls_key_file,
            tls_ca_file=args.tls_ca_file,
            api_tls=args.api_tls,
        )
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"brokergroup controller: invalid configuration: {exc}\n")
        return 2
    from brokergroup_remoting import event_loop

    try:
        event_loop.run(controller_app.serve(config))
    except event_loop.EventLoopError as exc:
        sys.stderr.write(f"brokergroup controller: {exc}\n")
        return 2
    return 0


def _run_admin(args: argparse.Namespace) -> int:
    from brokergroup_controller import admin

    return admin.run(args)


def main(argv: list[str] | None = None) -> int:
    """Entry used by tests and `python -m brokergroup_controller.cli`, without the other components."""
    parser = argparse.ArgumentParser(prog="brokergroup")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
