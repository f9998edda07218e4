"""Header fields are read by Java's rules, one reader for every front end (issue 32 item 1).

`java_integer` is checked against a model of Integer.parseInt / Long.parseLong written from
the JDK's source (sign, then Character.digit(c, 10) per UTF-16 unit, then the range) on
generated strings, and against the JDK itself where `java` is installed. Then the three
RocketMQ front ends (broker, name server, controller) read `+5`, `--1`, Arabic-Indic and
superscript digits alike: before this reader the broker refused `+5` and took `١٢` as 12
while the name server took `+5` and refused `١٢`, and the broker's `--1` reached the
transport's catch-all as a ValueError with a stack trace.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import unicodedata
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_broker.core.broker_settings import store_config_of
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.remoting_front import wire as broker_wire
from brokergroup_broker.store import MessageStore
from brokergroup_controller.namesrv import bodies as namesrv_bodies
from brokergroup_controller.rocketmq_front import wire as controller_wire
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode, request, response_to
from brokergroup_remoting import fields as header
from brokergroup_remoting.fields import BadField, java_boolean, java_integer, quoted
from brokergroup_remoting.net import (
    Connection,
    Credentials,
    RemotingClient,
    RemotingServer,
    ServerAuth,
)
from tests.unit.test_broker_remoting_front import open_port

# ------------------------------------------------------------------ a model of the JDK


def jdk_parse(s: str, bits: int) -> int | None:
    """Integer.parseInt(s, 10) / Long.parseLong(s, 10) as the JDK 17 source reads: None
    for NumberFormatException."""
    if len(s) == 0:
        return None
    i, negative = 0, False
    first = s[0]
    if first < "0":  # possible leading "+" or "-"
        if first == "-":
            negative = True
        elif first != "+":
            return None
        if len(s) == 1:
            return None
        i = 1
    limit = 1 << (bits - 1)
    result = 0
    for unit in s[i:]:
        digit = java_character_digit(unit)
        if digit < 0:
            return None
        result = result * 10 + digit
    result = -result if negative else result
    return result if -limit <= result < limit else None


def java_character_digit(ch: str) -> int:
    """Character.digit(char, 10): a BMP character of category Nd has its decimal value; a
    supplementary character is two UTF-16 units, neither a digit."""
    if ord(ch) > 0xFFFF or unicodedata.category(ch) != "Nd":
        return -1
    return unicodedata.decimal(ch)


NUMBERISH = st.text(
    alphabet=st.sampled_from(
        # "_" and " ": int() takes them ("1_000", " 5"), Java does not (the ASCII fast path).
        [*"0123456789+-", " ", "\t", "_", "x", "e", ".", "١", "٢", "０", "７", "²", "𝟎", "Ⅻ"]
    ),
    max_size=24,
)
BOUNDARIES = [
    str(v)
    for base in (1 << 31, 1 << 63)
    for v in (base - 1, base, base + 1, -base, -base - 1, -base + 1)
]


@given(
    st.one_of(
        NUMBERISH,
        st.sampled_from(BOUNDARIES),
        st.integers().map(str),
        st.integers(-(1 << 64), 1 << 64).map(lambda v: f"{'-' if v < 0 else ''}{'0' * 12}{abs(v)}"),
    )
)
def test_java_integer_is_the_jdks_parse(raw: str) -> None:
    assert java_integer(raw, bits=32) == jdk_parse(raw, 32)
    assert java_integer(raw, bits=64) == jdk_parse(raw, 64)


@given(st.text(max_size=8))
def test_java_boolean_is_parse_boolean(raw: str) -> None:
    assert java_boolean(raw) == (raw.casefold() == "true" and len(raw) == 4)
    assert java_boolean(None) is False


def test_the_cases_the_front_ends_disagreed_on() -> None:
    assert java_integer("+5") == 5
    assert java_integer("--1") is None
    assert java_integer("١٢") == 12  # Arabic-Indic digits: Character.digit reads them
    assert java_integer("０７") == 7  # fullwidth
    assert java_integer("²") is None  # No, not Nd: str.isdigit says yes, Java says no
    assert java_integer("𝟎") is None  # Nd, but outside the BMP: a surrogate pair in Java
    assert java_integer(" 5") is None and java_integer("5 ") is None
    assert java_integer("0" * 400 + "5") == 5  # leading zeros are fine in Java


JAVA_PROBE = """
import java.io.*; import java.nio.charset.StandardCharsets;
public class Probe { public static void main(String[] a) throws Exception {
  BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
  for (String line; (line = in.readLine()) != null; ) {
    byte[] b = new byte[line.length() / 2];
    for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);
    String s = new String(b, StandardCharsets.UTF_8);
    String i32, i64;
    try { i32 = Integer.toString(Integer.parseInt(s)); } catch (NumberFormatException e) { i32 = "X"; }
    try { i64 = Long.toString(Long.parseLong(s)); } catch (NumberFormatException e) { i64 = "X"; }
    System.out.println(i32 + " " + i64 + " " + Boolean.parseBoolean(s));
  }
}}
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="no JDK here (java not on PATH)")
def test_java_integer_agrees_with_the_jdk(tmp_path: Path) -> None:
    samples = [
        *BOUNDARIES,
        *("+5", "--1", "-", "+", "", "١٢", "٠", "０７", "²", "𝟎", " 5", "5 ", "0x1", "1e3"),
        *("TRUE", "True", "true ", "tru", "ｔｒｕｅ", "0" * 40 + "12", "-0", "+-1", "٣٤٥٦"),
        *("߀߁", "६४", "௧௨", "๑๒", "᠑", "Ⅻ", "①", "١2", "9223372036854775807٠"),
    ]
    source = tmp_path / "Probe.java"
    source.write_text(JAVA_PROBE)
    lines = "".join(s.encode("utf-8").hex() + "\n" for s in samples)
    run = subprocess.run(
        ["java", str(source)], input=lines, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    answers = run.stdout.splitlines()
    assert len(answers) == len(samples)
    for raw, answer in zip(samples, answers, strict=True):
        i32, i64, boolean = answer.split(" ")
        assert java_integer(raw, bits=32) == (None if i32 == "X" else int(i32)), raw
        assert java_integer(raw, bits=64) == (None if i64 == "X" else int(i64)), raw
        assert java_boolean(raw) == (boolean == "true"), raw


# ------------------------------------------------------------------ the three front ends


def read_broker(value: str) -> int:
    return broker_wire.queue_ref({"topic": "t", "queueId": value}).queue_id


def read_namesrv(value: str) -> int:
    fields = {
        "brokerName": "b",
        "brokerAddr": "127.0.0.1:10911",
        "clusterName": "c",
        "haServerAddr": "",
        "brokerId": value,
    }
    return namesrv_bodies.register_header(fields).broker_id


def read_controller(value: str) -> int:
    return controller_wire.register_request(
        {"clusterName": "c", "brokerName": "b", "brokerId": value, "brokerAddress": "a:1"}
    ).broker_id


Reader = Callable[[str], int]
READERS: list[Reader] = [read_broker, read_namesrv, read_controller]


@pytest.mark.parametrize("read", READERS, ids=["broker", "namesrv", "controller"])
@pytest.mark.parametrize(("value", "expected"), [("+5", 5), ("١٢", 12), ("０７", 7), ("3", 3)])
def test_every_front_end_reads_a_number_as_java_does(
    read: Reader, value: str, expected: int
) -> None:
    assert read(value) == expected


@pytest.mark.parametrize("read", READERS, ids=["broker", "namesrv", "controller"])
@pytest.mark.parametrize("value", ["--1", "²", "5 ", "", "0x1", "99999999999999999999"])
def test_every_front_end_refuses_a_non_number_naming_the_field(read: Reader, value: str) -> None:
    with pytest.raises(BadField) as refused:
        read(value)
    assert "queueId" in refused.value.remark or "brokerId" in refused.value.remark


# ------------------------------------------------------------------ one dispatch

KEYS = {"ak": "sk"}
ECHO_NUMBER = 9001


async def echo_number(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
    value = header.int32(cmd.fields(), "queueId", low=-1)
    return response_to(cmd, ResponseCode.SUCCESS, str(value))


@pytest.fixture
async def number_port() -> AsyncIterator[str]:
    server = RemotingServer({ECHO_NUMBER: echo_number}, auth=ServerAuth(KEYS.get), name="t")
    await server.start("127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        await server.close()


async def test_a_bad_field_is_answered_by_the_transport_without_a_traceback(
    number_port: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = await RemotingClient.connect(number_port, credentials=Credentials("ak", "sk"))
    try:
        ok = await client.invoke(request(ECHO_NUMBER, 0, {"queueId": "+5"}))
        bad = await client.invoke(request(ECHO_NUMBER, 0, {"queueId": "--1"}))
        newline = await client.invoke(request(ECHO_NUMBER, 0, {"queueId": "1\nFORGED line"}))
    finally:
        await client.close()
    assert (ok.code, ok.remark) == (ResponseCode.SUCCESS, "5")
    assert bad.code == ResponseCode.SYSTEM_ERROR
    assert bad.remark == "the header field queueId is not a number (an int): '--1'"
    assert (
        newline.remark == "the header field queueId is not a number (an int): '1\\\\x0aFORGED line'"
    )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.exc_info]
    assert all("\n" not in r.getMessage() for r in caplog.records)


async def test_the_broker_port_answers_minus_minus_one_as_a_bad_field(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO)
    opened = MessageStore.open(tmp_path / "store", store_config_of(BrokerConfig()))
    port = await open_port(opened, tmp_path, auto_create=True)
    try:
        answer = await port.ask(
            request(RequestCode.GET_MAX_OFFSET, 0, {"topic": "orders", "queueId": "--1"})
        )
    finally:
        await port.client.close()
        await port.server.close()
        opened.close()
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark is not None
    assert answer.remark.startswith("the header field queueId is not a number"), answer.remark
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_quoted_keeps_a_log_line_one_line() -> None:
    assert quoted("a\nb\x1bc") == "'a\\\\x0ab\\\\x1bc'"
    assert quoted("x" * 100, 4) == "'xxxx'…"
