"""Entry point of the `brokergroup` console script.

Each component registers its own subcommands through a `register(subparsers)`
function that only declares arguments; heavy imports happen inside the
handlers so `brokergroup --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from brokergroup_cli.extras import check_installed


def build_parser() -> argparse.ArgumentParser:
    from brokergroup_audit import cli as audit_cli
    from brokergroup_broker import cli as broker_cli
    from brokergroup_cli import local_cli
    from brokergroup_cli.chaos import cli as chaos_cli
    from brokergroup_cli.kubectl_plugin import cli as kubectl_cli
    from brokergroup_controller import cli as controller_cli
    from brokergroup_operator import cli as operator_cli

    parser = argparse.ArgumentParser(
        prog="brokergroup",
        description="Broker replica groups with RocketMQ 5 Controller-mode HA.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    controller_cli.register(subparsers)
    broker_cli.register(subparsers)
    local_cli.register(subparsers)
    chaos_cli.register(subparsers)
    operator_cli.register(subparsers)
    kubectl_cli.register(subparsers)
    audit_cli.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = check_installed(args.command)
    if missing is not None:
        print(missing, file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
