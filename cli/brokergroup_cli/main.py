"""Entry point of the `brokergroup` console script.

Each component registers its own subcommands through a `register(subparsers)`
function that only declares arguments; heavy imports happen inside the
handlers so `brokergroup --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from brokergroup_cli.extras import check_installed

#: Which component registers each top-level command (module, in `--help`'s order). Only the
#: owner of the command asked for is imported: `brokergroup chaos`'s registration imports the
#: fault runner and the store (~0.35 s of CPU), which every `local status` paid before (the
#: test tiers ran ~200 of them per run). tests/unit/test_cli_main.py checks the table against
#: what each module registers.
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("brokergroup_controller.cli", ("controller", "admin")),
    ("brokergroup_broker.cli", ("broker", "produce", "consume")),
    ("brokergroup_cli.local_cli", ("local",)),
    ("brokergroup_cli.chaos.cli", ("chaos",)),
    ("brokergroup_operator.cli", ("operator", "operator-stop")),
    ("brokergroup_cli.kubectl_plugin.cli", ("kube",)),
    ("brokergroup_audit.cli", ("audit",)),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with only `command`'s component when it names one
    (help and errors for anything else list every command)."""
    owners = [module for module, commands in COMPONENTS if command in commands]
    modules = owners or [module for module, _ in COMPONENTS]
    parser = argparse.ArgumentParser(
        prog="brokergroup",
        description="Broker replica groups with RocketMQ 5 Controller-mode HA.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in modules:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
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
