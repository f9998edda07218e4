"""Subcommands of the broker component: `broker`, `produce`, `consume`.

Only argument declarations here; the handlers (asyncio, the client library)
are imported when a command runs, so `brokergroup --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

#: The local runtime's controllers (docs/architecture.md, "Addresses").
DEFAULT_CONTROLLERS = "127.0.1.1:9878,127.0.1.2:9878,127.0.1.3:9878"


def register(subparsers: Any) -> None:
    _register_broker_command(subparsers)
    _register_produce(subparsers)
    _register_consume(subparsers)


def _register_broker_command(subparsers: Any) -> None:
    # ---- `brokergroup broker` belongs to the broker core. -----------------
    # It lives in brokergroup_broker/core/cli_broker.py as
    # `register(subparsers)`; registered here once that module exists, so
    # this file needs no edit. Only the module's own absence is tolerated:
    # an import error inside it must surface.
    name = "brokergroup_broker.core.cli_broker"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name in (name, "brokergroup_broker.core"):
            return
        raise
    module.register(subparsers)


def _connection_args(parser: argparse.ArgumentParser, *, many_addresses: bool) -> None:
    group = parser.add_argument_group("where the broker group is")
    group.add_argument(
        "--controller-addresses",
        default=os.environ.get("BROKERGROUP_CONTROLLER_ADDRESSES", DEFAULT_CONTROLLERS),
        help="controller API addresses host:port,... used to find the master "
        "(env BROKERGROUP_CONTROLLER_ADDRESSES; default the local runtime's)",
    )
    group.add_argument(
        "--controller-token-file",
        default=None,
        help="file holding the controller bearer token (env BROKERGROUP_CONTROLLER_TOKEN)",
    )
    group.add_argument(
        "--key-file",
        default=None,
        help='the group\'s client key pair, JSON {"accessKey", "secretKey"}: every broker '
        "connection proves it (env BROKERGROUP_KEY_FILE; default the local runtime's "
        "client-keys.json)",
    )
    group.add_argument(
        "--ca-file",
        default=None,
        help="TLS to the brokers' client ports and the controllers' HTTPS API, verified against "
        "this CA (env BROKERGROUP_CA_FILE; default the local runtime's tls/ca.crt when its TLS "
        "is on)",
    )
    group.add_argument("--cluster-name", default="DefaultCluster")
    group.add_argument("--broker-name", default="broker-a")
    group.add_argument(
        "--broker-address",
        default=None,
        help=(
            "broker address(es) host:port,... to use instead of the controller, "
            "best first (e.g. the master Service, then the replicas)"
            if many_addresses
            else "broker address host:port to use instead of the controller "
            "(e.g. the Kubernetes Service selecting role=master)"
        ),
    )
    group.add_argument(
        "--retry-deadline-ms",
        type=int,
        default=20_000,
        help="longest time one request may spend retrying across failovers",
    )


def _produce(args: argparse.Namespace) -> int:
    from brokergroup_broker.protocol.commands import cmd_produce

    return cmd_produce(args)


def _consume(args: argparse.Namespace) -> int:
    from brokergroup_broker.protocol.commands import cmd_consume

    return cmd_consume(args)


def _register_produce(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "produce",
        help="send test messages to a broker group's master",
        description="Send --count messages of --size bytes, --batch per request with "
        "--in-flight requests pipelined; follows failovers. Exit status 1 if any failed.",
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=1000, help="messages to send")
    p.add_argument("--size", type=int, default=1024, help="body bytes per message")
    p.add_argument("--batch", type=int, default=1, help="messages per request")
    p.add_argument("--in-flight", type=int, default=16, help="requests pipelined at once")
    p.add_argument("--queue-id", type=int, default=None, help="fixed queue (default: any)")
    p.add_argument("--tags", default=None)
    p.add_argument(
        "--key-prefix",
        default=None,
        help="message keys are PREFIX0, PREFIX1, ... (default a random run id and '-')",
    )
    p.add_argument(
        "--ack-log",
        default=None,
        help="append one JSON line per acknowledged message (for audit and chaos checks)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON summary object")
    _connection_args(p, many_addresses=False)
    p.set_defaults(func=_produce)


def _register_consume(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "consume",
        help="read messages from a broker group",
        description="Pull every queue of --topic from the master, or from live replicas "
        "when there is none; stop after --max-messages or --idle-timeout-ms without news.",
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--from-beginning", action="store_true", help="start at each queue's min offset")
    p.add_argument("--group", default=None, help="consumer group: resume from and commit offsets")
    p.add_argument("--max-messages", type=int, default=None)
    p.add_argument("--idle-timeout-ms", type=int, default=3_000)
    p.add_argument("--pull-batch", type=int, default=32, help="messages per pull request")
    p.add_argument("--json", action="store_true", help="one JSON object per message")
    _connection_args(p, many_addresses=True)
    p.set_defaults(func=_consume)
