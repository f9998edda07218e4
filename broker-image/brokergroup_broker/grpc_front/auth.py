"""The RocketMQ 5 SDKs' request signature in gRPC metadata (pure), checked against the same
per-group key pairs as the remoting port (core/remoting_keys.py).

Every SDK (apache/rocketmq-clients: Java's Signature, Python's util/signature.py) sends

    authorization: MQv2-HMAC-SHA1 Credential=<AccessKey>, SignedHeaders=x-mq-date-time,
                   Signature=<hex HMAC-SHA1(SecretKey, value of x-mq-date-time)>
    x-mq-date-time: 20260101T120000Z

and RocketMQ's proxy reads it as DefaultAuthenticationContextBuilder does: the scheme, then
comma-separated key=value items, the AccessKey the Credential's part before any '/'. The
signature covers the date-time only, so what it proves is the holder of the SecretKey, not
the request: metadata captured on the wire signs any request.

The date-time window. RocketMQ 5.3 checks no date at all (DefaultAuthenticationContextBuilder
only refuses a missing one; DefaultAuthenticationHandler compares the signature), so there a
captured signature works forever. This front refuses a date-time outside a window around its
own clock. The window cannot be AWS SigV4's 15 minutes around UTC: the SDKs write the
client's *local* wall-clock time with a literal `Z` — Java's `new SimpleDateFormat(
"yyyyMMdd'T'HHmmss'Z'").format(new Date())` in the JVM's default zone, Python's
`datetime.now().strftime(...)`, Go's `time.Now().Format(...)` — so a client in Shanghai
sends UTC+8 labelled Z, and a 15-minute window would refuse every client outside UTC. So the
window is every real zone offset, UTC-12:00 … UTC+14:00, widened by MAX_CLOCK_SKEW (15
minutes, SigV4's, for clocks that drift): a signature is refused once it is more than 12 h 15
min behind the broker's UTC clock or 14 h 15 min ahead of it. A captured signature replays
for at most about a day (12 h 15 min for a client in UTC, 26 h 15 min at UTC+14), not for as
long as the key lives; TLS (enforcing) is what stops a capture in the first place
(docs/security.md "Replay"). `date_time_refusal` is pure (the time comes in); `refusal`
reads the clock when its caller gives none.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
CLIENT_ID = "x-mq-client-id"
ALGORITHM = "MQv2-HMAC-SHA1"
#: The SDKs' x-mq-date-time, `yyyyMMdd'T'HHmmss'Z'` (the Z is literal: see above).
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
#: How far a client's clock may drift from the broker's, beyond its zone offset (AWS SigV4's).
MAX_CLOCK_SKEW = timedelta(minutes=15)
#: The zone offsets a client's local time may carry: UTC-12:00 (Baker Island) … UTC+14:00
#: (Kiribati's Line Islands), the whole range of tz's zones.
EARLIEST_ZONE_OFFSET = timedelta(hours=-12)
LATEST_ZONE_OFFSET = timedelta(hours=14)


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


def date_time_refusal(
    date_time: str,
    now_utc: datetime,
    *,
    earliest_offset: timedelta = EARLIEST_ZONE_OFFSET,
    latest_offset: timedelta = LATEST_ZONE_OFFSET,
    skew: timedelta = MAX_CLOCK_SKEW,
) -> str | None:
    """Why a signed x-mq-date-time is not accepted at `now_utc` (None: it is): unreadable,
    older than `earliest_offset - skew` from now, or later than `latest_offset + skew`."""
    try:
        signed = datetime.strptime(date_time, DATE_TIME_FORMAT)
    except ValueError:
        return f"x-mq-date-time {date_time[:40]!r} is not yyyyMMdd'T'HHmmss'Z'"
    now = now_utc.astimezone(UTC).replace(tzinfo=None)
    ahead = signed - now
    clock = f"the broker's clock ({now.strftime(DATE_TIME_FORMAT)}, UTC)"
    if ahead < earliest_offset - skew:
        return (
            f"x-mq-date-time {date_time} is {_span(-ahead)} behind {clock}, more than any time "
            f"zone (UTC{_offset(earliest_offset)}) and {_span(skew)} of clock skew allow: a "
            f"replayed request, or a wrong client clock"
        )
    if ahead > latest_offset + skew:
        return (
            f"x-mq-date-time {date_time} is {_span(ahead)} ahead of {clock}, more than any time "
            f"zone (UTC{_offset(latest_offset)}) and {_span(skew)} of clock skew allow: a wrong "
            f"client clock"
        )
    return None


def _span(span: timedelta) -> str:
    """`12 h 16 min`, `3 days 2 h`, `15 min` (whole minutes)."""
    minutes = int(span.total_seconds()) // 60
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}"] if days else []
    parts += [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes or not parts else []
    return " ".join(parts)


def _offset(offset: timedelta) -> str:
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, minutes = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{minutes:02d}"


def refusal(
    metadata: Mapping[str, str],
    secret_for: Callable[[str], str | None],
    unknown_key_reason: Callable[[str], str | None] = lambda _key: None,
    now_utc: datetime | None = None,
) -> str | None:
    """Why a request with `metadata` is not authenticated (None: it is). `secret_for` gives
    the SecretKey of an AccessKey this broker holds (None: not one of its pairs). The
    date-time is checked after the signature (a forged request learns nothing about the
    window); `now_utc` is the broker's clock unless given."""
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
    return date_time_refusal(
        signed.content.decode(), datetime.now(UTC) if now_utc is None else now_utc
    )
