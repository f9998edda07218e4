"""`python -m brokergroup_cli.local …`: the `local` commands alone.

`up --detach` starts its background supervisor as
`python -m brokergroup_cli.local supervise --dir DIR` (not a user command),
so the daemon does not depend on every other component's CLI importing
cleanly.
"""

from __future__ import annotations

import argparse
import sys

from brokergroup_cli.local_cli import DEFAULT_DIR, register


def main(argv: list[str]) -> int:
    if argv[:1] == ["supervise"]:
        from brokergroup_cli.local.commands import cmd_supervise

        supervise = argparse.ArgumentParser(prog="brokergroup local supervise")
        supervise.add_argument("--dir", default=DEFAULT_DIR)
        return cmd_supervise(supervise.parse_args(argv[1:]))
    parser = argparse.ArgumentParser(prog="brokergroup")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(["local", *argv])
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
