"""CPU cost of the broker's batch send path, old against new (issue 38: "the batch decode
and record encode as one pass over the body").

    .venv/bin/python bench/batch_path_cpu.py [--quick] [--no-write]

What it measures (one process, no servers, no I/O): one SEND_BATCH_MESSAGE body of 128
messages of 1 KiB as the stock 5.3.1 client lays it out (MessageDecoder.encodeMessages;
property order and names as in the golden frame tests/fixtures/rocketmq/json-batch.bin),
with the request-level properties the client sends for a batch (UNIQ_KEY, WAIT), taken
from body bytes to the records the store appends:

- old: `wire.decode_batch_body`, the `{**request, **message}` merge, a copy of every
  message's dict (what `SendBatch.store_properties` did then), `encode_run` over dicts (the
  path before the one-pass change);
- new: `wire.decode_batch_send` (properties kept as the bytes they came in),
  `SendBatch.store_properties` (no copy), `encode_run` over `EncodedProperties`, with the
  Python references of the kernels (`BROKERGROUP_NATIVE=python`);
- native: the same calls with the compiled kernels (`brokergroup_native`, where built): the
  one pass and the record loop in Rust (docs/performance.md "Compiled kernels").

Two bodies: "load" (KEYS, UNIQ_KEY, WAIT: what bench/rocketmq_client.py's StockClient
sends) and "tagged" (the same with TAGS, so the consume queue's tags code is computed).
Process CPU per batch, timeit's minimum over repetitions, old and new alternating; the
records of both are asserted equal first. Writes bench/results/batch_path_cpu.json; the
last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import functools
import json
import struct
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from brokergroup_broker import kernels
from brokergroup_broker.protocol.messages import SendBatch
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.store.message_encode import EncodedRun, encode_run

T = TypeVar("T")
RESULTS = Path(__file__).resolve().parent / "results"
COUNT = 128
BODY_BYTES = 1024
#: The request header's properties of a stock client's batch (json-batch.bin: "i").
REQUEST = "UNIQ_KEY\x01FD0000000000000000000000000000022BFC30946E097CB4E0950004\x02WAIT\x01true\x02"
REFERENCE_NAMES = frozenset(("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"))


def batch_body(tagged: bool) -> bytes:
    """MessageDecoder.encodeMessages: totalSize, magic, bodyCRC, flag, bodyLength, body,
    propertiesLength, properties; the properties in the order the client's HashMap gives."""
    out = []
    for i in range(COUNT):
        uniq = f"FD0000000000000000000000000000022BFC30946E097CB4E095{i:04X}"
        props = f"KEYS\x01load-0-{i}\x02UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02"
        if tagged:
            props += "TAGS\x01tag" + str(i % 3) + "\x02"
        data = props.encode()
        body = bytes([i % 251]) * BODY_BYTES
        total = 20 + len(body) + 2 + len(data)
        out.append(
            struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(data))
        )
        out.append(data)
    return b"".join(out)


def _encode(batch: SendBatch) -> EncodedRun:
    return encode_run(
        batch.topic, 0, batch.bodies, batch.store_properties(), flag=batch.flag,
        born_timestamp_ms=1_700_000_000_000, born_host=("10.0.0.7", 40001), start_offset=0,
        segment_bytes=1 << 30, store_host=("127.0.0.1", 10911),
        store_timestamp_ms=1_700_000_000_123, first_queue_offset=0, max_message_bytes=4 << 20,
    )  # fmt: skip


def old_path(body: bytes, request: dict[str, str]) -> EncodedRun:
    inner = wire.decode_batch_body(body, max_messages=len(body) // 22)
    props = [{**request, **m.properties} for m in inner]
    return _encode(
        SendBatch("BenchTopic", 0, [m.body for m in inner], [(None, None, dict(p)) for p in props])
    )


def new_path(body: bytes, request: dict[str, str]) -> EncodedRun:
    inner = wire.decode_batch_send(
        body, request, max_messages=len(body) // 22, reference_names=REFERENCE_NAMES
    )
    assert not inner.may_name_reference  # the one pass, not the fallback
    props = [(None, None, p) for p in inner.properties]
    return _encode(SendBatch("BenchTopic", 0, inner.bodies, props))


def with_kernels(module: ModuleType | None, call: Callable[[], T]) -> T:
    """`call` with the compiled kernels (`module`) or the Python references (None)."""
    saved = kernels.NATIVE
    kernels.NATIVE = module
    try:
        return call()
    finally:
        kernels.NATIVE = saved


def measure(repeat: int, number: int) -> dict[str, dict[str, float]]:
    request = wire.decode_properties(REQUEST)
    native = kernels.NATIVE
    out: dict[str, dict[str, float]] = {}
    for name, tagged in (("load", False), ("tagged", True)):
        body = batch_body(tagged)
        old = with_kernels(None, functools.partial(old_path, body, request))
        new = with_kernels(None, functools.partial(new_path, body, request))
        assert (old.data, old.tags_codes) == (new.data, new.tags_codes), name
        calls: dict[str, Callable[[], object]] = {
            "old": functools.partial(
                with_kernels, None, functools.partial(old_path, body, request)
            ),
            "new": functools.partial(
                with_kernels, None, functools.partial(new_path, body, request)
            ),
        }
        if native is not None:
            compiled = with_kernels(native, functools.partial(new_path, body, request))
            assert (compiled.data, compiled.tags_codes) == (new.data, new.tags_codes), name
            calls["native"] = functools.partial(
                with_kernels, native, functools.partial(new_path, body, request)
            )
        best: dict[str, float] = {}
        for _ in range(repeat):
            for what, call in calls.items():  # alternating: old, new, native, old, ...
                took = timeit.Timer(call, timer=time.process_time).timeit(number=number) / number
                best[what] = min(best.get(what, float("inf")), took)
        out[name] = {
            "old_us_per_batch": round(best["old"] * 1e6, 1),
            "new_us_per_batch": round(best["new"] * 1e6, 1),
            "old_us_per_msg": round(best["old"] * 1e6 / COUNT, 2),
            "new_us_per_msg": round(best["new"] * 1e6 / COUNT, 2),
            "new_over_old": round(best["new"] / best["old"], 3),
        }
        if "native" in best:
            out[name] |= {
                "native_us_per_batch": round(best["native"] * 1e6, 1),
                "native_us_per_msg": round(best["native"] * 1e6 / COUNT, 2),
                "native_over_new": round(best["native"] / best["new"], 3),
            }
        print(f"{name}: {out[name]}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, ~5 s")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    result: dict[str, Any] = {
        "benchmark": "batch_path_cpu",
        "batch": {"messages": COUNT, "body_bytes": BODY_BYTES, "request_properties": REQUEST},
        "process_cpu": measure(10 if args.quick else 40, 20),
        "quick": args.quick,
    }
    if not args.no_write:
        (RESULTS / "batch_path_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
