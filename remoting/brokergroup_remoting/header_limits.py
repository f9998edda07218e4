"""Limit checks shared by the framing and both header serializations: one place says
which limit each measured length answers to."""

from __future__ import annotations

from brokergroup_remoting.command import RemotingLimits
from brokergroup_remoting.errors import FrameFault, RemoteProtocolError


def check_limit(fault: FrameFault, what: str, value: int, limit: int) -> None:
    """Refuse `value` over `limit`, naming the fault and both numbers."""
    if value > limit:
        raise RemoteProtocolError(fault, what, value=value, limit=limit)


def check_not_negative(what: str, value: int) -> None:
    """Refuse a negative length (Java would fail later or read it as empty)."""
    if value < 0:
        raise RemoteProtocolError(FrameFault.BAD_FIELD, f"negative {what}", value=value)


def check_remark(length: int, limits: RemotingLimits) -> None:
    check_limit(FrameFault.REMARK_TOO_LONG, "remark", length, limits.max_remark_bytes)


def check_ext_count(count: int, limits: RemotingLimits) -> None:
    check_limit(FrameFault.TOO_MANY_EXT_FIELDS, "extFields pairs", count, limits.max_ext_fields)


def check_ext_pair(key_length: int, value_length: int, limits: RemotingLimits) -> None:
    check_limit(
        FrameFault.EXT_KEY_TOO_LONG, "extFields key bytes", key_length, limits.max_ext_key_bytes
    )
    check_limit(
        FrameFault.EXT_VALUE_TOO_LONG,
        "extFields value bytes",
        value_length,
        limits.max_ext_value_bytes,
    )
