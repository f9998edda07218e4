"""A StatefulSet deleted behind the operator's back comes back at the next
pass (DESIGN.md §5: the operator owns its objects), not only after
apply_interval_s: the pass re-applies whenever the StatefulSet is missing,
even when nothing in the spec changed since it last applied.

Against the recording Kubernetes fake of test_operator_handlers."""

from __future__ import annotations

from brokergroup_operator.reconcile import reconcile_group
from tests.unit.test_operator_handlers import (
    Events,
    FakeController,
    FakeKube,
    group,
    info,
    pod,
    runtime,
)


async def test_a_deleted_statefulset_is_applied_again_at_the_next_pass() -> None:
    kube = FakeKube([pod(i) for i in range(3)], {"spec": {"replicas": 3}, "status": {}})
    rt = runtime(kube, FakeController(info(1)))
    await reconcile_group(rt, group(), Events())
    assert ("apply", "StatefulSet", "bg") in kube.calls
    kube.calls.clear()
    await reconcile_group(rt, group(), Events())  # unchanged: nothing to apply
    assert [c for c in kube.calls if c[0] == "apply"] == []
    kube.sts = None  # `kubectl delete sts bg`
    await reconcile_group(rt, group(), Events())
    assert ("apply", "StatefulSet", "bg") in kube.calls
