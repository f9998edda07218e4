"""RocketMQ's AccessKey/SecretKey request signature (AclClientRPCHook), pure.

What a stock client does before sending a request (acl/common/AclClientRPCHook.java 5.3.1):
add extFields ``AccessKey`` (and ``SecurityToken`` when it has one), put every extField into a
TreeMap (sorted by key, Java String order = UTF-16 code units), concatenate the values of all
keys but ``Signature`` into one string, append the body's bytes to its UTF-8 bytes
(AclUtils.combineRequestContent), HMAC-SHA1 that with the SecretKey's UTF-8 bytes, Base64 it
(AclSigner), and add it as extField ``Signature``. A 5.x broker recomputes the same over the
extFields it decoded, leaving out ``_UNIQUE_KEY_QUERY`` from requests of version ≤ V4_9_3
(DefaultAuthenticationContextBuilder).

`verify` works from the header's extFields and the raw body only, so a server refuses an
unsigned or wrongly signed request before it decodes the body or looks up anything the
request names. The comparison is constant-time. The signature covers `cmd.fields()` (one
value per key, the last written, as Java's HashMap keeps): a server must read the request
through that same view, or a repeated key could carry an unsigned value.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from brokergroup_remoting.command import RemotingCommand

if TYPE_CHECKING:
    from hashlib import _Hash

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: MixAll.UNIQUE_MSG_QUERY_FLAG: unsigned by clients up to 4.9.3.
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
#: MQVersion.Version.V4_9_3.ordinal(): a header `version` at or below it is a ≤ 4.9.3 client.
VERSION_V4_9_3 = 413


def _java_order(key: str) -> bytes:
    # Java's String.compareTo compares UTF-16 code units; big-endian UTF-16 bytes sort the same.
    return key.encode("utf-16-be", "surrogatepass")


#: Key tuples whose signed order is cached: a stock request has ~20 short keys. A longer
#: tuple is sorted each time, so what a peer can make the cache hold stays small
#: (256 tuples of at most 1,024 key characters: it runs before the signature is checked).
_CACHED_KEYS = 32
_CACHED_KEY_CHARS = 1024


def _signed_keys(keys: tuple[str, ...], old_client: bool) -> tuple[str, ...]:
    """The keys whose values are signed, in Java order. A client sends one request type's
    keys in the same order every time, so the order is sorted once per key tuple."""
    if len(keys) <= _CACHED_KEYS and sum(map(len, keys)) <= _CACHED_KEY_CHARS:
        return _signed_keys_cached(keys, old_client)
    return _sorted_signed_keys(keys, old_client)


def _sorted_signed_keys(keys: tuple[str, ...], old_client: bool) -> tuple[str, ...]:
    return tuple(
        key
        for key in sorted(keys, key=_java_order)
        if key != SIGNATURE and not (old_client and key == UNIQUE_MSG_QUERY_FLAG)
    )


_signed_keys_cached = functools.lru_cache(maxsize=256)(_sorted_signed_keys)


def signed_content(fields: Mapping[str, str], body: bytes, *, version: int | None = None) -> bytes:
    """The bytes the signature covers: sorted extField values (not Signature), then the body.

    `version` is the request header's; when given and ≤ V4_9_3, `_UNIQUE_KEY_QUERY` is left
    out as a RocketMQ 5 broker does. Leave it None to sign as the 5.x client does.
    """
    return _signed_values(fields, version) + body


def _signed_values(fields: Mapping[str, str], version: int | None) -> bytes:
    """`signed_content` without the body (hashed on its own: no copy of a large body)."""
    old_client = version is not None and version <= VERSION_V4_9_3
    keys = _signed_keys(tuple(fields), old_client)
    return "".join([fields[key] for key in keys]).encode("utf-8")


_SHA1_BLOCK = 64
_INNER_PAD = bytes(b ^ 0x36 for b in range(256))
_OUTER_PAD = bytes(b ^ 0x5C for b in range(256))


@functools.lru_cache(maxsize=64)
def _hmac_sha1_pads(secret_key: str) -> tuple[_Hash, _Hash]:
    """SHA-1 states after HMAC's inner and outer key blocks (RFC 2104), once per SecretKey:
    a signature is then two `copy()`s and updates. Unlike `hmac.digest`, which releases
    the GIL for every call, hashlib holds it below 2 KiB, so the event loop does not hand
    the GIL to the group-commit thread (and wait to get it back) once per request. The
    keys are what `secret_for` answers (configured or derived secrets, never a peer's
    bytes); a peer naming many derived AccessKeys only evicts, the cache holds 64."""
    key = secret_key.encode("utf-8")
    if len(key) > _SHA1_BLOCK:
        key = hashlib.sha1(key).digest()
    key = key.ljust(_SHA1_BLOCK, b"\0")
    return hashlib.sha1(key.translate(_INNER_PAD)), hashlib.sha1(key.translate(_OUTER_PAD))


def _hmac_sha1(secret_key: str, *parts: bytes) -> bytes:
    """HMAC-SHA1(secret_key, b"".join(parts))."""
    inner_pad, outer_pad = _hmac_sha1_pads(secret_key)
    inner = inner_pad.copy()
    for part in parts:
        inner.update(part)
    outer = outer_pad.copy()
    outer.update(inner.digest())
    return outer.digest()


def signature(content: bytes, secret_key: str) -> str:
    """Base64(HMAC-SHA1(secret_key, content)), AclSigner.calSignature."""
    return base64.b64encode(_hmac_sha1(secret_key, content)).decode("ascii")


def sign(
    cmd: RemotingCommand, access_key: str, secret_key: str, security_token: str | None = None
) -> RemotingCommand:
    """`cmd` with AccessKey (SecurityToken) and Signature added, as AclClientRPCHook does."""
    fields = cmd.fields()
    fields[ACCESS_KEY] = access_key
    if security_token is not None:
        fields[SECURITY_TOKEN] = security_token
    fields.pop(SIGNATURE, None)
    fields[SIGNATURE] = signature(signed_content(fields, cmd.body), secret_key)
    return dataclasses.replace(cmd, ext_fields=tuple(fields.items()))


class SignatureFault(Enum):
    """Why a request's signature was refused."""

    NO_ACCESS_KEY = "the request carries no AccessKey"
    UNKNOWN_ACCESS_KEY = "the AccessKey is not known"
    NO_SIGNATURE = "the request carries no Signature"
    MISMATCH = "the Signature does not match the request"


