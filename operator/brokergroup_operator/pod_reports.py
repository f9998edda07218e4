"""Pod events become liveness reports: the moment a broker's pod is deleted,
stops being ready or its container terminates, the controller hears it
(`POST /v1/brokers/inactive`), rather than a heartbeat timeout later.

It owns the last facts seen per pod (`Runtime.pods`); the pure decision
(report or not, is the process surely gone, which incarnation) is
liveness.liveness_decision. Every pod event of a group also wakes its pass.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from brokergroup_controller.client import ControllerUnavailable
from brokergroup_controller.errors import ControllerError
from brokergroup_operator import metrics
from brokergroup_operator.liveness import ReportInactive, liveness_decision
from brokergroup_operator.model import LABEL_GROUP, PodFacts
from brokergroup_operator.ownership import owns
from brokergroup_operator.role_follower import master_pod_lost
from brokergroup_operator.runtime import Runtime

log = logging.getLogger("brokergroup_operator")


async def pod_changed(
    rt: Runtime, namespace: str, event_type: str, body: Mapping[str, Any]
) -> None:
    """Report the pod's broker inactive if this event says so; wake its group."""
    meta = body.get("metadata") or {}
    group = (meta.get("labels") or {}).get(LABEL_GROUP)
    if not group:
        return
    pod_key = (namespace, str(meta.get("name")))
    before = rt.pods.get(pod_key)
    after = None if event_type == "DELETED" else PodFacts.from_pod(dict(body))
    if after is None:
        final = PodFacts.from_pod(dict(body))
        if before is None or final.uid != before.uid or final.process_ended:
            before = final  # the object's last state: the kubelet's last word on the process
    if after is None:
        rt.pods.pop(pod_key, None)
    else:
        rt.pods[pod_key] = after
    decision = liveness_decision(before, after)
    mem = rt.memory((namespace, group))
    if decision is not None:
        master_pod_lost(mem, decision.broker_id)
        await _report(rt, namespace, group, mem.addresses, decision)
    mem.wake.set()


async def _report(
    rt: Runtime,
    namespace: str,
    group: str,
    addresses: tuple[str, ...],
    decision: ReportInactive,
) -> None:
    if not addresses:  # no pass of this group yet (operator just started)
        try:
            owner = await rt.kube.read_group(namespace, group)
            if owns(rt.settings.operator_id, owner.get("spec") or {}):
                addresses = rt.context(owner).addresses
        except Exception as exc:
            log.warning("cannot read BrokerGroup %s/%s: %s", namespace, group, exc)
    if not addresses:
        return
    try:
        await rt.controller(addresses).report_inactive(
            namespace,
            group,
            decision.broker_id,
            decision.text,
            process_gone=decision.process_gone,
            incarnation=decision.incarnation,
            symptom_only=decision.symptom_only,
        )
    except (ControllerError, ControllerUnavailable) as exc:
        log.warning("report inactive of broker %s failed: %s", decision.broker_id, exc)
        return
    metrics.INACTIVE_REPORTS.labels(str(decision.reason)).inc()
    log.info(
        "reported broker %s of %s/%s inactive: %s",
        decision.broker_id,
        namespace,
        group,
        decision.text,
    )
