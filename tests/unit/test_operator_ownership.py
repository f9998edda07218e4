"""Ownership and the bounded cleanup (issue 22 items 2 and 4), pure.

`owns`: a group that names no release belongs to whichever operator watches
its namespace; one that names a release only to that operator.
`cleanup_step`: the finalizer retries while there is work and time, and
releases after the timeout naming what it left behind; it never retries
for ever. A group no broker of which ever registered (`ever_registered`) is
released once its pods are gone, controllers asked or not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_operator.ownership import (
    Release,
    Retry,
    cleanup_step,
    ever_registered,
    groups_to_let_go,
    owns,
)
from brokergroup_operator.settings import OperatorSettings, SettingsError


def test_owns_by_namespace_or_by_release() -> None:
    spec_for = {"": {}, "a": {"controller": {"release": "mq/a"}}}
    assert [owns(me, spec_for[key]) for me in ("mq/a", "mq/b") for key in ("", "a")] == [
        True,
        True,
        True,
        False,
    ]


def test_cleanup_steps() -> None:
    common = {"timeout_s": 60.0, "registered": True}
    assert cleanup_step(pods_left=0, ids_cleaned=True, problem=None, elapsed_s=0, **common) == (
        Release()
    )
    assert cleanup_step(pods_left=2, ids_cleaned=False, problem=None, elapsed_s=5, **common) == (
        Retry("waiting for 2 broker pod(s) to go", 2.0)
    )
    assert cleanup_step(
        pods_left=2, ids_cleaned=False, problem="boom", elapsed_s=61, **common
    ) == Release(
        "gave up cleaning after 60s and released the finalizer; left behind: 2 broker pod(s) "
        "still terminating, the group's BrokerIds in the controller (clean them with "
        "`brokergroup admin clean-broker-data` once it is reachable); last error: boom"
    )


def test_a_group_that_never_registered_is_released_once_its_pods_are_gone() -> None:
    """Nothing of it is in the controllers: no reason to wait cleanup_timeout_s for
    them (a group deleted while the release Secret is missing waited 120 s)."""
    common = {"timeout_s": 120.0, "registered": False, "ids_cleaned": False}
    problem = "controller unavailable: no admin token"
    assert cleanup_step(pods_left=0, problem=problem, elapsed_s=0, **common) == Release()
    assert cleanup_step(pods_left=1, problem=None, elapsed_s=0, **common) == Retry(
        "waiting for 1 broker pod(s) to go", 2.0
    )
    assert cleanup_step(
        pods_left=0, problem=problem, elapsed_s=0, **{**common, "registered": True}
    ) == Retry(f"cleaning the BrokerIds from the controller: {problem}", 5.0)


def test_what_a_status_tells_of_registration() -> None:
    never = [
        {},
        # What a blocked pass writes (SecretMissing, InvalidSpec): no controllers' view.
        {"observedGeneration": 1, "replicas": 0, "ready": "0/1", "inSync": "?"},
        # Pods the controllers did not know yet.
        {"brokers": [{"pod": "bg-0", "brokerId": None}], "master": None, "masterEpoch": 0},
    ]
    ran = [
        {"brokers": [{"pod": "bg-0", "brokerId": 1}], "master": None, "masterEpoch": 0},
        {"brokers": [], "master": {"brokerId": 1, "pod": "bg-0"}, "masterEpoch": 1},
        # Pods gone, rows rewritten, but a master was elected once.
        {"brokers": [], "master": None, "masterEpoch": 2},
    ]
    assert [ever_registered(s) for s in never + ran] == [False] * 3 + [True] * 3


@given(
    st.integers(0, 5),
    st.booleans(),
    st.booleans(),
    st.one_of(st.none(), st.text(max_size=5)),
    st.floats(0, 1e6),
    st.floats(0, 1e4),
)
def test_cleanup_ends_once_the_timeout_has_passed(
    pods: int, cleaned: bool, registered: bool, problem: str | None, elapsed: float, timeout: float
) -> None:
    step = cleanup_step(
        pods_left=pods, ids_cleaned=cleaned, registered=registered, problem=problem,
        elapsed_s=elapsed, timeout_s=timeout,
    )  # fmt: skip
    done = pods == 0 and (cleaned or not registered)
    if elapsed >= timeout or done:
        assert isinstance(step, Release)
        assert (step.left_behind is None) == done
    else:
        assert isinstance(step, Retry)


def test_uninstall_lets_go_of_this_operators_finalized_groups_only() -> None:
    def group(name: str, release: str | None, finalizers: list[str]) -> dict:
        spec = {"controller": {"release": release}} if release else {}
        return {"metadata": {"name": name, "finalizers": finalizers}, "spec": spec}

    groups = [
        group("mine", None, ["brokergroup.io/cleanup"]),
        group("named-mine", "mq/a", ["other/x", "brokergroup.io/cleanup"]),
        group("theirs", "mq/b", ["brokergroup.io/cleanup"]),
        group("released", None, []),
    ]
    chosen = groups_to_let_go(groups, "mq/a", "brokergroup.io/cleanup")
    assert [g["metadata"]["name"] for g in chosen] == ["mine", "named-mine"]


def test_settings_of_release_scoping_and_cleanup() -> None:
    env = {
        "BROKERGROUP_OPERATOR_ID": "mq/a-brokergroup",
        "BROKERGROUP_OPERATOR_DEPLOYMENT": "mq/a-brokergroup-operator",
        "BROKERGROUP_CLEANUP_TIMEOUT_SECONDS": "30",
    }
    s = OperatorSettings.from_env(env)
    assert (s.operator_id, s.deployment, s.cleanup_timeout_s) == (
        "mq/a-brokergroup",
        "mq/a-brokergroup-operator",
        30.0,
    )
    assert OperatorSettings.from_env({}).cleanup_timeout_s == 120.0
    with pytest.raises(SettingsError, match="BROKERGROUP_CLEANUP_TIMEOUT_SECONDS must be a number"):
        OperatorSettings.from_env({"BROKERGROUP_CLEANUP_TIMEOUT_SECONDS": "soon"})


@pytest.mark.looptime
async def test_operator_stop_deletes_the_deployment_and_waits_for_its_pods() -> None:
    """The chart's pre-delete hook: the operator must exit while its ServiceAccount
    still exists (helm uninstall deletes that too, and then every call is 401)."""
    from brokergroup_operator.uninstall import stop

    class Kube:
        def __init__(self) -> None:
            self.calls: list[tuple[str, ...]] = []
            self.pods = [["op-1", "op-2"], ["op-2"], []]

        async def delete_deployment(self, ns: str, name: str) -> None:
            self.calls.append(("delete", ns, name))

        async def list_pods(self, ns: str, selector: str) -> list[str]:
            self.calls.append(("list", ns, selector))
            return self.pods.pop(0)

    kube = Kube()
    assert await stop(kube, "mq", "a-brokergroup-operator", "sel", 30.0) == 0
    assert kube.calls == [
        ("delete", "mq", "a-brokergroup-operator"),
        ("list", "mq", "sel"),
        ("list", "mq", "sel"),
        ("list", "mq", "sel"),
    ]
