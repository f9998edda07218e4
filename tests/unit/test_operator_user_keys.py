"""One AccessKey, one BrokerGroupUser (issue 36; operator users.access_key_holder and
user_sync): two objects of one namespace naming the same accessKey do not overwrite each
other's user at the controllers. The first by (creationTimestamp, name) holds the key; the
other is Ready=False AccessKeyInUse with one Warning Event, gets no Secret and no PUT;
deleting it DELETEs nothing; deleting the holder hands the key to the other (its PUT, no
DELETE in between), or DELETEs the user when no other claims it and then registers one
created meanwhile.

The pure rule is checked on its own (order, ties, deletion, other keys, any list order by
hypothesis); the handlers' shell runs against a recording API server and controllers that
keep the last PUT per path, as the controllers' users API does.
"""

from __future__ import annotations

import copy
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given

from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.runtime import Runtime
from brokergroup_operator.settings import OperatorSettings
from brokergroup_operator.user_sync import reconcile_user, remove_user
from brokergroup_operator.users import KEY_IN_USE, access_key_holder, plan_user

ROOT = "broker-credential-root-0123"
NS = "prod"
PATH = f"/v1/clusters/{NS}/users/shared"


def user(name: str, created: str, key: str = "shared", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": created,
            **meta,
        },
        "spec": {"accessKey": key, "policies": [{"resources": ["Topic:T"], "actions": ["Pub"]}]},
    }


# ------------------------------------------------------------------ the rule (pure)


def test_first_created_holds_the_key() -> None:
    users = [user("b", "2026-11-29T04:00:01Z"), user("a", "2026-11-29T04:00:02Z")]
    holder = access_key_holder("shared", users)
    assert holder is not None and (holder.name, holder.created) == ("b", "2026-11-29T04:00:01Z")


def test_same_second_is_decided_by_name() -> None:
    users = [user("zeta", "2026-11-29T04:00:00Z"), user("alpha", "2026-11-29T04:00:00Z")]
    assert getattr(access_key_holder("shared", users), "name", None) == "alpha"


def test_an_object_being_deleted_or_leaving_holds_nothing() -> None:
    first = user("first", "2026-11-29T04:00:00Z", deletionTimestamp="2026-11-29T05:00:00Z")
    second = user("second", "2026-11-29T04:10:00Z")
    assert getattr(access_key_holder("shared", [first, second]), "name", None) == "second"
    assert access_key_holder("shared", [second], leaving="second") is None


def test_other_keys_and_refused_objects_claim_nothing() -> None:
    other = user("other", "2026-11-29T03:00:00Z", key="else")
    elsewhere = user("elsewhere", "2026-11-29T03:00:00Z")
    elsewhere["spec"]["clusterName"] = "staging"  # refused: not its namespace
    bad_key = user("bad", "2026-11-29T03:00:00Z", key="no spaces")
    default = user("shared", "2026-11-29T03:30:00Z")
    del default["spec"]["accessKey"]  # the default is metadata.name: "shared"
    mine = user("mine", "2026-11-29T04:00:00Z")
    users = [other, elsewhere, bad_key, mine]
    assert getattr(access_key_holder("shared", users), "name", None) == "mine"
    assert getattr(access_key_holder("shared", [*users, default]), "name", None) == "shared"


@given(st.permutations(range(5)), st.lists(st.integers(0, 2), min_size=5, max_size=5))
def test_any_list_order_gives_the_same_holder(order: list[int], seconds: list[int]) -> None:
    users = [user(f"u{i}", f"2026-11-29T04:00:0{seconds[i]}Z") for i in range(5)]
    expected = min(range(5), key=lambda i: (seconds[i], f"u{i}"))
    holder = access_key_holder("shared", [users[i] for i in order])
    assert holder is not None and holder.name == f"u{expected}"


# ------------------------------------------------------------------ the handlers' shell


class Kube:
    """The namespace's BrokerGroupUsers; status patches and applied Secrets recorded."""

    def __init__(self, *users: dict[str, Any]) -> None:
        self.users = {u["metadata"]["name"]: u for u in users}
        self.applied: list[str] = []
        self.after_list: list[dict[str, Any]] = []
        """Objects created right after the next list (a race with a delete)."""

    async def list_users(self, namespace: str) -> list[dict[str, Any]]:
        assert namespace == NS
        listed = [copy.deepcopy(u) for u in self.users.values()]
        for late in self.after_list:
            self.users[late["metadata"]["name"]] = late
        self.after_list = []
        return listed

    async def apply(self, obj: dict[str, Any]) -> None:
        self.applied.append(obj["metadata"]["name"])

    async def patch_user_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.users[name]["status"] = {**self.users[name].get("status", {}), **status}


