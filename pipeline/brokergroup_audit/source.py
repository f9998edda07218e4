"""`spark.read.format("commitlog").load(STORE_ROOT)`: a PySpark Python data source.

Partitions: every segment of every replica under the root, cut into slices of at
most `splitBytes` (option, default 64 MiB). The root is a local path or a URI
(`locations`: s3://, gs://, abfs://, hdfs://, file://). A task decodes the records that
START in its slice with `fastscan.scan_slice` (a walk of the totalSize chain on clean
slices, `record_columns.scan_columns` wherever there is damage; reading past the slice
end only to finish the last record), so slices need no coordination. A local segment
is mapped (mmap: the task touches only its pages); any other is read by ranged reads
(`read_ranged`): the slice and one largest record past its end, the rest of the
segment only where that window cannot decide. Rows come out as one Arrow record
batch per slice.

One row per message record, plus one row per damaged region with `problem` set
(BAD_MAGIC, BAD_SIZE, BAD_STRUCTURE, PARTIAL; a message whose stored bodyCRC does
not match its body is a normal row with problem BAD_CRC). Blank records and
zero-filled tails produce no rows.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import fs
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from brokergroup_audit.fastscan import clean_slice, scan_slice
from brokergroup_audit.locations import is_local, is_uri, resolve
from brokergroup_audit.stores import Replica, find_replicas
from brokergroup_broker.store.message import END_FILE_MIN_BLANK_LENGTH, PROPERTY_KEYS
from brokergroup_broker.store.record_columns import ColumnScan, gather

SCHEMA_DDL = (
    "group STRING, brokerId INT, physicalOffset BIGINT, size INT, bodyCRC BIGINT, "
    "topic STRING, queueId INT, queueOffset BIGINT, keys STRING, storeTimestamp BIGINT, "
    "epoch INT, recordCrc BIGINT, problem STRING, detail STRING, "
    "realTopic STRING, realQueueId INT, uniqKey STRING"
)
ARROW_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("brokerId", pa.int32()),
        ("physicalOffset", pa.int64()),
        ("size", pa.int32()),
        ("bodyCRC", pa.int64()),
        ("topic", pa.string()),
        ("queueId", pa.int32()),
        ("queueOffset", pa.int64()),
        ("keys", pa.string()),
        ("storeTimestamp", pa.int64()),
        ("epoch", pa.int32()),
        ("recordCrc", pa.int64()),
        ("problem", pa.string()),
        ("detail", pa.string()),
        ("realTopic", pa.string()),
        ("realQueueId", pa.int32()),
        ("uniqKey", pa.string()),
    ]
)
DEFAULT_SPLIT_BYTES = 64 << 20
#: Rows per Arrow batch sent to the JVM (about 0.4 MiB of columns at 1 KiB messages).
DEFAULT_BATCH_ROWS = 4096
#: Largest record a slice reads past its end for (RocketMQ's maxMessageSize is 4 MiB).
DEFAULT_MAX_RECORD_BYTES = 16 << 20
#: A ranged read's first window reaches this far past the slice end beyond one largest
#: record, so the walk sees the next record's header and can tell the slice ends cleanly.
RANGED_SLACK_BYTES = 64 << 10
_KEYS_PATTERN = "(?:^|\x02)" + PROPERTY_KEYS + "\x01(?P<keys>[^\x02]*)"
#: Where a delay or timer message parked in a system topic really goes, and the client's id.
#: (REAL_QID only when it is a number: anything else reads as absent, never fails a task.)
_PARKED_PATTERNS = [
    "(?:^|\x02)REAL_TOPIC\x01(?P<v>[^\x02]*)",
    "(?:^|\x02)REAL_QID\x01(?P<v>[0-9]{1,9})(?:\x02|$)",
    "(?:^|\x02)UNIQ_KEY\x01(?P<v>[^\x02]*)",
]
BAD_CRC = "BAD_CRC"


@dataclass(frozen=True)
class SegmentSlice(InputPartition):
    root: str
    """The store root as the source was given it: names the filesystem of `path`."""
    group: str
    broker_id: int
    path: str
    segment_start: int
    segment_end: int
    own_from: int
    own_to: int
    epochs: tuple[tuple[int, int], ...]
    max_record_bytes: int

    def __init__(self, **kwargs: Any) -> None:  # InputPartition.__init__ takes a value
        for k, v in kwargs.items():
            object.__setattr__(self, k, v)


def slices(
    root: str, replicas: list[Replica], split_bytes: int, max_record_bytes: int
) -> list[SegmentSlice]:
    out: list[SegmentSlice] = []
    for r in replicas:
        for seg in r.segments:
            for own in range(0, max(seg.length, 1), split_bytes):
                out.append(
                    SegmentSlice(
                        root=root,
                        group=r.group,
                        broker_id=r.broker_id,
                        path=seg.path,
                        segment_start=seg.start,
                        segment_end=seg.start + r.segment_bytes,
                        own_from=seg.start + own,
                        own_to=seg.start + min(seg.length, own + split_bytes),
                        epochs=r.epochs,
                        max_record_bytes=min(max_record_bytes, r.segment_bytes),
                    )
                )
    return out


def epoch_of(offsets: np.ndarray[Any, Any], epochs: tuple[tuple[int, int], ...]) -> pa.Array:
    """The epoch whose range holds each offset (null before the first entry / no file)."""
    if not epochs:
        return pa.nulls(len(offsets), pa.int32())
    starts = np.array([s for _, s in epochs], dtype=np.int64)
    numbers = np.array([e for e, _ in epochs], dtype=np.int32)
    i = np.searchsorted(starts, offsets, side="right") - 1
    return pa.array(numbers[np.maximum(i, 0)], mask=i < 0, type=pa.int32())


def _strings(
    a: np.ndarray[Any, Any], at: np.ndarray[Any, Any], length: np.ndarray[Any, Any]
) -> pa.Array:
    data, offsets = gather(a, at, length)
    binary = pa.Array.from_buffers(
        pa.large_binary(), len(at), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    try:
        return pc.cast(binary, pa.large_string()).cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decode per value, replacing bad bytes
        return pa.array(
            [None if v is None else v.decode("utf-8", "replace") for v in binary.to_pylist()],
            pa.string(),
        )


def slice_batch(
    part: SegmentSlice, buf: mmap.mmap | memoryview | bytes, base_offset: int, scan: ColumnScan
) -> pa.RecordBatch:
    """The rows of one scanned slice (messages, then problems); `buf` holds the segment's
    bytes from commit log offset `base_offset`."""
    a = np.frombuffer(buf, dtype=np.uint8)
    rec = scan.records
    n = len(rec)
    props = _strings(a, rec.properties_at, rec.properties_len)
    keys = pc.struct_field(pc.extract_regex(props, _KEYS_PATTERN), [0])
    real_topic, real_qid, uniq_key = (
        pc.struct_field(pc.extract_regex(props, p), [0]) for p in _PARKED_PATTERNS
    )
    all_ok = bool(rec.crc_ok.all())
    problem = (
        pa.nulls(n, pa.string())
        if all_ok
        else pa.array([None if ok else BAD_CRC for ok in rec.crc_ok.tolist()], pa.string())
    )
    messages = pa.RecordBatch.from_arrays(
        [
            pa.array([part.group], pa.string()).take(np.zeros(n, np.int32)),
            pa.array(np.full(n, part.broker_id, np.int32)),
            pa.array(rec.physical_offset),
            pa.array(rec.size.astype(np.int32)),
            pa.array(rec.body_crc),
            _strings(a, rec.topic_at, rec.topic_len),
            pa.array(rec.queue_id.astype(np.int32)),
            pa.array(rec.queue_offset),
            keys,
            pa.array(rec.store_timestamp_ms),
            epoch_of(rec.physical_offset, part.epochs),
            pa.array(rec.record_crc),
            problem,
            pa.array(
                [
                    f"stored bodyCRC {int(rec.stored_crc[k])}, body has {int(rec.body_crc[k]) & 0x7FFFFFFF}"
                    if not ok
                    else None
                    for k, ok in enumerate(rec.crc_ok)
                ]
                if not rec.crc_ok.all()
                else pa.nulls(n, pa.string()),
                pa.string(),
            ),
            real_topic,
            pc.cast(real_qid, pa.int32(), safe=False) if n else pa.nulls(0, pa.int32()),
            uniq_key,
        ],
        schema=ARROW_SCHEMA,
    )
    if not scan.problems:
        return messages
    p = scan.problems
    offsets = np.array([x.offset for x in p], dtype=np.int64)
    record_crc = [_region_crc(buf, x.offset - base_offset, x.length) for x in p]
    problems = pa.RecordBatch.from_pylist(
        [
            {
                "group": part.group,
                "brokerId": part.broker_id,
                "physicalOffset": x.offset,
                "size": x.length,
                "recordCrc": c,
                "problem": x.stop.name,
                "detail": x.detail,
            }
            for x, c in zip(p, record_crc, strict=True)
        ],
        schema=ARROW_SCHEMA,
    )
    problems = problems.set_column(10, "epoch", epoch_of(offsets, part.epochs))
    return pa.Table.from_batches([messages, problems]).combine_chunks().to_batches()[0]


def _region_crc(buf: mmap.mmap | memoryview | bytes, at: int, length: int) -> int:
    import zlib

    return zlib.crc32(memoryview(buf)[at : at + min(length, 1 << 20)])


def read_slice(part: SegmentSlice) -> pa.RecordBatch:
    """Rows of one slice: mapped from a local file, by ranged reads from anything else."""
    filesystem, _ = resolve(part.root)
    if is_local(filesystem):
        return read_mapped(part)
    return read_ranged(part, filesystem)


def read_mapped(part: SegmentSlice) -> pa.RecordBatch:
    """The segment is mapped, not read: a slice touches only its pages."""
    with open(part.path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return _empty()
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        scan = scan_slice(
            mm,
            part.segment_start,
            part.segment_end,
            part.own_from,
            part.own_to,
            first_is_boundary=part.own_from == part.segment_start,
            max_record_bytes=part.max_record_bytes,
        )
        # Every column is a copy (gathers, computed arrays): nothing aliases the map.
        return slice_batch(part, mm, part.segment_start, scan)
    finally:
        # A numpy view may still be alive (e.g. held by a traceback): then GC unmaps it.
        with contextlib.suppress(BufferError):
            mm.close()


def read_ranged(
    part: SegmentSlice, filesystem: fs.FileSystem, slack_bytes: int = RANGED_SLACK_BYTES
) -> pa.RecordBatch:
    """The slice from `filesystem` by ranged reads, with the same rows as `read_mapped`.

    First the slice plus one largest record and a little more: on a clean slice the
    walk ends at the next record or the segment's blank within it (`clean_slice` with
    complete=False decides only on whole records). Otherwise (damage, a zero-filled or
    cut tail, a walk reaching the window's edge) the rest of the segment from the
    slice start, where `scan_slice` decides exactly as on the whole file."""
    at = part.own_from - part.segment_start
    with filesystem.open_input_file(part.path) as f:
        length = f.size()
        if length <= at:
            return _empty()
        window_end = min(
            length,
            part.own_to - part.segment_start + part.max_record_bytes
            + END_FILE_MIN_BLANK_LENGTH + slack_bytes,
        )  # fmt: skip
        buf = bytes(f.read_at(window_end - at, at))
        args = (part.own_from, part.segment_end, part.own_from, part.own_to)
        first = part.own_from == part.segment_start
        scan = clean_slice(buf, *args, first_is_boundary=first,
                           max_record_bytes=part.max_record_bytes, complete=window_end == length)  # fmt: skip
        if scan is None:
            if window_end < length:
                buf = bytes(f.read_at(length - at, at))
            scan = scan_slice(buf, *args, first_is_boundary=first,
                              max_record_bytes=part.max_record_bytes)  # fmt: skip
    return slice_batch(part, buf, part.own_from, scan)


def _empty() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)


class CommitLogReader(DataSourceReader):
    def __init__(
        self,
        path: str,
        split_bytes: int,
        max_record_bytes: int,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> None:
        self.path = path
        self.split_bytes = split_bytes
        self.max_record_bytes = max_record_bytes
        self.batch_rows = batch_rows

    def partitions(self) -> list[SegmentSlice]:
        parts = slices(self.path, find_replicas(self.path), self.split_bytes, self.max_record_bytes)
        # Spark needs at least one partition; an empty root yields no rows.
        return parts or [
            SegmentSlice(root="", group="", broker_id=0, path="", segment_start=0, segment_end=0,
                         own_from=0, own_to=0, epochs=(), max_record_bytes=0)
        ]  # fmt: skip

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SegmentSlice), partition
        if not partition.path:
            return
        batch = read_slice(partition)
        # Zero-copy slices of at most batch_rows rows: the JVM reads each Arrow message
        # into its heap, and a message over half a G1 region (0.5 MiB with a 1 GiB heap)
        # is a humongous allocation that triggers old-generation collections.
        for at in range(0, batch.num_rows, self.batch_rows):
            yield batch.slice(at, self.batch_rows)


class CommitLogDataSource(DataSource):
    """Options: `path` (the store root, as given to load(): an absolute path or a URI),
    `splitBytes`, `maxRecordBytes`, `batchRows`."""

    @classmethod
    def name(cls) -> str:
        return "commitlog"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> CommitLogReader:
        path = self.options.get("path")
        if not path:
            raise ValueError('commitlog source: give the store root, load("/path/to/stores")')
        if not is_uri(path) and not os.path.isabs(path):
            # The slices name segment files under it; executors open them in their own
            # working directories, where a relative path means something else.
            raise ValueError(
                f"commitlog source: the store root must be absolute (executors resolve a "
                f"relative one in their own working directory): {path!r}"
            )
        return CommitLogReader(
            path,
            int(self.options.get("splitBytes", DEFAULT_SPLIT_BYTES)),
            int(self.options.get("maxRecordBytes", DEFAULT_MAX_RECORD_BYTES)),
            int(self.options.get("batchRows", DEFAULT_BATCH_ROWS)),
        )
