"""The compiled kernels (brokergroup_broker/kernels.py, broker-image/native) against their
Python references, called side by side in one process: for structured inputs, valid and
damaged, each kernel gives what its reference gives (the same records, offsets, sizes, tags
codes, property bytes and tags, the same refusal and its text, the same fallback), and it
takes the inputs the produce path gives it (a kernel that always declined would pass the
equality vacuously).
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from brokergroup_broker import kernels
from brokergroup_broker.kernels import NATIVE_ENV, KernelError, KernelKind, choose
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.sends import _MIN_BATCH_ENTRY, _SCHEDULE_PROPERTIES
from brokergroup_broker.store import message_encode, message_scan
from brokergroup_broker.store.errors import MessageInvalid
from brokergroup_broker.store.message import RecordIndex
from brokergroup_broker.store.message_encode import EncodedProperties, encode_run
from tests.unit.test_batch_send_one_pass import (
    NAMES,
    VALUES,
    batch_bodies,
    entry,
    request_properties,
)

T = TypeVar("T")

native_module = kernels._import_native()
needs_native = pytest.mark.skipif(
    native_module is None, reason="brokergroup_native is not built (make venv builds it)"
)


def test_auto_takes_the_kernels_where_built_else_the_references() -> None:
    assert choose(None, native_available=True) is KernelKind.NATIVE
    assert choose(" Auto ", native_available=False) is KernelKind.PYTHON
    assert choose("python", native_available=True) is KernelKind.PYTHON


def test_asking_for_missing_or_unknown_kernels_is_a_start_up_error() -> None:
    with pytest.raises(KernelError, match=f"{NATIVE_ENV}=native but"):
        choose("native", native_available=False)
    with pytest.raises(KernelError, match="is not one of auto, python, native"):
        choose("rust", native_available=True)


def test_a_refused_choice_waits_for_the_start_to_report_it() -> None:
    """Importing the broker's modules never fails on the setting; the broker's command
    calls `check` and exits 2 with the message."""
    module, error = kernels.load_at_start({NATIVE_ENV: "rust"})
    assert module is None and isinstance(error, KernelError)
    assert kernels.load_at_start({NATIVE_ENV: "python"}) == (None, None)


def test_load_follows_the_environment() -> None:
    assert kernels.load({NATIVE_ENV: "python"}) is None
    if native_module is not None:
        assert kernels.load({}) is native_module


def test_the_kernels_are_built_where_a_rust_toolchain_is() -> None:
    """`make venv` builds the package wherever cargo runs: CI must measure and test the
    kernels, not skip them."""
    rustup_bin = Path.home() / ".cargo" / "bin"
    if shutil.which("cargo", path=f"{os.environ.get('PATH', '')}{os.pathsep}{rustup_bin}") is None:
        pytest.skip("no cargo here: the references run")
    assert native_module is not None, "cargo is here but brokergroup_native is not installed"


def both(call: Callable[[], T], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """`call`'s outcome with the kernels, then with the references (a refusal as its
    type and text)."""
    outcomes = []
    for module in (native_module, None):
        with monkeypatch.context() as m:
            m.setattr(kernels, "NATIVE", module)
            try:
                outcomes.append(("ok", call()))
            except (MessageInvalid, ValueError, OverflowError, struct.error) as exc:
                outcomes.append((type(exc).__name__, str(exc)))
    return outcomes[0], outcomes[1]


def _one_pass_view(sent: wire.BatchSend | None) -> Any:
    if sent is None:
        return None
    props = [(type(p).__name__, p.data, p.tags) for p in sent.properties]  # type: ignore[attr-defined]
    return (sent.flag, sent.one_flag, sent.bodies, props, sent.may_name_reference)


@needs_native
@settings(max_examples=1000, deadline=None)
@given(batch_bodies(), request_properties(), st.one_of(st.none(), st.integers(1, 6)))
def test_the_batch_kernel_equals_the_python_one_pass(
    body: bytes, request: dict[str, str], max_messages: int | None
) -> None:
    limit = max(1, len(body) // _MIN_BATCH_ENTRY) if max_messages is None else max_messages

    def call() -> Any:
        return _one_pass_view(wire._batch_send_one_pass(body, request, limit, _SCHEDULE_PROPERTIES))

    with_kernel, reference = both(call, pytest.MonkeyPatch())
    assert with_kernel == reference


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.binary(max_size=30), st.lists(st.tuples(NAMES, VALUES), max_size=5)),
             min_size=1, max_size=8),
    st.dictionaries(st.sampled_from(["UNIQ_KEY", "WAIT", "TAGS", "KEYS"]), st.sampled_from(
        ["", "true", "TagA", "✓ü"]), max_size=3),
)  # fmt: skip
def test_the_batch_kernel_takes_ordinary_batches(
    messages: list[tuple[bytes, list[tuple[str, str]]]], request: dict[str, str]
) -> None:
    """Batches in the canonical layout (distinct, non-empty, separator-free names, no delay)
    are decoded by the kernel itself, not declined to the reference."""
    canonical = [
        (b, dict(p))
        for b, p in messages
        if all(k and "\x01" not in k + v and "\x02" not in k + v for k, v in p)
    ]
    canonical = [
        (b, p)
        for b, p in canonical
        if not set(p) & _SCHEDULE_PROPERTIES
        and not any("\ud800" <= c <= "\udfff" for kv in p.items() for c in "".join(kv))
    ]
    if not canonical:
        return
    body = b"".join(
        entry(0, b, "".join(f"{k}\x01{v}\x02" for k, v in p.items()).encode()) for b, p in canonical
    )
    assert native_module is not None
    got = native_module.batch_send_one_pass(
        body,
        [(k.encode(), f"{k}\x01{v}\x02".encode()) for k, v in request.items()],
        64,
        _SCHEDULE_PROPERTIES,
        EncodedProperties,
    )
    assert got is not None
    flag, bodies, props = got
    assert (flag, bodies) == (0, [b for b, _ in canonical])
    assert [dict(p) for p in props] == [{**request, **p} for _, p in canonical]
    assert [p.tags for p in props] == [{**request, **p}.get("TAGS") or None for _, p in canonical]


PROPERTY_NAMES = st.sampled_from(["KEYS", "UNIQ_KEY", "WAIT", "TAGS", "a", "é✓"])


@st.composite
def run_properties(draw: st.DrawFn) -> list[Any] | None:
    """What the produce path hands `encode_run`: None, or per message None, EncodedProperties
    (tags of any Unicode, astral included, empty or missing) or, rarely, a dict."""
    count = draw(st.integers(1, 7))
    kind = draw(st.sampled_from(["none", "encoded", "encoded", "encoded", "mixed"]))
    if kind == "none":
        return None
    out: list[Any] = []
    for _ in range(count):
        choice = draw(st.sampled_from(["encoded"] * 6 + ["none", "dict", "empty", "huge"]))
        if choice == "none" or (choice == "dict" and kind != "mixed"):
            out.append(None)
        elif choice == "dict":
            out.append({"KEYS": "k", "TAGS": draw(st.text(max_size=4))})
        elif choice == "empty":
            out.append(EncodedProperties(b"", draw(st.one_of(st.none(), st.just("t")))))
        elif choice == "huge":
            out.append(EncodedProperties(b"KEYS\x01" + b"k" * 32770 + b"\x02", None))
        else:
            pairs = draw(st.dictionaries(PROPERTY_NAMES, st.text(
                alphabet=st.characters(exclude_characters="\x01\x02"), max_size=6), max_size=4))  # fmt: skip
            data = "".join(f"{k}\x01{v}\x02" for k, v in pairs.items()).encode(
                "utf-8", "surrogatepass"
            )
            tags = pairs.get("TAGS") if draw(st.booleans()) else draw(st.text(max_size=3))
            out.append(EncodedProperties(data, tags or None))
    return out


@st.composite
def runs(draw: st.DrawFn) -> dict[str, Any]:
    """A run laid out near segment ends (blank records), sometimes over its size limit."""
    props = draw(run_properties())
    count = len(props) if props is not None else draw(st.integers(1, 7))
    segment = draw(st.sampled_from([1 << 30, 600, 900, 2048]))
    return {
        "topic": draw(st.sampled_from(["T", "BenchTopic", "%RETRY%g"])),
        "queue_id": draw(st.sampled_from([0, 3, 2**31 - 1, 2**31])),
        "bodies": [draw(st.binary(max_size=300)) for _ in range(count)],
        "properties": props,
        "flag": draw(st.sampled_from([0, -1, 7, 2**31])),
        "born_timestamp_ms": draw(st.sampled_from([1_700_000_000_000, 0, -5, 2**63 - 1])),
        "born_host": draw(st.sampled_from([("10.0.0.7", 40001), ("::1", 9)])),
        "start_offset": segment * draw(st.integers(0, 3)) + draw(st.integers(0, segment - 8)),
        "segment_bytes": segment,
        "store_host": draw(st.sampled_from([("127.0.0.1", 10911), ("fe80::2", 1)])),
        "store_timestamp_ms": 1_700_000_000_123,
        "first_queue_offset": draw(st.sampled_from([0, 17, 2**63 - 3])),
        "max_message_bytes": draw(st.sampled_from([4 << 20, 200, 400, 1 << 31])),
        "sys_flag": draw(st.sampled_from([0, 4, 8])),
    }


@needs_native
@settings(max_examples=1000, deadline=None)
@given(runs())
@example(  # the record past its segment's end: a blank first, then the record
    {"topic": "T", "queue_id": 0, "bodies": [b"x" * 100, b"y" * 300], "properties": None,
     "flag": 0, "born_timestamp_ms": 1, "born_host": ("10.0.0.7", 1), "start_offset": 100,
     "segment_bytes": 600, "store_host": ("127.0.0.1", 2), "store_timestamp_ms": 3,
     "first_queue_offset": 0, "max_message_bytes": 4096, "sys_flag": 0}
)  # fmt: skip
def test_the_record_kernel_equals_the_python_loop(run: dict[str, Any]) -> None:
    def call() -> Any:
        out = encode_run(**run)
        return (out.data, out.start_offset, out.physical_offsets, out.sizes, out.tags_codes)

    with_kernel, reference = both(call, pytest.MonkeyPatch())
    assert with_kernel == reference


@needs_native
def test_the_record_kernel_takes_the_produce_paths_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's EncodedProperties and a plain run are laid out by the kernel (the Python loop
    is made to fail, so a kernel that declined would show)."""

    def no_python_loop(*_: object) -> None:
        raise AssertionError("the Python record loop ran")

    monkeypatch.setattr(message_encode, "_trailer", no_python_loop)
    monkeypatch.setattr(message_encode, "zlib", SimpleNamespace(crc32=no_python_loop))
    common: dict[str, Any] = {
        "flag": 0, "born_timestamp_ms": 1, "born_host": ("10.0.0.7", 1), "start_offset": 0,
        "segment_bytes": 1 << 30, "store_host": ("127.0.0.1", 2), "store_timestamp_ms": 3,
        "first_queue_offset": 5, "max_message_bytes": 4096,
    }  # fmt: skip
    props = [EncodedProperties(b"TAGS\x01a\x02", "a"), None]
    run = encode_run("T", 0, [b"x", b"yz"], props, **common)
    assert run.tags_codes == [ord("a"), 0] and run.physical_offsets == [0, run.sizes[0]]
    plain = encode_run("T", 0, [b"x"], None, **common)
    assert plain.tags_codes is None and plain.data[-3:] == b"\x01T\x00\x00"[-3:]