class Controllers:
    """The users API: the last PUT body per path; DELETE removes it."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []

    async def request(
        self, method: str, path: str, body: Any = None, idempotent: bool = False
    ) -> Any:
        self.calls.append((method, path))
        if method == "PUT":
            self.users[path] = body
        elif method == "DELETE":
            self.users.pop(path, None)
        return {}


@pytest.fixture
def world() -> tuple[Runtime, Kube, Controllers, list[tuple[str, str, str, str]]]:
    kube = Kube(user("first", "2026-11-29T04:00:00Z"), user("second", "2026-11-29T04:05:00Z"))
    controllers = Controllers()
    settings = OperatorSettings(controller_addresses=("c:9878",), image="img")
    rt = Runtime(
        settings=settings,
        kube=kube,  # type: ignore[arg-type]
        secrets=OperatorSecrets("admin-token", ROOT, "ha-secret"),
    )
    rt.controller = lambda addresses: controllers  # type: ignore[method-assign,assignment,return-value]
    return rt, kube, controllers, []


def poster(events: list[tuple[str, str, str, str]]) -> Any:
    def of(body: Any) -> Any:
        name = body["metadata"]["name"]
        return lambda kind, reason, message: events.append((name, kind, reason, message))

    return of


def secret_of(kube: Kube, name: str) -> str:
    return plan_user(kube.users[name], ROOT).secret_key


def ready(kube: Kube, name: str) -> dict[str, Any]:
    return next(c for c in kube.users[name]["status"]["conditions"] if c["type"] == "Ready")


async def test_the_second_object_is_refused_and_writes_nothing(world: Any) -> None:
    rt, kube, controllers, events = world
    await reconcile_user(rt, kube.users["first"], poster(events))
    await reconcile_user(rt, kube.users["second"], poster(events))
    assert controllers.users[PATH]["secretKey"] == secret_of(kube, "first")
    assert controllers.calls == [("PUT", PATH)]
    assert kube.applied == ["first-rocketmq-user"]
    condition = ready(kube, "second")
    assert (condition["status"], condition["reason"]) == ("False", KEY_IN_USE)
    assert condition["message"].startswith(
        "accessKey shared is held by BrokerGroupUser first (created 2026-11-29T04:00:00Z)"
    )
    assert kube.users["second"]["status"]["accessKey"] == "shared"
    assert [(e[0], e[1], e[2]) for e in events] == [("second", "Warning", KEY_IN_USE)]
    assert events[0][3] == condition["message"]

    # The resync timer: the same answer, the Event not posted again, still no PUT.
    await reconcile_user(rt, kube.users["second"], poster(events))
    await reconcile_user(rt, kube.users["first"], poster(events))
    assert len(events) == 1 and ready(kube, "second")["reason"] == KEY_IN_USE
    assert controllers.users[PATH]["secretKey"] == secret_of(kube, "first")
    assert controllers.calls == [("PUT", PATH), ("PUT", PATH)]


async def test_deleting_the_duplicate_leaves_the_holders_user(world: Any) -> None:
    rt, kube, controllers, events = world
    await reconcile_user(rt, kube.users["first"], poster(events))
    await reconcile_user(rt, kube.users["second"], poster(events))
    kube.users["second"]["metadata"]["deletionTimestamp"] = "2026-11-29T04:30:00Z"
    assert await remove_user(rt, kube.users["second"], 0.0, poster(events)) is None
    assert controllers.users[PATH]["secretKey"] == secret_of(kube, "first")
    assert ("DELETE", PATH) not in controllers.calls


async def test_deleting_the_holder_hands_the_key_over(world: Any) -> None:
    rt, kube, controllers, events = world
    await reconcile_user(rt, kube.users["first"], poster(events))
    await reconcile_user(rt, kube.users["second"], poster(events))
    kube.users["first"]["metadata"]["deletionTimestamp"] = "2026-11-29T04:30:00Z"
    assert await remove_user(rt, kube.users["first"], 0.0, poster(events)) is None
    # No DELETE: the second's PUT replaces the pair and policies, the key never missing.
    assert controllers.calls == [("PUT", PATH), ("PUT", PATH)]
    assert controllers.users[PATH]["secretKey"] == secret_of(kube, "second")
    assert (ready(kube, "second")["status"], ready(kube, "second")["reason"]) == (
        "True",
        "Registered",
    )
    assert kube.applied == ["first-rocketmq-user", "second-rocketmq-user"]
    assert [(e[0], e[2]) for e in events] == [
        ("second", KEY_IN_USE),
        ("second", "AccessKeyTakenOver"),
    ]


async def test_the_last_holder_deletes_the_user(world: Any) -> None:
    rt, kube, controllers, events = world
    del kube.users["second"]
    await reconcile_user(rt, kube.users["first"], poster(events))
    kube.users["first"]["metadata"]["deletionTimestamp"] = "2026-11-29T04:30:00Z"
    assert await remove_user(rt, kube.users["first"], 0.0, poster(events)) is None
    assert controllers.calls == [("PUT", PATH), ("DELETE", PATH)]
    assert PATH not in controllers.users


async def test_one_created_during_the_delete_is_registered_after_it(world: Any) -> None:
    # "third" is created after the holder's handler listed the namespace: its own handler
    # may PUT before the DELETE lands, so the holder's handler lists again and registers it.
    rt, kube, controllers, events = world
    del kube.users["second"]
    await reconcile_user(rt, kube.users["first"], poster(events))
    kube.users["first"]["metadata"]["deletionTimestamp"] = "2026-11-29T04:30:00Z"
    kube.after_list = [user("third", "2026-11-29T04:31:00Z")]
    assert await remove_user(rt, kube.users["first"], 0.0, poster(events)) is None
    assert controllers.calls == [("PUT", PATH), ("DELETE", PATH), ("PUT", PATH)]
    assert controllers.users[PATH]["secretKey"] == secret_of(kube, "third")
    assert ready(kube, "third")["reason"] == "Registered"