@dataclass(frozen=True)
class SignatureCheck:
    """The verdict: `fault` is None when the request is signed by `access_key`'s owner."""

    access_key: str | None
    fault: SignatureFault | None

    @property
    def ok(self) -> bool:
        return self.fault is None


def verify(cmd: RemotingCommand, secret_for: Callable[[str], str | None]) -> SignatureCheck:
    """Check `cmd`'s signature; `secret_for(access_key)` gives the SecretKey or None."""
    fields = cmd.fields()
    access_key = fields.get(ACCESS_KEY)
    if access_key is None:
        return SignatureCheck(None, SignatureFault.NO_ACCESS_KEY)
    secret = secret_for(access_key)
    if secret is None:
        return SignatureCheck(access_key, SignatureFault.UNKNOWN_ACCESS_KEY)
    claimed = fields.get(SIGNATURE)
    if claimed is None:
        return SignatureCheck(access_key, SignatureFault.NO_SIGNATURE)
    mac = _hmac_sha1(secret, _signed_values(fields, cmd.version), cmd.body)
    expected = base64.b64encode(mac).decode("ascii")
    if not hmac.compare_digest(expected.encode("ascii"), claimed.encode("utf-8", "surrogatepass")):
        return SignatureCheck(access_key, SignatureFault.MISMATCH)
    return SignatureCheck(access_key, None)
