"""Store append micro-benchmark (DESIGN.md §9): put_messages with 1 KiB bodies.

Usage: python bench/store_append.py [--quick] [--dir DIR] [--seconds S]

For batch sizes 64 and 256 and both flush modes (SYNC_FLUSH: one fdatasync
per batch; ASYNC_FLUSH: flush() every flush_interval_ms as the broker's timer
would), appends for a fixed time in a fresh store under DIR and reports
msgs/s and MB/s. Also measures the encode-only rate (no I/O) and the slave
path (append_replicated of the master's bytes in 1 MiB chunks). The disk
ceiling is measured in the same run on the same filesystem. Last stdout line:
one JSON object; also written to bench/results/store_append.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from brokergroup_broker.store import FlushDiskType, MessageInput, MessageStore, StoreConfig
from brokergroup_broker.store.ceiling import measure_disk_ceiling
from brokergroup_broker.store.message_encode import encode_batch

RESULTS = Path(__file__).resolve().parent / "results"
STORE_HOST = ("127.0.0.1", 10911)
BODY_BYTES = 1024


def make_batch(batch: int, seq: int) -> list[MessageInput]:
    body = b"m" * BODY_BYTES
    return [
        MessageInput(
            topic="BenchTopic",
            queue_id=(seq + i) % 4,
            body=body,
            properties={"UNIQ_KEY": f"{seq + i:032X}", "TAGS": "bench"},
            born_timestamp_ms=1_700_000_000_000,
            born_host=("127.0.0.1", 50000),
        )
        for i in range(batch)
    ]


def run_put(root: Path, batch: int, flush: FlushDiskType, seconds: float) -> dict[str, Any]:
    config = StoreConfig(commit_log_segment_bytes=256 << 20, flush_disk_type=flush)
    store = MessageStore.open(root, config)
    batches = [make_batch(batch, i * batch) for i in range(16)]  # built outside the timing
    msgs = 0
    nbytes = 0
    flush_every = config.flush_interval_ms / 1000
    t0 = time.perf_counter()
    next_flush = t0 + flush_every
    i = 0
    while True:
        now = time.perf_counter()
        if now - t0 >= seconds:
            break
        res = store.put_messages(batches[i % len(batches)], STORE_HOST, 1_700_000_000_000 + i)
        msgs += len(res.messages)
        nbytes += res.end_offset - res.start_offset
        i += 1
        if flush is FlushDiskType.ASYNC_FLUSH and now >= next_flush:
            store.flush()
            next_flush = now + flush_every
    store.flush()
    elapsed = time.perf_counter() - t0
    store.close()
    return {
        "batch": batch,
        "flush": flush.value,
        "msgs_per_s": round(msgs / elapsed),
        "mb_per_s": round(nbytes / elapsed / 1e6, 1),
        "messages": msgs,
        "seconds": round(elapsed, 2),
    }


def run_replicated(master_root: Path, slave_root: Path, seconds: float) -> dict[str, Any]:
    """Slave path: feed the master's log to append_replicated in 1 MiB chunks (SYNC_FLUSH)."""
    config = StoreConfig(commit_log_segment_bytes=256 << 20)
    master = MessageStore.open(master_root, config)
    slave = MessageStore.open(slave_root, config)
    msgs = 0
    t0 = time.perf_counter()
    offset = 0
    while time.perf_counter() - t0 < seconds:
        data = master.read_bytes(offset, 1 << 20)
        if not data:
            break
        slave.append_replicated(offset, data)
        offset += len(data)
    elapsed = time.perf_counter() - t0
    msgs = sum(slave.queue_offset_range("BenchTopic", q)[1] for q in range(4))
    master.close()
    slave.close()
    return {
        "msgs_per_s": round(msgs / elapsed),
        "mb_per_s": round(offset / elapsed / 1e6, 1),
        "bytes": offset,
        "seconds": round(elapsed, 2),
    }


def run_encode(batch: int, seconds: float) -> dict[str, Any]:
    msgs = make_batch(batch, 0)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        encode_batch(
            msgs, start_offset=0, segment_bytes=1 << 30, store_host=STORE_HOST,
            store_timestamp_ms=0, queue_offset_of=lambda key: 0, max_message_bytes=1 << 22,
        )  # fmt: skip
        n += batch
    return {"batch": batch, "msgs_per_s": round(n / (time.perf_counter() - t0))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true", help="about 15 s in total")
    parser.add_argument("--seconds", type=float, default=None, help="per measurement")
    args = parser.parse_args()
    seconds = args.seconds or (1.5 if args.quick else 5.0)
    args.dir.mkdir(parents=True, exist_ok=True)
    ceiling = measure_disk_ceiling(
        args.dir, seq_total_bytes=(64 << 20) if args.quick else (256 << 20)
    )
    print(f"disk ceiling: {ceiling.as_dict()}")
    put: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="store-append-", dir=args.dir))
    try:
        for flush in (FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH):
            for batch in (64, 256):
                root = work / f"{flush.value}-{batch}"
                row = run_put(root, batch, flush, seconds)
                print(f"put_messages {row}")
                put.append(row)
                if not (flush is FlushDiskType.SYNC_FLUSH and batch == 256):
                    shutil.rmtree(root)
        replicated = run_replicated(
            work / f"{FlushDiskType.SYNC_FLUSH.value}-256", work / "slave", seconds
        )
        print(f"append_replicated {replicated}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    encode = [run_encode(b, min(seconds, 1.0)) for b in (64, 256)]
    print(f"encode only {encode}")
    result = {
        "benchmark": "store_append",
        "body_bytes": BODY_BYTES,
        "put_messages": put,
        "append_replicated": replicated,
        "encode_only": encode,
        "disk_ceiling": ceiling.as_dict(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "store_append.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
