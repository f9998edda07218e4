"""`brokergroup operator …` (docs/kubernetes.md); `brokergroup kube …` is the
kubectl plugin's (brokergroup_cli.kubectl_plugin).

`register` only declares arguments; kopf and the kubernetes client are
imported inside the commands so `brokergroup --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "operator",
        help="run the BrokerGroup operator (kopf)",
        description="Run the kopf operator that keeps BrokerGroups' pods, labels and status.",
    )
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    p.add_argument("--peering", default="brokergroup", help="kopf peering object name")
    p.add_argument("--standalone", action="store_true", help="no peering (a single replica)")
    p.add_argument(
        "--priority",
        type=int,
        default=None,
        help="kopf peering priority (default: random, so replicas never tie: "
        "kopf pauses every replica that shares a priority)",
    )
    p.add_argument(
        "--peering-lifetime",
        type=int,
        default=15,
        help="seconds a silent peer counts as alive (how long a standby waits "
        "after the active replica is killed)",
    )
    p.add_argument("--liveness", default=None, help="e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0 = off)")
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=run_operator_command)

    from brokergroup_operator import uninstall

    uninstall.register(subparsers)


def run_operator_command(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import os

    if args.kubeconfig:
        # Before the kubernetes client is imported: it reads KUBECONFIG at import
        # time, and kopf's login goes through it.
        os.environ["KUBECONFIG"] = args.kubeconfig

    import kopf
    from prometheus_client import start_http_server

    from brokergroup_operator.handlers import registry
    from brokergroup_operator.kube import Kube, load_kube_config
    from brokergroup_operator.runtime import Runtime
    from brokergroup_operator.settings import OperatorSettings, SettingsError

    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        settings = OperatorSettings.from_env(os.environ)
        settings.read_token()
    except SettingsError as exc:
        print(f"brokergroup operator: {exc}", file=sys.stderr)
        return 2
    kube = Kube(load_kube_config(args.kubeconfig))
    namespaces: list[str] = list(args.namespace)
    clusterwide = bool(args.all_namespaces) or not namespaces
    if args.metrics_port:
        start_http_server(args.metrics_port)
    if not args.standalone:
        targets: list[str | None] = list(namespaces) if namespaces else [None]
        for ns in targets:
            asyncio.run(kube.ensure_peering(args.peering, ns))
    priority = args.priority
    if priority is None:
        import random

        priority = random.SystemRandom().randint(1, 2**31 - 1)
    memo = kopf.Memo(
        runtime=Runtime(settings=settings, kube=kube, namespaces=tuple(namespaces)),
        peering_lifetime_s=args.peering_lifetime,
        clusterwide=clusterwide,
    )
    kopf.run(
        registry=registry,
        memo=memo,
        clusterwide=clusterwide,
        namespaces=namespaces,
        standalone=bool(args.standalone),
        peering_name=None if args.standalone else args.peering,
        priority=priority,
        liveness_endpoint=args.liveness,
    )
    return 0
