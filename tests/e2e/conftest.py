"""The kind e2e tier's fixtures (docs/development.md "e2e tier").

Collected only when `make e2e` (tools/kind/e2e.sh) set BROKERGROUP_E2E: a plain
`pytest tests` (make test) leaves tests/e2e alone. With BROKERGROUP_E2E set,
the tests skip with the reason in BROKERGROUP_E2E_SKIP when no container engine
could start; once a cluster is up they run and must pass.

`kind_cluster` (session): the cluster e2e.sh brought up and the image it loaded.
`release` (per test): a namespace, a Helm release of charts/brokergroup and a
client pod of the test's own, torn down (and waited for) afterwards. A failed
test's report carries the namespace's pods and the operator's and controllers'
logs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kind_env import KindCluster, Release

if not os.environ.get("BROKERGROUP_E2E"):
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def kind_cluster() -> KindCluster:
    reason = os.environ.get("BROKERGROUP_E2E_SKIP")
    if reason:
        pytest.skip(f"e2e tier: {reason}")
    cluster = KindCluster.from_env()
    if cluster is None:
        pytest.skip("e2e tier: no kind cluster; run `make e2e` (tools/kind/e2e.sh)")
    return cluster


@pytest.fixture
def release(
    kind_cluster: KindCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Release]:
    rel = Release(kind_cluster, tmp_path)
    try:
        rel.start()
        yield rel
    finally:
        report = getattr(request.node, "e2e_failed", False)
        if report:
            request.node.add_report_section("teardown", "kind cluster", rel.diagnostics())
        rel.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    if outcome.get_result().failed and call.when in ("setup", "call"):
        item.e2e_failed = True  # type: ignore[attr-defined]


def pytest_report_header(config: pytest.Config) -> str | None:
    if not os.environ.get("BROKERGROUP_E2E"):
        return None
    if os.environ.get("BROKERGROUP_E2E_SKIP"):
        return f"e2e tier: will skip ({os.environ['BROKERGROUP_E2E_SKIP']})"
    return (
        f"e2e tier: kind cluster {os.environ.get('BROKERGROUP_E2E_CLUSTER')} "
        f"({os.environ.get('BROKERGROUP_E2E_PATH')} path, node image "
        f"{os.environ.get('BROKERGROUP_E2E_NODE_IMAGE')}), image "
        f"{os.environ.get('BROKERGROUP_E2E_IMAGE')}"
    )
