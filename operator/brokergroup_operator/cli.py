"""`brokergroup operator …` and `brokergroup kube …` (docs/kubernetes.md).

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

    k = subparsers.add_parser("kube", help="BrokerGroup actions on a Kubernetes cluster")
    actions = k.add_subparsers(dest="kube_command", required=True, metavar="ACTION")
    s = actions.add_parser(
        "switchover",
        help="move the master role to an in-sync slave (like `kubectl cnpg promote`)",
        description="Ask the operator to switch the group's master over to BrokerId --to. "
        "The operator checks the target is alive and in the SyncStateSet and asks the "
        "controller (admin ElectMaster); the result is an Event on the BrokerGroup.",
    )
    s.add_argument("group", help="bg/NAME or NAME")
    s.add_argument("--to", type=int, required=True, dest="to_broker_id", help="BrokerId")
    s.add_argument("-n", "--namespace", default=None)
    s.add_argument("--kubeconfig", default=None)
    s.add_argument(
        "--wait", type=float, default=30.0, help="seconds to wait for the new master (0: don't)"
    )
    s.set_defaults(func=run_switchover_command)


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

    from brokergroup_operator.handlers import Runtime, registry
    from brokergroup_operator.kube import Kube, load_kube_config
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


def parse_group(ref: str) -> str:
    for prefix in ("bg/", "brokergroup/", "brokergroups/", "brokergroup.brokergroup.io/"):
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    if "/" in ref:
        raise ValueError(f"expected bg/NAME, got {ref!r}")
    return ref


def run_switchover_command(args: argparse.Namespace) -> int:
    import asyncio

    from kubernetes.client.exceptions import ApiException

    from brokergroup_operator.kube import Kube, default_namespace, load_kube_config

    try:
        name = parse_group(args.group)
    except ValueError as exc:
        print(f"brokergroup kube switchover: {exc}", file=sys.stderr)
        return 2
    namespace = args.namespace or default_namespace(args.kubeconfig)
    kube = Kube(load_kube_config(args.kubeconfig))
    try:
        return asyncio.run(request_switchover(kube, namespace, name, args.to_broker_id, args.wait))
    except ApiException as exc:
        print(f"brokergroup kube switchover: {exc.status} {exc.reason}", file=sys.stderr)
        return 1


async def request_switchover(
    kube: Any, namespace: str, name: str, to_broker_id: int, wait_s: float
) -> int:
    """Set the annotation the operator acts on, then follow status until it is done."""
    import asyncio
    import time

    from brokergroup_operator.model import SWITCHOVER_ANNOTATION

    before = await kube.read_group(namespace, name)
    epoch = int((before.get("status") or {}).get("masterEpoch") or 0)
    await kube.patch_group_annotations(namespace, name, {SWITCHOVER_ANNOTATION: str(to_broker_id)})
    print(f"asked the operator to switch bg/{name} over to broker {to_broker_id}")
    deadline = time.monotonic() + max(0.0, wait_s)
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        body = await kube.read_group(namespace, name)
        status = body.get("status") or {}
        master = status.get("master") or {}
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        if int(status.get("masterEpoch") or 0) > epoch and master.get("brokerId") == to_broker_id:
            print(
                f"broker {to_broker_id} ({master.get('pod')}) is master at epoch {status['masterEpoch']}"
            )
            return 0
        if SWITCHOVER_ANNOTATION not in annotations and master.get("brokerId") != to_broker_id:
            # The operator consumed the request but refused or failed it: its Event says why.
            await asyncio.sleep(2.0)
            body = await kube.read_group(namespace, name)
            if ((body.get("status") or {}).get("master") or {}).get("brokerId") == to_broker_id:
                continue
            print(
                f"the operator did not switch over; see `kubectl describe bg/{name}` "
                "(SwitchoverRefused / SwitchoverFailed events)",
                file=sys.stderr,
            )
            return 1
    if wait_s > 0:
        print("timed out waiting for the new master", file=sys.stderr)
        return 1
    return 0
