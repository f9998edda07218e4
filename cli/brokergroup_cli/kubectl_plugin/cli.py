"""Arguments and dispatch of `kubectl-brokergroup` (kubectl finds it on PATH as
`kubectl brokergroup`) and of its alias `brokergroup kube …`.

`add_commands` declares the subcommands on any argparse subparsers object,
so both entry points share one definition; the kubernetes client is imported
only when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from brokergroup_cli.extras import check_installed

GROUP_PREFIXES = ("bg/", "brokergroup/", "brokergroups/", "brokergroup.brokergroup.io/")
#: A switchover is one election; the operator answers within its next pass.
DEFAULT_SWITCHOVER_WAIT_S = 30.0


def parse_group(ref: str) -> str:
    """`NAME` or `bg/NAME` (any of kubectl's spellings of the resource)."""
    for prefix in GROUP_PREFIXES:
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    if "/" in ref:
        raise ValueError(f"expected NAME or bg/NAME, got {ref!r}")
    return ref


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("group", help="NAME or bg/NAME")
    p.add_argument("-n", "--namespace", default=None, help="default: the context's namespace")
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--context", default=None)


def add_commands(actions: Any, prog_name: str) -> None:
    """The four commands on `actions`; errors are reported under `prog_name`."""

    def entry(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        return lambda args: dispatch(run, args, prog_name)

    s = actions.add_parser(
        "status",
        help="master, masterEpoch, SyncStateSet, offsets and lag of a group",
        description="The BrokerGroup's status as `brokergroup local status` shows a local group.",
    )
    _common(s)
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.set_defaults(func=entry(run_status))

    w = actions.add_parser(
        "switchover",
        help="move the master role to an in-sync slave (like `kubectl cnpg promote`)",
        description="Ask the operator to switch the group's master over to TARGET (a pod "
        "name or a BrokerId). The operator checks the target is alive and in the "
        "SyncStateSet and asks the controller (admin ElectMaster); a refusal ends the "
        "command at once with the operator's reason.",
    )
    _common(w)
    w.add_argument("target", nargs="?", default=None, help="pod name or BrokerId")
    w.add_argument("--to", default=None, dest="to", help="same as TARGET")
    w.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_SWITCHOVER_WAIT_S,
        help="seconds to wait for the new master (0: only ask)",
    )
    w.set_defaults(func=entry(run_switchover))

    r = actions.add_parser(
        "restart",
        help="rolling restart through the operator's safe roll (slaves first)",
        description="Set kubectl.kubernetes.io/restartedAt on the BrokerGroup: the operator "
        "rolls every pod as for a spec change — slaves first, then a switchover, the old "
        "master last.",
    )
    _common(r)
    r.add_argument("--wait", type=float, default=0.0, help="seconds to follow the roll (0: don't)")
    r.set_defaults(func=entry(run_restart))

    b = actions.add_parser(
        "report",
        help="a tarball of the group's objects, events and logs (Secrets redacted)",
        description="Write a .tar.gz for a bug report: the BrokerGroup, what it owns, its "
        "pods, their Events and logs, and the Secrets they mount with every value redacted.",
    )
    _common(b)
    b.add_argument("-o", "--output", default=None, help="file (default: ./<report name>.tar.gz)")
    b.set_defaults(func=entry(run_report))


def build_parser(prog: str = "kubectl brokergroup") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="BrokerGroup actions on a Kubernetes cluster (status, switchover, restart, "
        "report).",
    )
    add_commands(parser.add_subparsers(dest="action", required=True, metavar="ACTION"), prog)
    return parser


def register(subparsers: Any) -> None:
    """`brokergroup kube …`: the same commands under the project's own CLI."""
    k = subparsers.add_parser(
        "kube",
        help="BrokerGroup actions on a Kubernetes cluster (also `kubectl brokergroup`)",
    )
    add_commands(
        k.add_subparsers(dest="kube_command", required=True, metavar="ACTION"), "brokergroup kube"
    )


def _kube(args: argparse.Namespace) -> Any:
    from brokergroup_cli.kubectl_plugin.kube import Kube, current_namespace, load_api_client

    namespace = args.namespace or current_namespace(args.kubeconfig, args.context)
    return Kube(load_api_client(args.kubeconfig, args.context), namespace)


def _say(text: str) -> None:
    print(text, flush=True)


def _fail(args: argparse.Namespace, text: str) -> int:
    print(f"{args.prog_name}: {text}", file=sys.stderr)
    return 1


def run_status(args: argparse.Namespace) -> int:
    from brokergroup_cli.kubectl_plugin.view import group_status, render_text

    status = group_status(_kube(args).read_group(parse_group(args.group)))
    print(json.dumps(status.to_json()) if args.json else render_text(status))
    return 0


def run_switchover(args: argparse.Namespace) -> int:
    from brokergroup_cli.kubectl_plugin.switchover import switchover

    if (args.target is None) == (args.to is None):
        return _fail(args, "give the target once: TARGET or --to (a pod name or a BrokerId)")
    result = switchover(
        _kube(args), parse_group(args.group), str(args.target or args.to), args.wait, _say
    )
    if not result.ok:
        return _fail(args, result.message)
    _say(result.message)
    return 0


def run_restart(args: argparse.Namespace) -> int:
    from brokergroup_cli.kubectl_plugin.restart import restart

    ok, message = restart(_kube(args), parse_group(args.group), args.wait, _say)
    if not ok:
        return _fail(args, message)
    _say(message)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from brokergroup_cli.kubectl_plugin.report import (
        archive_members,
        collect,
        report_name,
        write_tarball,
    )

    kube = _kube(args)
    name = parse_group(args.group)
    now = datetime.now(UTC)
    prefix = report_name(kube.namespace, name, now)
    found = collect(kube, name)
    path = args.output or f"{prefix}.tar.gz"
    write_tarball(archive_members(found, prefix), path, now)
    _say(
        f"wrote {path}: {len(found.pods)} pods, {len(found.events)} events, "
        f"{len(found.logs)} logs, {len(found.secrets)} Secrets (values redacted)"
        + (f"; {len(found.errors)} reads failed (errors.txt)" if found.errors else "")
    )
    return 0


def dispatch(
    run: Callable[[argparse.Namespace], int], args: argparse.Namespace, prog_name: str
) -> int:
    """Run one command; API and argument errors become one stderr line, exit 1."""
    from brokergroup_cli.kubectl_plugin.kube import KubeError

    args.prog_name = prog_name
    try:
        return run(args)
    except (KubeError, ValueError) as exc:  # TargetError is a ValueError
        return _fail(args, str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    missing = check_installed("kubectl-brokergroup")
    if missing is not None:
        print(missing, file=sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
