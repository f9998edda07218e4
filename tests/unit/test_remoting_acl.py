"""RocketMQ's AccessKey/SecretKey signature (AclClientRPCHook) against a stock client's frames.

The four signed golden frames (route and send, JSON and ROCKETMQ) were signed by the 5.3.1
AclClientRPCHook with the manifest's AccessKey/SecretKey. The verifier must accept each as
recorded and refuse it when any one byte of an extField value or of the body changes, when
the key is unknown, or when AccessKey/Signature is missing; `sign` must produce the very
signature the Java hook wrote. The content rules (Java's TreeMap order, the ≤ 4.9.3
`_UNIQUE_KEY_QUERY` exception) are checked on hand-built commands.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_remoting import (
    RemotingCommand,
    SignatureFault,
    decode,
    request,
    sign,
    signature,
    signed_content,
    verify,
)
from tests.rocketmq_golden import frame_bytes, manifest

ACCESS_KEY = manifest()["accessKey"]
SECRET_KEY = manifest()["secretKey"]
SIGNED = [f"{t}-signed-{k}.bin" for t in ("json", "rocketmq") for k in ("route", "send")]


def _secret(access_key: str) -> str | None:
    return SECRET_KEY if access_key == ACCESS_KEY else None


@pytest.mark.parametrize("name", SIGNED)
def test_stock_client_signature_verifies(name: str) -> None:
    check = verify(decode(frame_bytes(name)), _secret)
    assert (check.ok, check.access_key, check.fault) == (True, ACCESS_KEY, None)


@pytest.mark.parametrize("name", SIGNED)
def test_sign_reproduces_the_java_signature(name: str) -> None:
    cmd = decode(frame_bytes(name))
    fields = cmd.fields()
    unsigned = dataclasses.replace(
        cmd,
        ext_fields=tuple((k, v) for k, v in fields.items() if k not in ("AccessKey", "Signature")),
    )
    assert sign(unsigned, ACCESS_KEY, SECRET_KEY).fields()["Signature"] == fields["Signature"]


def _with_value(cmd: RemotingCommand, key: str, value: str) -> RemotingCommand:
    return dataclasses.replace(
        cmd, ext_fields=tuple((k, value if k == key else v) for k, v in cmd.ext_fields or ())
    )


@pytest.mark.parametrize("name", SIGNED)
def test_one_changed_byte_of_any_signed_field_is_refused(name: str) -> None:
    cmd = decode(frame_bytes(name))
    for key, value in cmd.fields().items():
        if key in ("Signature", "AccessKey"):
            continue
        changed = value[:-1] + chr(ord(value[-1]) ^ 1)
        assert verify(_with_value(cmd, key, changed), _secret).fault is SignatureFault.MISMATCH, key
    # A changed AccessKey names another key: unknown here, and with a known one the
    # signature (over the old AccessKey) no longer matches.
    other = _with_value(cmd, "AccessKey", ACCESS_KEY + "x")
    assert verify(other, _secret).fault is SignatureFault.UNKNOWN_ACCESS_KEY
    assert verify(other, lambda _: SECRET_KEY).fault is SignatureFault.MISMATCH


def test_one_changed_body_byte_is_refused() -> None:
    cmd = decode(frame_bytes("rocketmq-signed-send.bin"))
    for i in range(len(cmd.body)):
        body = bytearray(cmd.body)
        body[i] ^= 0x01
        assert (
            verify(dataclasses.replace(cmd, body=bytes(body)), _secret).fault
            is SignatureFault.MISMATCH
        )
    assert (
        verify(dataclasses.replace(cmd, body=cmd.body + b"\x00"), _secret).fault
        is SignatureFault.MISMATCH
    )


def test_missing_pieces_are_refused_by_name() -> None:
    cmd = decode(frame_bytes("json-signed-route.bin"))
    fields = cmd.fields()
    without_signature = dataclasses.replace(
        cmd, ext_fields=tuple((k, v) for k, v in fields.items() if k != "Signature")
    )
    assert verify(without_signature, _secret).fault is SignatureFault.NO_SIGNATURE
    assert (
        verify(decode(frame_bytes("json-route.bin")), _secret).fault is SignatureFault.NO_ACCESS_KEY
    )
    assert verify(cmd, lambda _: None).fault is SignatureFault.UNKNOWN_ACCESS_KEY
    assert verify(cmd, lambda _: SECRET_KEY + "x").fault is SignatureFault.MISMATCH


def test_content_is_values_in_java_string_order_then_body() -> None:
    # Java's TreeMap orders by UTF-16 code units: "\uff5e" (one unit 0xFF5E) sorts after
    # "\U0001f600" (surrogates 0xD83D 0xDE00), the reverse of code-point order.
    fields = {
        "b": "2",
        "a": "1",
        "Signature": "ignored",
        "\uff5e": "W",
        "\U0001f600": "S",
        "B": "0",
    }
    assert signed_content(fields, b"<body>") == b"012SW" + b"<body>"


def test_unique_key_query_is_unsigned_only_for_old_clients() -> None:
    fields = {"AccessKey": "ak", "_UNIQUE_KEY_QUERY": "true", "topic": "T"}
    assert signed_content(fields, b"") == b"aktrueT"
    assert signed_content(fields, b"", version=413) == b"akT"  # V4_9_3
    assert signed_content(fields, b"", version=414) == b"aktrueT"


def test_signature_is_base64_hmac_sha1() -> None:
    # RFC 2202 test case 2 for HMAC-SHA1, Base64 of effcdf6ae5eb2fa2d27416d5f184df9c259a7c79.
    assert signature(b"what do ya want for nothing?", "Jefe") == "7/zfauXrL6LSdBbV8YTfnCWafHk="


@given(
    secret=st.text(st.characters(blacklist_categories=("Cs",)), max_size=100),
    parts=st.lists(st.binary(max_size=3000), max_size=4),
)
def test_the_precomputed_key_blocks_give_the_standard_hmac(secret: str, parts: list[bytes]) -> None:
    # SecretKeys longer than SHA-1's 64-byte block are hashed first (RFC 2104); bodies over
    # 2 KiB take hashlib's GIL-releasing path; the parts may split the content anywhere.
    from brokergroup_remoting.acl import _hmac_sha1

    content = b"".join(parts)
    expected = hmac.digest(secret.encode("utf-8"), content, "sha1")
    assert _hmac_sha1(secret, *parts) == expected
    assert signature(content, secret) == base64.b64encode(expected).decode("ascii")


def test_signed_request_round_trip() -> None:
    cmd = sign(request(105, 1, {"topic": "T"}), "ak", "sk", security_token="tok")
    assert list(cmd.fields()) == ["topic", "AccessKey", "SecurityToken", "Signature"]
    assert verify(cmd, {"ak": "sk"}.get).ok


@given(
    st.dictionaries(
        st.one_of(st.text(max_size=6), st.sampled_from(["_UNIQUE_KEY_QUERY", "Signature", "a"])),
        st.text(max_size=4),
        max_size=8,
    ),
    st.randoms(use_true_random=False),
    st.sampled_from([None, 413, 414]),
)
def test_signed_content_is_the_reference_order_whatever_the_key_order(
    fields: dict[str, str], rnd: random.Random, version: int | None
) -> None:
    # The signed key order is cached per key tuple: the same keys in any insertion order,
    # and the same tuple for an old and a new client, still give the reference content.
    old = version is not None and version <= 413
    keys = sorted(fields, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
    reference = "".join(
        fields[k] for k in keys if k != "Signature" and not (old and k == "_UNIQUE_KEY_QUERY")
    ).encode("utf-8")
    shuffled = list(fields.items())
    rnd.shuffle(shuffled)
    for order in (fields, dict(shuffled)):
        assert signed_content(order, b"|", version=version) == reference + b"|"
        assert signed_content(order, b"|", version=version) == reference + b"|"


def test_the_key_order_cache_stays_small_whatever_a_peer_sends() -> None:
    # The cache runs before the signature is checked: ever new key tuples only evict, and a
    # tuple with many or long keys is sorted each time, never kept.
    from brokergroup_remoting import acl

    acl._signed_keys_cached.cache_clear()
    for n in range(2_000):
        fields = {f"k{n}": "v", "a": "1"}
        assert signed_content(fields, b"") == b"1v"
    assert acl._signed_keys_cached.cache_info().currsize == 256
    acl._signed_keys_cached.cache_clear()
    many = {f"k{i:03d}": str(i % 10) for i in range(40)}
    long = {"x" * 2_000: "L", "a": "1"}
    assert signed_content(many, b"") == "".join(str(i % 10) for i in range(40)).encode()
    assert signed_content(long, b"") == b"1L"
    assert acl._signed_keys_cached.cache_info().currsize == 0
