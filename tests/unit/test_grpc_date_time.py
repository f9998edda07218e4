"""The gRPC front's x-mq-date-time window (issue 36; grpc_front/auth.py date_time_refusal):
a signature made with a date-time more than 12 h 15 min behind the broker's UTC clock (a
replay) or 14 h 15 min ahead of it is refused with the reason, a fresh one is accepted, and
so is a fresh one in any time zone — the SDKs write the client's local time with a literal
Z (checked here with the official Python SDK's own Signature code under TZ=Asia/Shanghai,
Pacific/Kiritimati and Etc/GMT+12). The signature is checked before the date (a forged
request is "check signature failed" whatever its date), and on a real grpc.aio port a stale
signature is answered UNAUTHORIZED with the reason and stores nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials
from rocketmq.v5.util.signature import Signature

from brokergroup_broker.grpc_front import auth, convert
from brokergroup_broker.grpc_front.definitions import service_pb
from tests.unit.test_grpc_front import PAIR, grpc_front, secret_for, v2_message

NOW = datetime(2026, 11, 29, 4, 0, 0, tzinfo=UTC)


def signed_at(moment: datetime, secret_key: str = PAIR.secret_key) -> dict[str, str]:
    """The SDKs' metadata for a date-time written from `moment`'s wall clock (naive)."""
    date_time = moment.strftime("%Y%m%dT%H%M%SZ")
    return {
        "x-mq-client-id": "c-1",
        "x-mq-date-time": date_time,
        "authorization": f"MQv2-HMAC-SHA1 Credential={PAIR.access_key}, "
        f"SignedHeaders=x-mq-date-time, Signature={auth.sign(secret_key, date_time)}",
    }


def at(offset: timedelta) -> datetime:
    return NOW + offset


def test_a_fresh_signature_is_accepted() -> None:
    assert auth.refusal(signed_at(NOW), secret_for, now_utc=NOW) is None
    assert auth.refusal(signed_at(at(timedelta(seconds=-40))), secret_for, now_utc=NOW) is None


@pytest.mark.parametrize(
    "zone",
    [timedelta(hours=8), timedelta(hours=-12), timedelta(hours=14), timedelta(hours=5, minutes=45)],
)
def test_a_fresh_signature_in_local_time_is_accepted(zone: timedelta) -> None:
    # Shanghai, Baker Island, Kiritimati, Kathmandu: local time labelled Z, as the SDKs send.
    assert auth.refusal(signed_at(at(zone)), secret_for, now_utc=NOW) is None
    drifted = zone + timedelta(minutes=14) if zone > timedelta(0) else zone - timedelta(minutes=14)
    assert auth.refusal(signed_at(at(drifted)), secret_for, now_utc=NOW) is None


def test_a_stale_signature_is_refused_as_a_replay() -> None:
    edge = at(-timedelta(hours=12, minutes=15))
    assert auth.refusal(signed_at(edge), secret_for, now_utc=NOW) is None
    stale = auth.refusal(signed_at(edge - timedelta(minutes=1)), secret_for, now_utc=NOW)
    assert stale == (
        "x-mq-date-time 20261128T154400Z is 12 h 16 min behind the broker's clock "
        "(20261129T040000Z, UTC), more than any time zone (UTC-12:00) and 15 min of clock "
        "skew allow: a replayed request, or a wrong client clock"
    )
    day_old = auth.refusal(signed_at(at(-timedelta(days=1))), secret_for, now_utc=NOW)
    assert day_old is not None and day_old.startswith(
        "x-mq-date-time 20261128T040000Z is 1 day behind the broker's clock"
    )
    year_old = auth.refusal(signed_at(at(-timedelta(days=400))), secret_for, now_utc=NOW)
    assert year_old is not None and " is 400 days behind " in year_old


def test_a_future_signature_is_refused() -> None:
    edge = at(timedelta(hours=14, minutes=15))
    assert auth.refusal(signed_at(edge), secret_for, now_utc=NOW) is None
    future = auth.refusal(signed_at(edge + timedelta(minutes=1)), secret_for, now_utc=NOW)
    assert future == (
        "x-mq-date-time 20261129T181600Z is 14 h 16 min ahead of the broker's clock "
        "(20261129T040000Z, UTC), more than any time zone (UTC+14:00) and 15 min of clock "
        "skew allow: a wrong client clock"
    )
    later = auth.refusal(signed_at(at(timedelta(days=2, hours=3))), secret_for, now_utc=NOW)
    assert later is not None and " is 2 days 3 h ahead of " in later


def test_the_signature_is_checked_before_the_date() -> None:
    stale_forged = signed_at(at(-timedelta(days=3)), secret_key="not-the-secret")
    assert auth.refusal(stale_forged, secret_for, now_utc=NOW) == "check signature failed"
    unknown = {**signed_at(at(-timedelta(days=3))), "authorization": "MQv2-HMAC-SHA1 "
               "Credential=nobody, SignedHeaders=x-mq-date-time, Signature=00ff"}  # fmt: skip
    assert str(auth.refusal(unknown, secret_for, now_utc=NOW)).startswith("AccessKey 'nobody'")


def test_an_unreadable_date_time_is_refused_even_when_signed() -> None:
    for text in ("2026-11-29T04:00:00Z", "yesterday", "20261329T040000Z", "20261129T040000"):
        metadata = {
            **signed_at(NOW),
            "x-mq-date-time": text,
            "authorization": f"MQv2-HMAC-SHA1 Credential={PAIR.access_key}, "
            f"SignedHeaders=x-mq-date-time, Signature={auth.sign(PAIR.secret_key, text)}",
        }
        assert auth.refusal(metadata, secret_for, now_utc=NOW) == (
            f"x-mq-date-time {text!r} is not yyyyMMdd'T'HHmmss'Z'"
        )


@pytest.fixture
def zone() -> Iterator[None]:
    before = os.environ.get("TZ")
    yield
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.mark.parametrize("name", ["Asia/Shanghai", "Pacific/Kiritimati", "Etc/GMT+12", "UTC"])
def test_the_python_sdks_own_metadata_is_accepted_in_any_zone(zone: None, name: str) -> None:
    os.environ["TZ"] = name
    time.tzset()
    config = ClientConfiguration("127.0.0.1:1", Credentials(PAIR.access_key, PAIR.secret_key))
    metadata = dict(Signature.metadata(config, "c-1"))
    local = datetime.now().strftime("%Y%m%dT%H%M%SZ")
    utc = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    if name != "UTC":  # the SDK writes local time: the zone really moved the header
        assert metadata["x-mq-date-time"][:11] == local[:11] != utc[:11]
    assert auth.refusal(metadata, secret_for) is None  # the broker's own clock


async def test_a_stale_signature_is_answered_unauthorized_on_the_port(tmp_path: Path) -> None:
    async with grpc_front(tmp_path) as front:
        now = datetime.now(UTC)
        request = service_pb.SendMessageRequest(messages=[v2_message()])
        stale = signed_at(now - timedelta(days=2))
        answer = await front.stub.SendMessage(request, metadata=list(stale.items()))
        assert answer.status.code == convert.UNAUTHORIZED
        assert " is 2 days behind the broker's clock " in answer.status.message
        assert list(answer.entries) == []
        assert not front.master.parts.produce.holds_topic("T")
        fresh = await front.stub.SendMessage(request, metadata=list(signed_at(now).items()))
        assert fresh.status.code == convert.OK, fresh.status
        assert front.check.refused == 1