@st.composite
def logs(draw: st.DrawFn) -> dict[str, Any]:
    """A stretch of commit log as the store or a replica holds it: runs of records (topics,
    TAGS or none, IPv6 hosts), blank records at segment ends, then damage: a byte changed
    anywhere (a bad magic, length, offset, CRC, a topic or properties no longer UTF-8), a
    torn tail, zeros, and a read starting at a given record."""
    segment = draw(st.sampled_from([1 << 30, 700, 1500]))
    base = segment * draw(st.integers(0, 2))
    parts: list[bytes] = []
    pos = base
    for _ in range(draw(st.integers(1, 4))):
        count = draw(st.integers(1, 4))
        tags = draw(st.sampled_from([None, "TagA", "✓ü", "", "a\U0001f600"]))
        props = [
            EncodedProperties(
                f"KEYS\x01k{i}\x02".encode() + (f"TAGS\x01{tags}\x02".encode() if tags else b""),
                tags or None,
            )
            for i in range(count)
        ]
        run = encode_run(
            draw(st.sampled_from(["T", "%RETRY%g", "Topic_1"])),
            draw(st.integers(0, 3)),
            [draw(st.binary(max_size=120)) for _ in range(count)],
            props if draw(st.booleans()) else None,
            flag=0,
            born_timestamp_ms=1,
            born_host=draw(st.sampled_from([("10.0.0.7", 1), ("fe80::1", 2)])),
            start_offset=pos,
            segment_bytes=segment,
            store_host=draw(st.sampled_from([("127.0.0.1", 3), ("::1", 4)])),
            store_timestamp_ms=5,
            first_queue_offset=draw(st.integers(0, 1000)),
            max_message_bytes=4096,
        )
        parts.append(run.data)
        pos = run.end_offset
    data = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 2))):
        if data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.sampled_from([0x00, 0xFF, 0x80, 0x01, 0x02, data[at] ^ 1]))
    damage = draw(st.sampled_from([None, None, "cut", "zeros", "junk"]))
    if damage == "cut" and data:
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif damage == "zeros":
        data += bytes(draw(st.integers(1, 40)))
    elif damage == "junk":
        data += draw(st.binary(min_size=1, max_size=40))
    return {
        "buf": bytes(data),
        "base_offset": base,
        "segment_bytes": segment,
        "verify_crc": draw(st.booleans()),
        "max_record_bytes": draw(st.sampled_from([None, 4096, 150])),
    }


