"""Which role and broker-id label each pod gets (pure).

A pod is identified with a broker by address: the broker registers
`podIP:10911` with the controller, and a pod that comes back on a new IP
re-registers its old BrokerId at the new address. So the controller's
broker rows, matched against the pods' current IPs, say which pod holds
which BrokerId; the controller's master id says which of them is master.

Invariants (tests/unit/test_operator_labels.py):
- at most one pod is labelled `role=master`, and only the pod whose IP is the
  address of the master the controller has and considers alive;
- a BrokerId labels at most one pod; a pod being deleted is never master;
- a pod that no broker row matches gets no role and no broker-id label, so
  no Service sends clients to it.
"""

from __future__ import annotations

from collections.abc import Sequence

from brokergroup_operator.model import (
    LABEL_BROKER_ID,
    LABEL_ROLE,
    GroupView,
    PodFacts,
    Role,
)

# A label value of None means "remove the label" (JSON merge patch).
LabelPatch = dict[str, str | None]


def broker_ids_by_pod(pods: Sequence[PodFacts], view: GroupView) -> dict[str, int]:
    """Pod name → BrokerId, by the pod's current address.

    When two rows claim one address (a stale row of a broker that moved
    away), the alive row wins, then the larger id (registered later).
    """
    by_address: dict[str, int] = {}
    rank: dict[str, tuple[bool, int]] = {}
    for row in view.brokers:
        key = (row.alive, row.broker_id)
        if row.address not in rank or key > rank[row.address]:
            rank[row.address] = key
            by_address[row.address] = row.broker_id
    result: dict[str, int] = {}
    taken: set[int] = set()
    for pod in sorted(pods, key=lambda p: (p.deleting, p.ordinal, p.name)):
        address = pod.address
        if address is None or address not in by_address:
            continue
        broker_id = by_address[address]
        if broker_id in taken:
            continue
        taken.add(broker_id)
        result[pod.name] = broker_id
    return result


def desired_labels(pods: Sequence[PodFacts], view: GroupView) -> dict[str, dict[str, str | None]]:
    """Pod name → the role and broker-id labels it should carry."""
    ids = broker_ids_by_pod(pods, view)
    master = view.live_master
    desired: dict[str, dict[str, str | None]] = {}
    for pod in pods:
        broker_id = ids.get(pod.name)
        if broker_id is None:
            desired[pod.name] = {LABEL_ROLE: None, LABEL_BROKER_ID: None}
            continue
        is_master = broker_id == master and not pod.deleting
        desired[pod.name] = {
            LABEL_ROLE: str(Role.MASTER if is_master else Role.SLAVE),
            LABEL_BROKER_ID: str(broker_id),
        }
    return desired


def label_patches(
    pods: Sequence[PodFacts], view: GroupView
) -> list[tuple[PodFacts, dict[str, str | None]]]:
    """Only the pods whose labels differ, with just the changed keys.

    Demotions come first: a new master is labelled only after the old one
    lost the label, so the client Service never selects two masters.
    """
    desired = desired_labels(pods, view)
    patches: list[tuple[PodFacts, dict[str, str | None]]] = []
    for pod in pods:
        want = desired[pod.name]
        diff = {k: v for k, v in want.items() if pod.labels.get(k) != v}
        if diff:
            patches.append((pod, diff))
    patches.sort(key=lambda item: (item[1].get(LABEL_ROLE) == str(Role.MASTER), item[0].name))
    return patches
