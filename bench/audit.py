"""Audit throughput (DESIGN.md §9, issue 12): MB/s of commit log through the `commitlog`
Spark source with local[1] and local[2], against a single-process pure-Python scan doing
the same decoding work, measured in the same run.

Usage: python bench/audit.py [--quick] [--dir DIR] [--gib G] [--repeat N] [--[no-]audit] [--acks]
       python bench/audit.py --scale [--quick] [--gib 10] [--groups 20] [--dir DIR]

--scale (issue 21 item 4; `scale_main`, bench/results/audit_scale.json): the whole audit
on ≥ 10 GiB across ≥ 20 groups of two replicas each, on local[2] and on a standalone
cluster (tests/pipeline/spark_standalone.py) of two workers with one core and 1 GiB
each, beside the page-cache read ceiling of the same files; seconds per stage and the
peak resident memory of every Spark process (sampled every 0.5 s).

Writes one replica of 1 KiB messages, each with its own KEYS property, in 64 MiB
segments (≥ 1 GiB for the full run, 128 MiB with --quick). Then, in this order:

- ceiling: every segment read from the page cache into one buffer, and ISA-L's CRC32
  over every byte (the decoder's one per-byte pass), one core each;
- python: `message_scan.scan_records` (CRC checked) over every segment, then for every
  record the reference decoder `decode_record` (topic, queue, offsets, keys, store
  timestamp), the body CRC and the record CRC: every column the Spark source yields,
  one process, a Python loop per record (zlib's CRC32);
- decoder: the source's own `read_slice` over every slice in this process (the
  vectorised decoder and the Arrow batch, no Spark): what one core decodes;
- local1 / local2: after one unmeasured local[2] session over the whole store (the
  driver JVM outlives sessions and keeps compiling: a later session runs faster code),
  --repeat sessions of each, alternating, each keeping its best; in each, a Spark
  session (start-up and a warm-up query not counted), then a
  query reading every column of every row (count, sums, maxima, string lengths: nothing
  is pruned): the scan stage, planning and the Python workers' Arrow transfer included;
- audit_local1 / audit_local2 (full run, or --audit): `job.run_audit` on the same store
  in the same session: the scan plus every check (one replica: no divergence join;
  with --acks, an acknowledgement of every record to match).

Each timing is the best of --repeat runs (default 1 with --quick, 3 otherwise: the
machine is shared; for Spark, --repeat alternating sessions). MB are 10^6 bytes of
commit log. Cores are given, not assumed: every thread of the benchmark and its
descendants (driver JVM, Python daemons and workers) is pinned to one core for the ceilings, python, decoder and local[1], and to
two for local[2] (sched_setaffinity). Unpinned, local[1]'s Python worker and its JVM
task thread overlap on two cores, and "per core" would be up to 1.4 cores.
`mb_per_cpu_s` divides by the CPU seconds the whole process tree used in the same run.
The load average is recorded before and after. Last stdout line: one JSON object; also
bench/results/audit.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_info, print_last_line, write_result

from brokergroup_broker.store.message_encode import encode_run
from brokergroup_broker.store.message_scan import decode_record, scan_records

SEGMENT_BYTES = 64 << 20
BODY_BYTES = 1024


def write_store(root: Path, total_bytes: int) -> int:
    """One replica (brokerId 1 of group bench) of `total_bytes` commit log; every message
    has its own key (so the audit's duplicate check finds nothing)."""
    store = root / "bench" / "broker-1"
    (store / "commitlog").mkdir(parents=True)
    (store / ".broker.meta").write_text("clusterName=C\nbrokerName=bench\nbrokerId=1\n")
    bodies = [os.urandom(BODY_BYTES) for _ in range(256)]
    pos, qo = 0, 0
    files: dict[int, Any] = {}
    try:
        while pos < total_bytes:
            props = [{"KEYS": f"key-{qo + i}"} for i in range(len(bodies))]
            run = encode_run(
                "BenchTopic", 0, bodies, props, flag=0, born_timestamp_ms=1, born_host=("127.0.0.1", 1),
                start_offset=pos, segment_bytes=SEGMENT_BYTES, store_host=("127.0.0.1", 10911),
                store_timestamp_ms=2, first_queue_offset=qo, max_message_bytes=1 << 20,
            )  # fmt: skip
            data = memoryview(run.data)
            at = 0
            while at < len(data):
                seg = (pos + at) // SEGMENT_BYTES * SEGMENT_BYTES
                take = min(len(data) - at, seg + SEGMENT_BYTES - (pos + at))
                f = files.get(seg)
                if f is None:
                    f = files[seg] = open(store / "commitlog" / f"{seg:020d}", "wb")  # noqa: SIM115
                f.write(data[at : at + take])
                at += take
            pos = run.end_offset
            qo += len(bodies)
    finally:
        for f in files.values():
            f.close()
    return pos


def _segments(root: Path) -> list[Path]:
    return sorted((root / "bench" / "broker-1" / "commitlog").iterdir())


def python_scan(root: Path) -> tuple[int, int, int]:
    """(records, bytes, checksum): the pure-Python reader doing the source's work: the
    record-by-record scan with its CRC check, then per record the reference decoder's
    fields (topic, queueId, queueOffset, keys, storeTimestamp), the body CRC and the
    record CRC (over header, topic and properties, seeded with the body CRC)."""
    records = size = checksum = 0
    crc32 = zlib.crc32
    for seg in _segments(root):
        data = seg.read_bytes()
        view = memoryview(data)
        base = int(seg.name)
        for rec in scan_records(data, base, SEGMENT_BYTES).records:
            s = rec.physical_offset - base
            m = decode_record(data, s)
            body_at = s + 48 + (20 if m.sys_flag & 0x10 else 8) + 8
            body_at += (20 if m.sys_flag & 0x20 else 8) + 16
            body_end = body_at + len(m.body)
            body_crc = crc32(m.body)
            record_crc = crc32(view[body_end : s + m.size], crc32(view[s:body_at], body_crc))
            row = (m.topic, m.queue_id, m.queue_offset, m.properties.get("KEYS"),
                   m.store_timestamp_ms, body_crc, record_crc)  # fmt: skip
            checksum ^= hash(row)
            records += 1
        size += len(data)
    return records, size, checksum


def decoder_scan(root: Path, split_bytes: int) -> tuple[int, int]:
    """(rows, checksum): the source's read_slice over every slice, this process."""
    from brokergroup_audit.source import DEFAULT_MAX_RECORD_BYTES, read_slice, slices
    from brokergroup_audit.stores import find_replicas

    rows = checksum = 0
    for part in slices(str(root), find_replicas(str(root)), split_bytes, DEFAULT_MAX_RECORD_BYTES):
        batch = read_slice(part)
        rows += batch.num_rows
        checksum ^= int(batch.column("recordCrc").to_numpy().sum())
    return rows, checksum


def read_ceiling(root: Path) -> tuple[int, int]:
    """(bytes, checksum): every segment read into one reused buffer (the files were just
    written, so from the page cache): what one core gets from the files at best."""
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    total = checksum = 0
    for seg in _segments(root):
        with open(seg, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
                checksum ^= view[n - 1]
    return total, checksum


def crc_ceiling(root: Path) -> int:
    """The CRC32 of every byte (the decoder's one unavoidable per-byte pass), one core."""
    from brokergroup_audit.fastscan import crc32

    c = 0
    for seg in _segments(root):
        c = crc32(seg.read_bytes(), c)
    return c


def _tree() -> dict[int, int]:
    """pid -> CPU ticks (user + system, reaped children included) of this process and
    every live descendant: the driver JVM, Spark's Python daemons and workers."""
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        parent[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    me = os.getpid()
    mine: dict[int, int] = {}
    for pid, t in ticks.items():
        p = pid
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me:
            mine[pid] = t
    return mine


def tree_cpu_seconds() -> float:
    return sum(_tree().values()) / os.sysconf("SC_CLK_TCK")


def pin_tree(cpus: set[int]) -> None:
    """Every thread of this process and its descendants onto `cpus`. local[N] gets N
    cores: with more, local[1]'s Python worker and JVM run side by side on two cores
    and "per core" would not be one core. Threads and processes started later inherit
    their creator's affinity."""
    for pid in _tree():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError):  # exited meanwhile
                os.sched_setaffinity(int(tid), cpus)


def best_of(repeat: int, run: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, seconds, CPU seconds) of the fastest of `repeat` runs."""
    best, best_cpu = float("inf"), 0.0
    result: Any = None
    for _ in range(repeat):
        cpu = tree_cpu_seconds()
        began = time.perf_counter()
        result = run()
        took = time.perf_counter() - began
        if took < best:
            best, best_cpu = took, tree_cpu_seconds() - cpu
    return result, best, best_cpu


def best_session(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest scan and the fastest audit of several sessions (each with its CPU)."""
    out = dict(min(runs, key=lambda r: r["scan_s"]))
    if "audit_s" in out:
        fastest = min(runs, key=lambda r: r["audit_s"])
        out.update({k: v for k, v in fastest.items() if k.startswith("audit")})
    return out


def every_record_acknowledged(root: Path, split_bytes: int) -> list[dict[str, Any]]:
    """An acknowledgement for every record of the store, as `job.acknowledged` returns them."""
    from brokergroup_audit.source import DEFAULT_MAX_RECORD_BYTES, read_slice, slices
    from brokergroup_audit.stores import find_replicas

    columns = ["topic", "queueId", "queueOffset", "physicalOffset", "keys", "bodyCRC"]
    out: list[dict[str, Any]] = []
    for part in slices(str(root), find_replicas(str(root)), split_bytes, DEFAULT_MAX_RECORD_BYTES):
        for r in read_slice(part).select(columns).to_pylist():
            out.append(
                {"ackLine": len(out) + 1, "group": "bench", "topic": r["topic"],
                 "queueId": r["queueId"], "queueOffset": r["queueOffset"],
                 "physicalOffset": r["physicalOffset"], "key": r["keys"],
                 "bodyCrc": r["bodyCRC"], "ackTimeMs": 1, "masterEpoch": None}
            )  # fmt: skip
    return out


def spark_runs(
    root: Path,
    master: str,
    cpus: set[int],
    split_bytes: int,
    audit: bool,
    acks: list[dict[str, Any]],
) -> dict[str, Any]:
    """Scan (and audit) seconds of one session of `master` (start-up not counted); the
    caller alternates sessions and keeps each master's best (`best_session`)."""
    from pyspark.sql import functions as F

    from brokergroup_audit.job import run_audit
    from brokergroup_audit.session import spark_session

    spark = spark_session(master, app_name=f"bench-audit-{master}")
    try:

        def scan() -> int:
            df = (
                spark.read.format("commitlog")
                .option("splitBytes", str(split_bytes))
                .load(str(root))
            )
            # Numeric aggregates only (string max() would force Spark's slow sort-based
            # aggregation path, which the audit's own queries never use); strings are
            # still read: their lengths are summed.
            row = df.agg(
                F.count("*").alias("n"), F.sum("size"), F.max("recordCrc"), F.max("bodyCRC"),
                F.sum(F.length("keys")), F.sum(F.length("topic")), F.max("queueOffset"),
                F.max("storeTimestamp"), F.max("epoch"), F.count("problem"),
            ).collect()[0]  # fmt: skip
            return int(row["n"])

        # Warm-up: starts the executors' Python workers and JITs the JVM side.
        warm = Path(tempfile.mkdtemp(prefix="audit-warm-"))
        write_store(warm, 8 << 20)
        pin_tree(cpus)
        spark.read.format("commitlog").option("splitBytes", str(2 << 20)).load(str(warm)).count()
        shutil.rmtree(warm)
        pin_tree(cpus)  # the Python daemon and workers the warm-up started
        out: dict[str, Any] = {}
        out["rows"], out["scan_s"], out["scan_cpu_s"] = best_of(1, scan)
        if audit:
            result, out["audit_s"], out["audit_cpu_s"] = best_of(
                1, lambda: run_audit(spark, str(root), acks=acks, split_bytes=split_bytes)
            )
            out["audit_findings"] = result.summary["findingCounts"]
            out["audit_stages"] = result.summary["stageSeconds"]
            out["audit_records"] = result.summary["replicas"][0]["records"]
        return out
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 MiB instead of ≥ 1 GiB")
    parser.add_argument(
        "--dir", default=None, help="where to write the store (default: a temp dir)"
    )
    parser.add_argument("--gib", type=float, default=1.0, help="store size of the full run")
    parser.add_argument("--repeat", type=int, default=None, help="best of N timings")
    parser.add_argument(
        "--audit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time run_audit too (default: on for the full run, off with --quick)",
    )
    parser.add_argument(
        "--acks",
        action="store_true",
        help="the audits also match an acknowledgement for every record",
    )
    args = parser.parse_args()
    total = (128 << 20) if args.quick else int(args.gib * (1 << 30))
    split = (32 << 20) if args.quick else SEGMENT_BYTES
    repeat = args.repeat or (1 if args.quick else 3)
    audit = (not args.quick) if args.audit is None else args.audit
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        parser.error("needs two cores (local[2] is measured on two)")
    one_core, two_cores = set(sorted(allowed)[:1]), set(sorted(allowed)[:2])
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="audit-bench-", dir=args.dir))
    try:
        size = write_store(root, total)
        assert sum(p.stat().st_size for p in _segments(root)) == size
        pin_tree(one_core)
        (read_bytes, _), read_s, _ = best_of(repeat, lambda: read_ceiling(root))
        assert read_bytes == size, (read_bytes, size)
        _, crc_s, _ = best_of(repeat, lambda: crc_ceiling(root))
        (py_records, py_bytes, _), py_s, py_cpu = best_of(repeat, lambda: python_scan(root))
        assert py_bytes == size, (py_bytes, size)
        (dec_rows, _), dec_s, dec_cpu = best_of(repeat, lambda: decoder_scan(root, split))
        # The driver JVM outlives a session and its JIT keeps compiling, so a later
        # session runs faster code (measured: up to 25%). One unmeasured session warms
        # it, then local[1] and local[2] sessions alternate and each keeps its best.
        acks = every_record_acknowledged(root, split) if args.acks else []
        spark_runs(root, "local[2]", two_cores, split, audit, acks)
        runs: dict[str, list[dict[str, Any]]] = {"local[1]": [], "local[2]": []}
        for _ in range(repeat):
            for master, cores in (("local[1]", one_core), ("local[2]", two_cores)):
                runs[master].append(spark_runs(root, master, cores, split, audit, acks))
        one, two = best_session(runs["local[1]"]), best_session(runs["local[2]"])
        assert one["rows"] == two["rows"] == dec_rows == py_records, (one, two, dec_rows)
        if audit:
            assert one["audit_records"] == two["audit_records"] == py_records, (one, two)
    finally:
        pin_tree(allowed)
        shutil.rmtree(root, ignore_errors=True)
    mb = size / 1e6

    def rate(seconds: float | None) -> float | None:
        return None if seconds is None else round(mb / seconds, 1)

    result: dict[str, Any] = {
        "bytes": size,
        "records": py_records,
        "quick": args.quick,
        "acks": len(acks),
        "split_bytes": split,
        "partitions": -(-size // split),
        "repeat": repeat,
        "ceiling": {
            "mb_per_s_page_cache_read": rate(read_s),
            "mb_per_s_crc32": rate(crc_s),
        },
        "mb_per_s_python": rate(py_s),
        "mb_per_s_decoder": rate(dec_s),
        "mb_per_s_local1": rate(one["scan_s"]),
        "mb_per_s_local2": rate(two["scan_s"]),
        "scaling_local2_over_local1": round(one["scan_s"] / two["scan_s"], 2),
        "mb_per_s_audit_local1": rate(one.get("audit_s")),
        "mb_per_s_audit_local2": rate(two.get("audit_s")),
        "scaling_audit_local2_over_local1": (
            round(one["audit_s"] / two["audit_s"], 2) if audit else None
        ),
        "mb_per_cpu_s": {
            "python": rate(py_cpu),
            "decoder": rate(dec_cpu),
            "local1": rate(one["scan_cpu_s"]),
            "local2": rate(two["scan_cpu_s"]),
            "audit_local1": rate(one.get("audit_cpu_s")),
            "audit_local2": rate(two.get("audit_cpu_s")),
        },
        "audit_stage_seconds": {
            "local1": one.get("audit_stages"),
            "local2": two.get("audit_stages"),
        },
        "audit_findings": {k: v for k, v in one.get("audit_findings", {}).items() if v},
        "seconds": {
            "python": round(py_s, 2),
            "decoder": round(dec_s, 2),
            "local1": round(one["scan_s"], 2),
            "local2": round(two["scan_s"], 2),
            "audit_local1": one.get("audit_s") and round(one["audit_s"], 2),
            "audit_local2": two.get("audit_s") and round(two["audit_s"], 2),
        },
        "targets": {
            "local2_ge_1.7x_local1": one["scan_s"] / two["scan_s"] >= 1.7,
            "local1_per_core_ge_python": py_s >= one["scan_s"],
            "local1_per_core_ge_200_mb_s": mb / one["scan_s"] >= 200,
            "local1_per_cpu_s_ge_python": py_cpu >= one["scan_cpu_s"],
        },
        "cpus": os.cpu_count(),
        "cores_given": {"python": 1, "decoder": 1, "local1": 1, "local2": 2},
        "load_average_1m": round(load_before[0], 2),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "machine": machine_info(),
    }
    write_result("audit", result)
    print_last_line(result)


#: --scale: each group has two replicas (copies of one log), so the divergence join runs.
SCALE_REPLICAS = 2


def write_scale_store(root: Path, total_bytes: int, groups: int) -> int:
    """`groups` groups of SCALE_REPLICAS replicas: one log written once by the broker's
    encoder (`write_store`), its segments copied under every group's and replica's name
    (.broker.meta with brokerName g-NN). Returns the bytes of commit log in all."""
    seed = root / "seed"
    per_replica = -(-total_bytes // (groups * SCALE_REPLICAS))
    per_replica = -(-per_replica // SEGMENT_BYTES) * SEGMENT_BYTES
    write_store(seed, per_replica)
    segments = sorted((seed / "bench" / "broker-1" / "commitlog").iterdir())
    total = 0
    for g in range(groups):
        for broker_id in range(1, SCALE_REPLICAS + 1):
            store = root / "stores" / f"g-{g:02d}" / f"broker-{broker_id}"
            (store / "commitlog").mkdir(parents=True)
            (store / ".broker.meta").write_text(
                f"clusterName=C\nbrokerName=g-{g:02d}\nbrokerId={broker_id}\n"
            )
            for seg in segments:
                shutil.copyfile(seg, store / "commitlog" / seg.name)
                total += seg.stat().st_size
    shutil.rmtree(seed)
    return total


class MemorySampler:
    """Peak resident memory (VmRSS) of every process of this tree, sampled every 0.5 s,
    by role: the driver JVM, executor JVMs (standalone), Python workers and daemons."""

    def __init__(self) -> None:
        import threading

        self.peak: dict[str, int] = {}  # role -> peak RSS of one process of it, bytes
        self.peak_total: dict[str, int] = {}  # role -> peak of the sum over its processes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _role(pid: int) -> str | None:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            return None
        if b"CoarseGrainedExecutorBackend" in cmd:
            return "executor_jvm"
        if b"deploy.master.Master" in cmd or b"deploy.worker.Worker" in cmd:
            return None  # the standalone master and workers: not the audit's work
        if b"java" in cmd.split(b" ", 1)[0]:
            return "driver_jvm"
        if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
            return "python_worker"
        return None

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            totals: dict[str, int] = {}
            for pid in _tree():
                role = self._role(pid)
                if role is None:
                    continue
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                rss = next(
                    (
                        int(x.split()[1]) * 1024
                        for x in status.splitlines()
                        if x.startswith("VmRSS:")
                    ),
                    0,
                )
                self.peak[role] = max(self.peak.get(role, 0), rss)
                totals[role] = totals.get(role, 0) + rss
            for role, v in totals.items():
                self.peak_total[role] = max(self.peak_total.get(role, 0), v)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def mib(self) -> dict[str, dict[str, float]]:
        return {
            "peak_one_process": {k: round(v / 2**20, 1) for k, v in sorted(self.peak.items())},
            "peak_all_processes": {
                k: round(v / 2**20, 1) for k, v in sorted(self.peak_total.items())
            },
        }


def scale_audit(
    root: Path,
    master: str,
    cpus: set[int],
    size: int,
    events: Path,
    conf: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One run_audit of the whole store on `master` (session start and a warm-up query
    not counted): seconds, MB/s, MB/s per core, stages, findings, peak memory, and the
    executors' side of each stage from the session's event log (in `events`)."""
    from spark_events import newest_event_log, summarize

    from brokergroup_audit.job import run_audit
    from brokergroup_audit.session import spark_session

    logs_before = set(events.iterdir())
    spark = spark_session(master, app_name=f"bench-audit-scale-{master}", conf=conf)
    out: dict[str, Any] = {}
    try:
        warm = Path(tempfile.mkdtemp(prefix="audit-warm-"))
        write_store(warm, 8 << 20)
        pin_tree(cpus)
        spark.read.format("commitlog").option("splitBytes", str(2 << 20)).load(str(warm)).count()
        shutil.rmtree(warm)
        pin_tree(cpus)
        with MemorySampler() as memory:
            cpu = tree_cpu_seconds()
            began = time.perf_counter()
            result = run_audit(spark, str(root), split_bytes=SEGMENT_BYTES)
            took = time.perf_counter() - began
            cpu = tree_cpu_seconds() - cpu
        s = result.summary
        out = {
            "seconds": round(took, 2),
            "mb_per_s": round(size / 1e6 / took, 1),
            "mb_per_s_per_core": round(size / 1e6 / took / len(cpus), 1),
            "mb_per_cpu_s": round(size / 1e6 / cpu, 1),
            "cores": len(cpus),
            "stage_seconds": s["stageSeconds"],
            "records": sum(r["records"] for r in s["replicas"]),
            "data_costing_findings": s["dataCostingFindings"],
            "memory_mib": memory.mib(),
        }
    finally:
        spark.stop()
    log = newest_event_log(events, logs_before)
    out["executor_side"] = summarize(log) if log is not None else None
    return out


def scale_main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.pipeline.spark_standalone import standalone_cluster

    allowed = os.sched_getaffinity(0)
    two_cores = set(sorted(allowed)[:2])
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="audit-scale-", dir=args.dir))
    try:
        began = time.perf_counter()
        size = write_scale_store(root, int(args.gib * (1 << 30)), args.groups)
        write_s = time.perf_counter() - began
        stores = root / "stores"
        # Every session's event log (the Spark UI's stage and task metrics), read back by
        # spark_events.summarize: spark-defaults.conf is read when pyspark starts the
        # driver JVM (spark-submit), so it must exist before the first session.
        events = Path(tempfile.mkdtemp(prefix="audit-scale-events-", dir=args.dir))  # kept
        conf = root / "conf"
        conf.mkdir()
        (conf / "spark-defaults.conf").write_text(
            f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n"
            "spark.eventLog.rolling.enabled false\nspark.eventLog.compress false\n"
        )
        os.environ["SPARK_CONF_DIR"] = str(conf)
        pin_tree(set(sorted(allowed)[:1]))
        read_bytes, read_s = 0, float("inf")
        for _ in range(2):  # the second pass reads from the page cache if it all fits
            began = time.perf_counter()
            read_bytes = 0
            for seg in sorted(p for p in stores.rglob("*") if p.parent.name == "commitlog"):
                with open(seg, "rb", buffering=0) as f:
                    buf = bytearray(8 << 20)
                    while n := f.readinto(buf):
                        read_bytes += n
            read_s = min(read_s, time.perf_counter() - began)
        assert read_bytes == size, (read_bytes, size)
        local2 = scale_audit(stores, "local[2]", two_cores, size, events)
        with standalone_cluster(root / "spark", workers=2, cores=1, memory="1g") as cluster:
            pin_tree(two_cores)
            standalone = scale_audit(stores, cluster.url, two_cores, size, events)
            tuned = (
                scale_audit(stores, cluster.url, two_cores, size, events, conf=args.conf)
                if args.conf
                else None
            )
        assert local2["records"] == standalone["records"], (local2, standalone)
    finally:
        pin_tree(allowed)
        shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {
        "bytes": size,
        "event_logs": str(events),
        "groups": args.groups,
        "replicas_per_group": SCALE_REPLICAS,
        "segment_bytes": SEGMENT_BYTES,
        "split_bytes": SEGMENT_BYTES,
        "records": local2["records"],
        "write_store_s": round(write_s, 1),
        "ceiling": {"mb_per_s_page_cache_read_one_core": round(size / 1e6 / read_s, 1)},
        "local2": local2,
        "standalone_2x1": standalone,
        "standalone_over_local2_per_core": round(
            standalone["mb_per_s_per_core"] / local2["mb_per_s_per_core"], 3
        ),
        "standalone_2x1_with_conf": tuned and {"conf": args.conf, **tuned},
        "standalone_with_conf_over_local2_per_core": tuned
        and round(tuned["mb_per_s_per_core"] / local2["mb_per_s_per_core"], 3),
        "memory_bound": {
            "driver_memory": "1g (spark.driver.memory default: local[2]'s executors live in it)",
            "executor_memory": "1g (spark.executor.memory default; workers --memory 1g)",
            "cache": "DataFrame.cache(): MEMORY_AND_DISK, spills past the storage share",
        },
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    write_result("audit_scale", result)
    print_last_line(result)


if __name__ == "__main__":
    if "--scale" in sys.argv:
        p = argparse.ArgumentParser(description="bench/audit.py --scale")
        p.add_argument("--scale", action="store_true")
        p.add_argument("--gib", type=float, default=10.0)
        p.add_argument("--groups", type=int, default=20)
        p.add_argument("--dir", default=None)
        p.add_argument("--quick", action="store_true", help="0.5 GiB in 4 groups")
        p.add_argument(
            "--conf",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a further standalone run with these Spark settings (repeatable)",
        )
        scale_args = p.parse_args()
        scale_args.conf = dict(c.split("=", 1) for c in scale_args.conf)
        if scale_args.quick:
            scale_args.gib, scale_args.groups = 0.5, 4
        scale_main(scale_args)
    else:
        main()
