"""Shared worlds of the operator's unit tests.

Hypothesis strategies for the operator's pure decisions: a group's pods and
the controller's view of its brokers, consistent the way a real cluster is
(unique pod IPs, stale broker rows on old IPs, a master inside its set).

And the one BrokerGroup `orders` in namespace `prod` whose owned objects the
resources tests read (`group_context`, `group_objects`), so every such test
builds its group the same way and names only what it varies.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from brokergroup_operator.model import (
    CLIENT_PORT,
    LABEL_BROKER_ID,
    LABEL_ROLE,
    BrokerRow,
    GroupView,
    PodFacts,
)
from brokergroup_operator.objects import owned_objects
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.spec import GroupContext

NEW = "rev-new"
OLD = "rev-old"


@st.composite
def worlds(
    draw: st.DrawFn, min_pods: int = 1, max_pods: int = 6
) -> tuple[list[PodFacts], GroupView]:
    n = draw(st.integers(min_pods, max_pods))
    pods: list[PodFacts] = []
    for i in range(n):
        has_ip = draw(st.booleans()) or draw(st.booleans())
        pods.append(
            PodFacts(
                name=f"bg-{i}",
                ordinal=i,
                uid=f"uid-{i}",
                ip=f"10.0.0.{10 + i}" if has_ip else None,
                ready=draw(st.booleans()),
                deleting=draw(st.integers(0, 5)) == 0,
                revision=draw(st.sampled_from([NEW, OLD])),
                labels=draw(
                    st.sampled_from(
                        [{}, {LABEL_ROLE: "master", LABEL_BROKER_ID: "1"}, {LABEL_ROLE: "slave"}]
                    )
                ),
            )
        )
    ids = list(range(1, n + draw(st.integers(0, 2)) + 1))
    rows = []
    for bid in ids:
        # A broker sits on a pod's IP, or on an old IP nobody holds any more.
        where = draw(st.integers(-1, n - 1))
        address = (
            f"10.0.0.{10 + where}:{CLIENT_PORT}" if where >= 0 else f"10.9.9.{bid}:{CLIENT_PORT}"
        )
        rows.append(
            BrokerRow(
                bid,
                address,
                alive=draw(st.booleans()),
                max_offset=draw(st.integers(0, 1000)),
                epoch=draw(st.integers(0, 3)),
            )
        )
    master = draw(st.one_of(st.none(), st.sampled_from(ids)))
    sss = set(draw(st.sets(st.sampled_from(ids))))
    if master is not None:
        sss.add(master)
    master_alive = master is not None and draw(st.booleans())
    view = GroupView(
        master_broker_id=master,
        master_alive=master_alive,
        master_address=None,
        master_epoch=draw(st.integers(0, 5)),
        sync_state_set=frozenset(sss),
        sync_state_set_epoch=draw(st.integers(0, 5)),
        brokers=tuple(rows),
    )
    return pods, view


@st.composite
def healthy_groups(
    draw: st.DrawFn, min_pods: int = 2, max_pods: int = 5
) -> tuple[list[PodFacts], GroupView]:
    """Every pod ready on its own IP with its own broker; master 1 alive; a set
    that always holds the master; some pods on the new revision."""
    n = draw(st.integers(min_pods, max_pods))
    pods = []
    rows = []
    for i in range(n):
        ip = f"10.0.1.{10 + i}"
        pods.append(
            PodFacts(
                name=f"bg-{i}",
                ordinal=i,
                uid=f"u{i}",
                ip=ip,
                ready=True,
                revision=draw(st.sampled_from([NEW, OLD])),
            )
        )
        rows.append(BrokerRow(i + 1, f"{ip}:{CLIENT_PORT}", True, draw(st.integers(0, 100))))
    master = draw(st.integers(1, n))
    sss = set(draw(st.sets(st.integers(1, n)))) | {master}
    view = GroupView(master, True, None, 1, frozenset(sss), 1, tuple(rows))
    return pods, view


def with_revision(pods: list[PodFacts], revision: str) -> list[PodFacts]:
    return [replace(p, revision=revision) for p in pods]


# The controllers' API addresses a group's pods are given (two StatefulSet DNS names).
APIS = ("bg-controller-0.bg-controller.ops.svc:9878", "bg-controller-1.bg-controller.ops.svc:9878")


def group_context(engine: str, secrets: OperatorSecrets | None, **spec: Any) -> GroupContext:
    """BrokerGroup `orders` in `prod`, 3 replicas of 1Gi unless `spec` says otherwise."""
    base: dict[str, Any] = {"engine": engine, "replicas": 3, "storage": {"size": "1Gi"}}
    base.update(spec)
    return GroupContext(
        "orders",
        "prod",
        "uid-1",
        base,
        "brokergroup:dev",
        APIS,
        secrets,
        default_rocketmq_image="brokergroup-rocketmq:5.3.3",
    )


def group_objects(
    engine: str, secrets: OperatorSecrets | None, **spec: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """The objects `group_context` owns at 3 replicas, by (kind, name)."""
    ctx = group_context(engine, secrets, **spec)
    return {(o["kind"], o["metadata"]["name"]): o for o in owned_objects(ctx, 3)}
