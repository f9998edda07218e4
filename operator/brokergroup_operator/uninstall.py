"""`brokergroup operator-stop`: the chart's pre-delete hook (docs/kubernetes.md "Uninstall").

`helm uninstall` deletes everything at once, the operator's ServiceAccount
too, so an operator that exits then can no longer reach the API server
(401) to let go of its groups, and their finalizer would make `kubectl
delete bg` and namespace deletion hang. The hook runs first, while the
ServiceAccount still exists: it deletes the operator's Deployment and waits
(bounded) until its pods are gone; each operator, exiting with its
Deployment gone, removes its finalizer from its groups
(lifecycle.let_go_if_uninstalled).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "operator-stop",
        help="delete the operator's Deployment and wait for its pods (helm pre-delete hook)",
    )
    p.add_argument("--deployment", required=True, help="NAMESPACE/NAME of the operator")
    p.add_argument("--selector", required=True, help="label selector of its pods")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the pods")
    p.add_argument("--kubeconfig", default=None)
    p.set_defaults(func=run_operator_stop)


def run_operator_stop(args: argparse.Namespace) -> int:
    from brokergroup_operator.kube import Kube, load_kube_config

    namespace, _sep, name = str(args.deployment).partition("/")
    if not name:
        print(f"operator-stop: --deployment must be NAMESPACE/NAME, got {args.deployment!r}")
        return 2
    kube = Kube(load_kube_config(args.kubeconfig))
    left = asyncio.run(stop(kube, namespace, name, args.selector, args.timeout))
    if left:
        print(f"operator-stop: {left} operator pod(s) still there after {args.timeout:.0f}s")
        return 1
    print(f"operator-stop: {namespace}/{name} stopped; its groups were let go")
    return 0


async def stop(kube: Any, namespace: str, name: str, selector: str, timeout_s: float) -> int:
    """Delete the Deployment, then wait until no pod matches; the pods left."""
    await kube.delete_deployment(namespace, name)
    deadline = time.monotonic() + timeout_s
    while True:
        left = len(await kube.list_pods(namespace, selector))
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(1.0)
