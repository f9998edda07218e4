"""QUERY_MESSAGE's bounded scan: what a query costs, and what it costs the produce path.

    flock /tmp/bg-heavy.lock .venv/bin/python bench/key_query.py --quick
    flock /tmp/bg-heavy.lock .venv/bin/python bench/key_query.py --before-tree /tmp/main \
        --produce-pairs 2

1. A real store (temp dir, SYNC_FLUSH off for the fill) with `--records` 1 KiB messages on
   one topic of 4 queues, each with a KEYS property and a UNIQ_KEY, stored one ms apart.
2. The ceiling, same run: the raw read rate of the same records through the store's pull
   read (`get_records`) with no matching, what the scan can at best do.
3. `run_key_query` (remoting_front/key_query.py), through the same reads the broker's
   PULL path makes: a key of the newest message (found in the first chunk), a key that no
   message has (reads the whole budget, the worst case), a unique-key query with a one-second
   time range (the binary search narrows it), `--repeats` times each; p50/p99 ms and the
   scan rate in MB/s.
4. With `--before-tree` (a worktree of the commit before the key query): bench/produce.py
   --quick in pairs, before and after alternately, so the produce path's throughput is
   compared on the same machine in the same run (the scan adds no code to it; this checks).

Last stdout line: one JSON object; also bench/results/key_query.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_last_line, summarize, write_result
from brokergroup_broker.core.broker_settings import store_config_of
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.protocol.messages import RecordPull
from brokergroup_broker.remoting_front.key_query import KeyQuery, run_key_query
from brokergroup_broker.store import MessageInput, MessageStore

TOPIC, QUEUES, T0 = "KeyBench", 4, 1_700_000_000_000
BUDGET = 32 << 20  # FrontSettings.key_query_budget_bytes' default
PACKAGE_DIRS = ("controller", "broker-image", "cli", "operator", "pipeline", "remoting")


class StoreReads:
    """ProducePath.pull_records / store_timestamp_at without the role check (a master)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store

    async def pull_records(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> RecordPull:
        bound = self.store.max_offset
        low, high = self.store.queue_offset_range(topic, queue_id, bound)
        if not low <= queue_offset < high:
            return RecordPull((), queue_offset, low, high)
        got = self.store.get_records(topic, queue_id, queue_offset, min(max_count, 32), bound)
        return RecordPull(tuple(r for _, r in got), got[-1][0].queue_offset + 1, low, high)

    async def store_timestamp_at(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        got = self.store.get_records(topic, queue_id, queue_offset, 1, self.store.max_offset,
                                     raw=False)  # fmt: skip
        return got[0][0].store_timestamp_ms if got else None


def fill(store: MessageStore, records: int) -> None:
    body = b"x" * 1024
    batch: list[MessageInput] = []
    for i in range(records):
        props = {"KEYS": f"order-{i} customer-{i % 1000}", "UNIQ_KEY": f"U{i:012d}", "TAGS": "t"}
        batch.append(MessageInput(TOPIC, i % QUEUES, body, props))
        if len(batch) == 128 or i == records - 1:
            # One ms per message: the store timestamp is the put's now_ms.
            store.put_messages(batch, ("127.0.0.1", 10911), T0 + i, flush=False)
            batch = []
    store.flush()


def read_ceiling_mb_per_s(store: MessageStore) -> float:
    start, total = time.perf_counter(), 0
    for q in range(QUEUES):
        low, high = store.queue_offset_range(TOPIC, q, store.max_offset)
        pos = low
        while pos < high:
            got = store.get_records(TOPIC, q, pos, 32, store.max_offset)
            total += sum(len(r) for _, r in got)
            pos = got[-1][0].queue_offset + 1
    return total / (time.perf_counter() - start) / 1e6


def time_query(reads: StoreReads, q: KeyQuery, repeats: int) -> dict[str, Any]:
    samples, scanned, found = [], 0, 0
    for _ in range(repeats):
        start = time.perf_counter()
        got = asyncio.run(run_key_query(reads, q, QUEUES, budget_bytes=BUDGET))
        samples.append((time.perf_counter() - start) * 1000)
        scanned, found = got.scanned_bytes, len(got.records)
    p50 = summarize(samples)["p50"] or 0.0
    return {
        "ms": summarize(samples),
        "scanned_bytes": scanned,
        "found": found,
        "scan_mb_per_s": round(scanned / 1e6 / (p50 / 1000), 1) if p50 else None,
    }


def produce_msgs_per_s(tree: Path) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(tree / d) for d in PACKAGE_DIRS)}
    out = subprocess.run(
        [sys.executable, "bench/produce.py", "--quick", "--no-write"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    return float(json.loads(out.stdout.strip().splitlines()[-1])["msgs_per_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and repeats")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--before-tree", type=Path, default=None,
                        help="worktree of the commit before the key query")  # fmt: skip
    parser.add_argument("--produce-pairs", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    records = args.records or (40_000 if args.quick else 200_000)
    repeats = args.repeats or (5 if args.quick else 20)
    result: dict[str, Any] = {"benchmark": "key_query", "records": records, "record_body": 1024,
                              "queues": QUEUES, "budget_bytes": BUDGET}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="keyq-") as tmp:
        store = MessageStore.open(Path(tmp) / "store", store_config_of(BrokerConfig()))
        try:
            start = time.perf_counter()
            fill(store, records)
            result["fill_s"] = round(time.perf_counter() - start, 2)
            result["ceiling_read_mb_per_s"] = round(read_ceiling_mb_per_s(store), 1)
            reads, end = StoreReads(store), (1 << 63) - 1
            newest = f"order-{records - 1}"
            result["newest_key"] = time_query(reads, KeyQuery(TOPIC, newest, 64, 0, end, False),
                                              repeats)  # fmt: skip
            result["absent_key"] = time_query(reads, KeyQuery(TOPIC, "nobody", 64, 0, end, False),
                                              repeats)  # fmt: skip
            mid = records // 2
            unique = KeyQuery(TOPIC, f"U{mid:012d}", 32, T0 + mid - 500, T0 + mid + 500, True)
            result["unique_key_1s_range"] = time_query(reads, unique, repeats)
        finally:
            store.close()
    if args.before_tree is not None:
        here = Path(__file__).resolve().parents[1]
        pairs = []
        for _ in range(args.produce_pairs):
            before = produce_msgs_per_s(args.before_tree.resolve())
            after = produce_msgs_per_s(here)
            pairs.append({"before_msgs_per_s": before, "after_msgs_per_s": after})
            print(f"produce before {before:.0f} msg/s, after {after:.0f} msg/s", flush=True)
        result["produce_pairs"] = pairs
        result["loadavg"] = os.getloadavg()
    print(f"ceiling (raw store reads, no matching): {result['ceiling_read_mb_per_s']} MB/s")
    for name in ("newest_key", "absent_key", "unique_key_1s_range"):
        r = result[name]
        print(f"{name}: p50 {r['ms']['p50']} ms, p99 {r['ms']['p99']} ms, "
              f"scanned {r['scanned_bytes']} B, found {r['found']}")  # fmt: skip
    if not args.no_write:
        write_result("key_query", result)
    print_last_line(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
