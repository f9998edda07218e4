"""Topic names end to end through the local runtime (DESIGN.md §3.4b, issue 7 item 1).

Before the topic rule was enforced, `brokergroup produce --topic orders.v1`
wrote the record to the master's commit log, then the consume queue refused
the name: every later produce failed with SYSTEM_ERROR while the master still
reported itself healthy (no failover), the slaves refused the replicated
record and reconnected forever, and the master could not reopen its store.

Here every rejected class (dot, space, slash, non-ASCII, empty, 128 bytes) is
sent as a user would — the `produce`, `consume` and admin-style offset CLI
commands against a real 3-broker group — and must come back as TOPIC_INVALID
with the rule in the message, with nothing written: the master and its
commit-log end are unchanged. Then the group still takes writes, replicates
them to every broker, and serves them back in order with their content.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.local_harness import (
    CONTROLLER_API_ADDRESSES,
    Runtime,
    brokergroup,
    local_runtime,
    wait_for,
)

pytestmark = pytest.mark.integration

REJECTED = {
    "dot": "orders.v1",
    "space": "orders v1",
    "slash": "orders/v1",
    "non-ascii": "bestellungen-ü",
    "empty": "",
    "128 bytes": "t" * 128,
}
GROUP = ("--controller-addresses", CONTROLLER_API_ADDRESSES, "--broker-name", "broker-a")


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    with local_runtime(tmp_path / "local") as rt:
        yield rt


def _settled(runtime: Runtime) -> dict[str, Any] | None:
    """Status once all three brokers are in the SyncStateSet at one log end."""
    s = runtime.status()
    rows = s["brokers"]
    ends = {b["maxOffset"] for b in rows}
    if s["master"] is None or len(s["syncStateSet"]) != 3 or len(ends) != 1 or None in ends:
        return None
    return s


def _env(runtime: Runtime) -> dict[str, str]:
    """The CLI finds this runtime's client credential (reads need one) as a user's would."""
    return {**os.environ, "BROKERGROUP_LOCAL_DIR": str(runtime.root)}


def _produce(
    runtime: Runtime, topic: str, count: int, prefix: str
) -> tuple[int, dict[str, Any] | str]:
    result = brokergroup(
        "produce", *GROUP, "--topic", topic, "--count", str(count), "--batch", "8",
        "--size", "64", "--key-prefix", prefix, "--retry-deadline-ms", "3000", "--json",
        env=_env(runtime),
    )  # fmt: skip
    try:
        return result.returncode, json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return result.returncode, result.stdout + result.stderr


def test_every_bad_topic_is_refused_and_the_group_keeps_serving(runtime: Runtime) -> None:
    up = runtime.up(brokers=3)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"
    before = wait_for("three in-sync brokers", lambda: _settled(runtime), 60, runtime)

    for name, topic in REJECTED.items():
        code, summary = _produce(runtime, topic, 4, f"{name}-")
        assert code != 0 and isinstance(summary, dict), (name, summary)
        assert summary["acked"] == 0 and summary["failed"] == 4, (name, summary)
        assert summary["firstError"]["code"] == "TOPIC_INVALID", (name, summary)
        assert "[%|a-zA-Z0-9_-]" in summary["firstError"]["message"], (name, summary)
        consumed = brokergroup(
            "consume", *GROUP, "--topic", topic, "--from-beginning", env=_env(runtime)
        )
        assert consumed.returncode != 0, (name, consumed.stdout)
        assert "TOPIC_INVALID" in consumed.stderr or "topic" in consumed.stderr, consumed.stderr

    after_refusals = runtime.status()
    # Nothing was written anywhere and nobody failed over.
    assert after_refusals["master"] == before["master"], after_refusals
    assert after_refusals["masterEpoch"] == before["masterEpoch"], after_refusals
    assert [b["maxOffset"] for b in after_refusals["brokers"]] == [
        b["maxOffset"] for b in before["brokers"]
    ], after_refusals

    code, summary = _produce(runtime, "orders_v1", 40, "good-")
    assert code == 0 and isinstance(summary, dict) and summary["acked"] == 40, summary
    settled = wait_for("the good topic on every broker", lambda: _settled(runtime), 60, runtime)
    assert settled["brokers"][0]["maxOffset"] > before["brokers"][0]["maxOffset"]
    assert settled["master"] == before["master"]

    consumed = brokergroup(
        "consume", *GROUP, "--topic", "orders_v1", "--from-beginning", "--json",
        "--max-messages", "40", env=_env(runtime),
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    rows = [json.loads(line) for line in consumed.stdout.splitlines() if line.strip()]
    by_queue: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_queue.setdefault(row["queueId"], []).append(row)
    keys = sorted((r["key"] for r in rows), key=lambda k: int(k.split("-")[1]))
    assert keys == [f"good-{i}" for i in range(40)]
    for queue_rows in by_queue.values():
        offsets = [r["queueOffset"] for r in queue_rows]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        # Keys in one queue follow send order (batches go round-robin over queues).
        indexes = [int(r["key"].split("-")[1]) for r in queue_rows]
        assert indexes == sorted(indexes)
        assert all(r["body"].startswith(r["key"]) for r in queue_rows)
    assert all(r["topic"] == "orders_v1" for r in rows)

    # No broker logged a replication refusal or a store failure.
    time.sleep(0.5)
    logs = "\n".join(p.read_text() for p in (runtime.root / "logs").glob("broker-*.log"))
    assert "replicated data rejected" not in logs
    assert "cannot be stored" not in logs
