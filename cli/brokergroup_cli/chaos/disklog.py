"""Every replica's commit log read back from disk after a chaos run (issue 37 item 1).

The stock workload's targets (`local-rocketmq`, `rocketmq`) keep their logs in RocketMQ's
v1 layout, as the built-in brokers do; the one v1 decoder (`brokergroup_broker.store.
message_scan`, the store's and the audit's) walks each segment in offset order and stops
where the records stop (a preallocated segment's zero tail, a torn tail). Records of one
topic come back as `ReadRecord`s in log order: the message's KEYS property as the key, its
queue and queue offset, RocketMQ's CRC of the body as stored.

Segment size: RocketMQ preallocates every segment, named by its start offset; a record
may not cross a segment's end (`record_start_ok` asks where that end is), so each segment
is scanned with a size that divides its start offset and covers its bytes.
"""

from __future__ import annotations

from pathlib import Path

from brokergroup_broker.store.message import PROPERTY_KEYS, body_crc
from brokergroup_broker.store.message_scan import decode_records, scan_records
from brokergroup_cli.chaos.checker import ReadRecord


def _segment_bytes(start: int, size: int, spacing: int | None) -> int:
    if spacing is not None and spacing >= size:
        return spacing
    bound = 1
    while bound < size:
        bound <<= 1
    while start % bound:  # a start offset not on this power of two: a larger one
        bound <<= 1
    return bound


def read_commitlog(commitlog_dir: Path, topic: str, replica: str) -> list[ReadRecord]:
    """The records of `topic` in `commitlog_dir`, in log order (empty: no log yet)."""
    segments = sorted(
        (int(p.name), p) for p in commitlog_dir.glob("[0-9]" * 20) if p.stat().st_size > 0
    )
    out: list[ReadRecord] = []
    for n, (start, path) in enumerate(segments):
        spacing = segments[n + 1][0] - start if n + 1 < len(segments) else None
        buf = path.read_bytes()
        scanned = scan_records(buf, start, _segment_bytes(start, len(buf), spacing))
        wanted = [r.physical_offset - start for r in scanned.records if r.topic == topic]
        out.extend(
            ReadRecord(m.properties.get(PROPERTY_KEYS, ""), m.queue_id, m.queue_offset, topic,
                       body_crc(m.body), replica)
            for m in decode_records(buf, wanted)
        )  # fmt: skip
    return out
