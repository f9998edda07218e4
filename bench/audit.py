"""Audit throughput (DESIGN.md §9, issue 12): MB/s of commit log through the `commitlog`
Spark source with local[1] and local[2], against a single-process pure-Python scan of
the same files (message_scan.scan_records with CRC checks: the record-by-record reader the
broker's recovery uses) measured in the same run.

Usage: python bench/audit.py [--quick] [--dir DIR] [--gib G]

Writes one replica of 1 KiB messages with KEYS properties in 64 MiB segments (≥ 1 GiB
for the full run, 128 MiB with --quick), then times, after a warm-up read of one
segment that starts the Python workers, a full read of every row (an aggregation over
all columns, so nothing is pruned). Session start-up is not counted. Last stdout line:
one JSON object; also bench/results/audit.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_info, print_last_line, write_result

from brokergroup_broker.store.message import encode_run, scan_records

SEGMENT_BYTES = 64 << 20
BODY_BYTES = 1024


def write_store(root: Path, total_bytes: int) -> int:
    """One replica (brokerId 1 of group bench) of `total_bytes` commit log."""
    store = root / "bench" / "broker-1"
    (store / "commitlog").mkdir(parents=True)
    (store / ".broker.meta").write_text("clusterName=C\nbrokerName=bench\nbrokerId=1\n")
    bodies = [os.urandom(BODY_BYTES) for _ in range(256)]
    props = [{"KEYS": f"key-{i}"} for i in range(256)]
    pos, qo = 0, 0
    files: dict[int, Any] = {}
    try:
        while pos < total_bytes:
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


def python_scan(root: Path) -> tuple[int, int, float]:
    """(records, bytes, seconds) of scan_records over every segment, one process."""
    records = size = 0
    began = time.perf_counter()
    for seg in sorted((root / "bench" / "broker-1" / "commitlog").iterdir()):
        data = seg.read_bytes()
        result = scan_records(data, int(seg.name), SEGMENT_BYTES)
        records += len(result.records)
        size += len(data)
    return records, size, time.perf_counter() - began


def spark_scan(root: Path, master: str, split_bytes: int) -> tuple[int, float]:
    from pyspark.sql import functions as F

    from brokergroup_audit.job import spark_session

    spark = spark_session(master, app_name=f"bench-audit-{master}")
    try:

        def read() -> int:
            df = (
                spark.read.format("commitlog")
                .option("splitBytes", str(split_bytes))
                .load(str(root))
            )
            row = df.agg(
                F.count("*").alias("n"), F.sum("size"), F.max("recordCrc"), F.max("bodyCRC"),
                F.countDistinct("keys"), F.max("storeTimestamp"), F.max("epoch"),
            ).collect()[0]  # fmt: skip
            return int(row["n"])

        # Warm-up: starts the executors' Python workers (not what we measure).
        warm = Path(tempfile.mkdtemp(prefix="audit-warm-"))
        write_store(warm, 4 << 20)
        spark.read.format("commitlog").load(str(warm)).count()
        shutil.rmtree(warm)
        began = time.perf_counter()
        n = read()
        return n, time.perf_counter() - began
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 MiB instead of ≥ 1 GiB")
    parser.add_argument(
        "--dir", default=None, help="where to write the store (default: a temp dir)"
    )
    parser.add_argument("--gib", type=float, default=1.0, help="store size of the full run")
    args = parser.parse_args()
    total = (128 << 20) if args.quick else int(args.gib * (1 << 30))
    split = (16 << 20) if args.quick else SEGMENT_BYTES
    root = Path(tempfile.mkdtemp(prefix="audit-bench-", dir=args.dir))
    try:
        size = write_store(root, total)
        py_records, py_bytes, py_s = python_scan(root)
        assert py_bytes == size, (py_bytes, size)
        n1, s1 = spark_scan(root, "local[1]", split)
        n2, s2 = spark_scan(root, "local[2]", split)
        assert n1 == n2 == py_records, (n1, n2, py_records)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mb = size / 1e6
    result = {
        "bytes": size,
        "records": py_records,
        "quick": args.quick,
        "split_bytes": split,
        "mb_per_s_python": round(mb / py_s, 1),
        "mb_per_s_local1": round(mb / s1, 1),
        "mb_per_s_local2": round(mb / s2, 1),
        "scaling_local2_over_local1": round(s1 / s2, 2),
        "seconds": {"python": round(py_s, 2), "local1": round(s1, 2), "local2": round(s2, 2)},
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 1),
        "machine": machine_info(),
    }
    write_result("audit", result)
    print_last_line(result)


if __name__ == "__main__":
    main()