@needs_native
@settings(max_examples=1000, deadline=None)
@given(logs())
def test_the_scan_kernel_equals_the_python_walk(log: dict[str, Any]) -> None:
    def call() -> Any:
        got = message_scan.scan_records(**log)
        return (got.end, [tuple(r) for r in got.records], got.stop, got.detail)

    with_kernel, reference = both(call, pytest.MonkeyPatch())
    assert with_kernel == reference
    if with_kernel[0] == "ok":
        assert all(type(r) is RecordIndex for r in message_scan.scan_records(**log).records)


@needs_native
def test_the_scan_kernel_walks_a_replicated_transfer_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Valid records are taken by the kernel, not by the Python walk (made to fail here)."""
    props = [EncodedProperties(b"TAGS\x01a\x02", "a"), None]
    run = encode_run(
        "T", 1, [b"x", b"yz"], props, flag=0, born_timestamp_ms=1, born_host=("10.0.0.7", 1),
        start_offset=0, segment_bytes=1 << 30, store_host=("127.0.0.1", 2),
        store_timestamp_ms=3, first_queue_offset=5, max_message_bytes=4096,
    )  # fmt: skip
    monkeypatch.setattr(message_scan, "lengths_add_up", None)  # calling it would raise
    got = message_scan.scan_records(run.data, 0, 1 << 30)
    assert got.stop is message_scan.ScanStop.END and got.end == len(run.data)
    assert got.records == [
        RecordIndex("T", 1, 5, 0, run.sizes[0], ord("a")),
        RecordIndex("T", 1, 6, run.sizes[0], run.sizes[1], 0),
    ]
