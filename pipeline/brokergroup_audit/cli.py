"""`brokergroup audit STORE_ROOT …` (docs/audit.md). Arguments only; Spark loads in the handler."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

#: The arguments that name files: resolved on the driver (see `absolute_paths`).
PATH_ARGUMENTS = ("store_root", "acks", "events", "out")


def register(subparsers: Any) -> None:
    """Add the `audit` subcommand to the `brokergroup` parser."""
    p = subparsers.add_parser(
        "audit",
        help="audit replica stores with Spark (loss, divergence, failovers)",
        description=(
            "Audit every group/replica under STORE_ROOT (a `local up` directory or a directory "
            "of RocketMQ stores): acknowledged-but-missing messages, committed-prefix "
            "divergence, duplicates, epoch lineage conflicts, failovers. Exits 1 when a "
            "finding would cost a user data."
        ),
    )
    p.add_argument(
        "store_root",
        metavar="STORE_ROOT",
        help="directory holding replica stores: a path or a URI (s3://, gs://, abfs://, "
        "hdfs://, file://; credentials from the environment as each store's client finds them)",
    )
    p.add_argument(
        "--acks", metavar="ACK_LOG", help="acknowledgement log (JSON lines; path or URI)"
    )
    p.add_argument(
        "--events",
        metavar="CONTROLLER_EVENTS",
        help="controller event export (JSON lines; path or URI)",
    )
    p.add_argument(
        "--out", metavar="DIR", default="audit-out", help="output directory (path or URI)"
    )
    p.add_argument("--master", metavar="SPARK_MASTER", default="local[*]", help="Spark master URL")
    p.add_argument(
        "--split-mib",
        type=int,
        default=64,
        help="largest slice of one segment a Spark task reads (MiB)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_run)


def absolute_paths(args: argparse.Namespace, cwd: Path) -> argparse.Namespace:
    """The arguments with every path made absolute against `cwd`, the driver's working
    directory (URIs stay as they are). Spark executors open the segment files the
    driver lists, each in its own working directory (a standalone worker's is
    work/app-…/N), so a relative STORE_ROOT must not leave the driver as it was typed."""
    from brokergroup_audit.locations import on_driver

    out = argparse.Namespace(**vars(args))
    for name in PATH_ARGUMENTS:
        value = getattr(args, name, None)
        if value:
            setattr(out, name, on_driver(value, cwd))
    return out


def _run(args: argparse.Namespace) -> int:
    from brokergroup_audit.command import run_cli

    return run_cli(absolute_paths(args, Path.cwd()))
