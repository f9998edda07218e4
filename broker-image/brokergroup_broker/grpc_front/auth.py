"""The RocketMQ 5 SDKs' request signature in gRPC metadata (pure), checked against the same
per-group key pairs as the remoting port (core/remoting_keys.py).

Every SDK (apache/rocketmq-clients: Java's Signature, Python's util/signature.py) sends

    authorization: MQv2-HMAC-SHA1 Credential=<AccessKey>, SignedHeaders=x-mq-date-time,
                   Signature=<hex HMAC-SHA1(SecretKey, value of x-mq-date-time)>
    x-mq-date-time: 20260101T120000Z

and RocketMQ's proxy reads it as DefaultAuthenticationContextBuilder does: the scheme, then
comma-separated key=value items, the AccessKey the Credential's part before any '/'. The
signature covers the date-time only (as in RocketMQ; the proxy checks no clock skew and
neither does this), so what it proves is the holder of the SecretKey, not the request.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
CLIENT_ID = "x-mq-client-id"
ALGORITHM = "MQv2-HMAC-SHA1"


@dataclass(frozen=True)
class SignedRequest:
    access_key: str
    signature: bytes
    content: bytes


def parse(metadata: Mapping[str, str]) -> SignedRequest | str:
    """The signature a request carries, or why it carries none (naming no secret)."""
    authorization = metadata.get(AUTHORIZATION, "")
    if not authorization:
        return "the request is not signed (no authorization header: give the SDK credentials)"
    date_time = metadata.get(DATE_TIME, "")
    if not date_time:
        return "datetime is null (no x-mq-date-time header)"
    scheme, _, items = authorization.partition(" ")
    if not items:
        return "authentication header is incorrect"
    if scheme != ALGORITHM:
        return f"authentication algorithm {scheme[:40]!r} is not {ALGORITHM}"
    access_key, signature_hex = "", ""
    for item in items.split(","):
        key, eq, value = item.strip().partition("=")
        if not eq:
            return "authentication keyValues are incorrect"
        if key == "Credential":
            access_key = value.split("/")[0]
        elif key == "Signature":
            signature_hex = value
    if not access_key:
        return "authentication credential is missing"
    try:
        signature = bytes.fromhex(signature_hex)
    except ValueError:
        return "the signature is not hexadecimal"
    if not signature:
        return "the signature is missing"
    return SignedRequest(access_key, signature, date_time.encode())


def sign(secret_key: str, date_time: str) -> str:
    """The SDKs' signature: hex HMAC-SHA1 of the date-time under the SecretKey."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def refusal(
    metadata: Mapping[str, str],
    secret_for: Callable[[str], str | None],
    unknown_key_reason: Callable[[str], str | None] = lambda _key: None,
) -> str | None:
    """Why a request with `metadata` is not authenticated (None: it is). `secret_for` gives
    the SecretKey of an AccessKey this broker holds (None: not one of its pairs)."""
    signed = parse(metadata)
    if isinstance(signed, str):
        return signed
    secret = secret_for(signed.access_key)
    if secret is None:
        why = unknown_key_reason(signed.access_key)
        return f"AccessKey {signed.access_key[:64]!r} is not served here" + (
            f": {why}" if why else ""
        )
    expected = hmac.new(secret.encode(), signed.content, hashlib.sha1).digest()
    if not hmac.compare_digest(expected, signed.signature):
        return "check signature failed"
    return None
