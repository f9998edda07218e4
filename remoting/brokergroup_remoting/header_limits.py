"""Checks shared by both header serializations: one place says what each limit means."""

from __future__ import annotations

from brokergroup_remoting.command import RemotingLimits
from brokergroup_remoting.errors import FrameFault, RemoteProtocolError


def check_remark(length: int, limits: RemotingLimits) -> None:
    if length > limits.max_remark_bytes:
        raise RemoteProtocolError(
            FrameFault.REMARK_TOO_LONG, "remark", value=length, limit=limits.max_remark_bytes
        )


def check_ext_count(count: int, limits: RemotingLimits) -> None:
    if count > limits.max_ext_fields:
        raise RemoteProtocolError(
            FrameFault.TOO_MANY_EXT_FIELDS,
            "extFields pairs",
            value=count,
            limit=limits.max_ext_fields,
        )


def check_ext_pair(key_length: int, value_length: int, limits: RemotingLimits) -> None:
    if key_length > limits.max_ext_key_bytes:
        raise RemoteProtocolError(
            FrameFault.EXT_KEY_TOO_LONG,
            "extFields key bytes",
            value=key_length,
            limit=limits.max_ext_key_bytes,
        )
    if value_length > limits.max_ext_value_bytes:
        raise RemoteProtocolError(
            FrameFault.EXT_VALUE_TOO_LONG,
            "extFields value bytes",
            value=value_length,
            limit=limits.max_ext_value_bytes,
        )
