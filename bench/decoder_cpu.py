"""CPU cost of the store's v1 decoder (issue 18 item 3), which does not move with load.

    .venv/bin/python bench/decoder_cpu.py [--quick] [--no-write]

What it measures (one process, no servers, no fsync):
1. `scan_records` over chains of k = 1, 8, 128 records of 1 KiB bodies without
   properties (what bench/produce.py sends): ns per record, timeit's minimum, the
   number least disturbed by other processes on a shared machine.
2. The slave's store path: `MessageStore.append_replicated` of 20,480 such records in
   chunks of 1 MiB, 144 KiB (one 128-message produce batch), 16 KiB and 4 KiB on
   ASYNC_FLUSH: process CPU us per message, best of N.
3. The floor: zlib.crc32 over one 1 KiB body (every scan verifies each body CRC).
4. The remoting JSON header of each golden frame (tests/fixtures/rocketmq/json-*.bin, a
   real 5.3.1 client's): header_json's decode and encode, and the parse alone by
   `json.loads` (what decode calls) and by orjson where installed (the most an orjson path
   could save; issue 38 item 1), process CPU ns per header, timeit's minimum.
   `--only-header` runs only this.

To compare two trees, run it with each tree's venv, alternating. Writes
bench/results/decoder_cpu.json; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import timeit
import zlib
from pathlib import Path
from typing import Any

from brokergroup_broker.store import FlushDiskType, MessageInput, MessageStore, StoreConfig
from brokergroup_broker.store.message_encode import encode_batch
from brokergroup_broker.store.message_scan import scan_records
from brokergroup_remoting import header_json
from brokergroup_remoting.command import RemotingLimits

RESULTS = Path(__file__).resolve().parent / "results"
GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "rocketmq"
SEGMENT_BYTES = 1 << 30
MAX_MESSAGE_BYTES = 4 << 20
BODY = bytes(1024)


def encoded(count: int) -> bytes:
    batch = [MessageInput("BenchTopic", i % 4, BODY) for i in range(count)]
    return bytes(
        encode_batch(
            batch, start_offset=0, segment_bytes=SEGMENT_BYTES, store_host=("127.0.0.1", 10911),
            store_timestamp_ms=1, queue_offset_of=lambda _key: 0,
            max_message_bytes=MAX_MESSAGE_BYTES,
        ).data
    )  # fmt: skip


def scan_ns_per_record(repeat: int) -> dict[str, int]:
    out = {}
    for k in (1, 8, 128):
        data = encoded(k)
        number = max(1, 256 // k)
        best = min(
            timeit.repeat(
                lambda data=data: scan_records(
                    data, 0, SEGMENT_BYTES, verify_crc=True, max_record_bytes=MAX_MESSAGE_BYTES
                ),
                number=number,
                repeat=repeat,
            )
        )
        out[f"k={k}"] = round(best / number / k * 1e9)
    return out


def slave_us_per_message(count: int, repeat: int) -> dict[str, float]:
    data = encoded(count)
    out = {}
    for chunk in (1 << 20, 144 * 1024, 16 * 1024, 4096):
        best = float("inf")
        for _ in range(repeat):
            root = Path(tempfile.mkdtemp(prefix="bench-decoder-"))
            try:
                store = MessageStore.open(
                    root, StoreConfig(flush_disk_type=FlushDiskType.ASYNC_FLUSH)
                )
                started = time.process_time()
                for offset in range(0, len(data), chunk):
                    store.append_replicated(offset, data[offset : offset + chunk], flush=False)
                best = min(best, time.process_time() - started)
                store.close()
            finally:
                shutil.rmtree(root, ignore_errors=True)
        out[f"chunk_{chunk}"] = round(best / count * 1e6, 2)
    return out


def json_header_ns(repeat: int) -> dict[str, dict[str, int]]:
    """Per golden JSON frame, process CPU ns: header_json's decode and encode, and the parse
    alone by the standard library (what decode calls) and by orjson (where installed: what
    an orjson path could save at most). Interleaved per repetition, the minimum."""
    limits = RemotingLimits()
    try:
        import orjson

        orjson_loads: Any = orjson.loads
    except ImportError:
        orjson_loads = None
    out: dict[str, dict[str, int]] = {}
    for frame in sorted(GOLDEN.glob("json-*.bin")):
        raw = frame.read_bytes()
        header_length = int.from_bytes(raw[4:8], "big") & 0xFFFFFF
        header = raw[8 : 8 + header_length]
        cmd = header_json.decode_json_header(header, b"", limits)
        assert header_json.encode_json_header(cmd) == header, frame.name  # the golden decides
        calls: dict[str, Any] = {
            "decode": lambda h=header: header_json.decode_json_header(h, b"", limits),
            "encode": lambda c=cmd: header_json.encode_json_header(c),
            "parse_json_loads": lambda h=header: json.loads(
                h.decode(), object_pairs_hook=header_json._Pairs
            ),
        }
        if orjson_loads is not None:
            calls["parse_orjson_loads"] = lambda h=header: orjson_loads(h)
        best: dict[str, float] = {}
        number = 200
        for _ in range(repeat):
            for what, call in calls.items():
                # Process CPU time: a busy machine's preemptions do not count.
                took = timeit.Timer(call, timer=time.process_time).timeit(number=number) / number
                best[what] = min(best.get(what, float("inf")), took)
        out[frame.stem] = {k: round(v * 1e9) for k, v in best.items()}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, ~15 s")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results")
    parser.add_argument(
        "--only-header",
        action="store_true",
        help="only the remoting JSON headers (section 4); writes decoder_cpu_json_header.json",
    )
    args = parser.parse_args()
    repeat = 100 if args.quick else 400
    headers = json_header_ns(20 if args.quick else 60)
    for frame, ns in headers.items():
        print(f"JSON header {frame}: {ns} ns")
    if args.only_header:
        only = {"benchmark": "decoder_cpu_json_header", "json_header_ns": headers}
        if not args.no_write:
            (RESULTS / "decoder_cpu_json_header.json").write_text(json.dumps(only, indent=1) + "\n")
        print(json.dumps(only))
        return 0
    crc_ns = min(timeit.repeat(lambda: zlib.crc32(BODY), number=1000, repeat=50)) / 1000 * 1e9
    print(f"floor: zlib.crc32 of a 1 KiB body {crc_ns:.0f} ns")
    result: dict[str, Any] = {
        "benchmark": "decoder_cpu",
        "scan_records_ns_per_record": scan_ns_per_record(repeat),
        "append_replicated_cpu_us_per_msg": slave_us_per_message(20480, 3 if args.quick else 5),
        "crc32_1KiB_ns": round(crc_ns),
        "json_header_ns": headers,
        "quick": args.quick,
    }
    print(f"scan_records ns/record: {result['scan_records_ns_per_record']}")
    print(f"append_replicated CPU us/msg: {result['append_replicated_cpu_us_per_msg']}")
    if not args.no_write:
        (RESULTS / "decoder_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
