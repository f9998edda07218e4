"""The operator's side of `kubectl brokergroup restart` (issue 22 item 7).

The plugin writes `kubectl.kubernetes.io/restartedAt` on the BrokerGroup; the
operator must copy it into the pod template (a new StatefulSet revision, so
the ordinary safe roll restarts every pod) and re-apply the StatefulSet at
once, although an annotation does not change the object's generation.
"""

from __future__ import annotations

from brokergroup_operator.objects import owned_objects
from brokergroup_operator.reconcile import reconcile_group
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.runtime import context_of
from brokergroup_operator.settings import OperatorSettings
from tests.unit.test_operator_handlers import (
    Events,
    FakeController,
    FakeKube,
    group,
    info,
    pod,
    runtime,
)

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
SETTINGS = OperatorSettings(controller_addresses=("c:9878",), image="img")
SECRETS = OperatorSecrets("admin-token", "broker-credential-root-0123", "ha-secret")


def _template_annotations(body: dict[str, object]) -> dict[str, str]:
    sts = next(
        o
        for o in owned_objects(context_of(body, SETTINGS, SECRETS), 3)
        if o["kind"] == "StatefulSet"
    )
    return dict(sts["spec"]["template"]["metadata"]["annotations"])


def test_restarted_at_reaches_the_pod_template() -> None:
    plain = _template_annotations(group())
    restarted = _template_annotations(group({RESTARTED_AT: "2026-11-25T05:00:00Z"}))
    assert RESTARTED_AT not in plain
    assert restarted == {**plain, RESTARTED_AT: "2026-11-25T05:00:00Z"}


async def test_a_new_restarted_at_is_applied_without_a_generation_change() -> None:
    pods = [
        pod(i, labels={"brokergroup.io/role": "master" if i == 0 else "slave",
                       "brokergroup.io/broker-id": str(i + 1)})
        for i in range(3)
    ]  # fmt: skip
    kube = FakeKube(pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1"}})
    rt = runtime(kube, FakeController(info(1)))
    await reconcile_group(rt, group(), Events())
    kube.calls.clear()
    await reconcile_group(rt, group({RESTARTED_AT: "2026-11-25T05:00:00Z"}), Events())
    assert [c for c in kube.calls if c[:2] == ("apply", "StatefulSet")] == [
        ("apply", "StatefulSet", "bg")
    ]
    kube.calls.clear()
    await reconcile_group(rt, group({RESTARTED_AT: "2026-11-25T05:00:00Z"}), Events())
    assert [c for c in kube.calls if c[0] == "apply"] == []
