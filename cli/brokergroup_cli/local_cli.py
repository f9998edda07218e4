"""`brokergroup local {up,status,kill,down}`: the local runtime (DESIGN.md §4).

Only argument declarations here; the handlers (and aiohttp) are imported
when a command runs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

#: Also where `brokergroup admin` looks for the token (BROKERGROUP_LOCAL_DIR overrides both).
DEFAULT_DIR = os.environ.get("BROKERGROUP_LOCAL_DIR") or "~/.brokergroup/local"


def _dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        default=DEFAULT_DIR,
        help=f"the installation's directory: data, logs, state.json (default {DEFAULT_DIR})",
    )


def _up(args: argparse.Namespace) -> int:
    from brokergroup_cli.local.commands import cmd_up

    return cmd_up(args)


def _status(args: argparse.Namespace) -> int:
    from brokergroup_cli.local.commands import cmd_status

    return cmd_status(args)


def _kill(args: argparse.Namespace) -> int:
    from brokergroup_cli.local.commands import cmd_kill

    return cmd_kill(args)


def _down(args: argparse.Namespace) -> int:
    from brokergroup_cli.local.commands import cmd_down

    return cmd_down(args)


def register(subparsers: Any) -> None:
    local = subparsers.add_parser(
        "local",
        help="run a whole installation on this machine (no Kubernetes)",
        description="3 controllers and a BrokerGroup of N brokers as local processes, "
        "supervised; see docs/local.md.",
    )
    commands = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")

    up = commands.add_parser(
        "up",
        help="start controllers, brokers and the supervisor",
        description="Start 3 controllers (127.0.1.1-3) and N brokers (127.0.0.10 upward) "
        "under a supervisor that restarts them; show a live status view until Ctrl-C, "
        "or with --detach return once the group has a master.",
    )
    up.add_argument("--brokers", type=int, default=3, help="brokers in the group (default 3)")
    up.add_argument(
        "--groups",
        type=int,
        default=1,
        help="BrokerGroups of the cluster under the same controllers: broker-a, broker-b, … "
        "(default 1); a topic spans them, a user (brokergroup admin user) signs for all",
    )
    up.add_argument(
        "--engine",
        choices=("builtin", "rocketmq"),
        default="builtin",
        help="builtin: this project's brokers; rocketmq: stock RocketMQ 5.3 brokers in "
        "controller mode (jars from tools/rocketmq/fetch.sh server; docs/rocketmq-compatibility.md)",
    )
    _dir(up)
    up.add_argument(
        "--detach",
        action="store_true",
        help="run the supervisor in the background and return once there is a master",
    )
    up.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="broker setting (name=v or broker.name=v), controller setting "
        "(controller.name=v) or local runtime setting (local.name=v); repeatable",
    )
    up.set_defaults(func=_up)

    status = commands.add_parser("status", help="one status snapshot")
    _dir(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_status)

    kill = commands.add_parser(
        "kill",
        help="SIGKILL one process: master, broker-ID, controller-leader, controller-N",
    )
    kill.add_argument("target", help="master | broker-ID | controller-leader | controller-N")
    _dir(kill)
    kill.set_defaults(func=_kill)

    down = commands.add_parser("down", help="stop the supervisor and every child")
    _dir(down)
    down.add_argument(
        "--purge",
        action="store_true",
        help="also delete the data, logs and token (BrokerIds and epochs are lost)",
    )
    down.set_defaults(func=_down)
