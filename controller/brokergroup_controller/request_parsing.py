"""Parsing and type-checking of API request bodies and queries (DESIGN.md §2.4).

Every parser returns the typed request (`requests`) of one `endpoints.Endpoints` call or
raises `BadRequest` naming the field, so malformed input is answered with 400 (on the
RocketMQ port CONTROLLER_INVALID_REQUEST) before anything is forwarded or proposed. The
HTTP API parses its JSON here; the RocketMQ port (`rocketmq_front.wire`) its header
fields, through the same checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from brokergroup_controller import api
from brokergroup_controller import requests as rq
from brokergroup_controller.election import ElectionTrigger
from brokergroup_controller.errors import ControllerError, ErrorCode


class BadRequest(ControllerError):
    """Malformed input (BAD_REQUEST); the message names the field."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.BAD_REQUEST, message)

    def __str__(self) -> str:
        return self.message


def _str(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"field '{name}' is required and must be a non-empty string")
    return value


def _opt_str(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"field '{name}' must be a string or null")
    return value


def int_field(
    data: Mapping[str, Any], name: str, *, minimum: int | None = 0, text: bool = False
) -> int:
    value = data.get(name)
    if text and isinstance(value, str):  # query parameters arrive as text
        try:
            value = int(value)
        except ValueError:
            raise BadRequest(f"field '{name}' must be an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"field '{name}' is required and must be an integer")
    if minimum is not None and value < minimum:
        raise BadRequest(f"field '{name}' must be >= {minimum}, got {value}")
    return value


def _opt_int(
    data: Mapping[str, Any], name: str, default: int | None, minimum: int = 0
) -> int | None:
    if data.get(name) is None:
        return default
    return int_field(data, name, minimum=minimum)


def _opt_bool(data: Mapping[str, Any], name: str, default: bool) -> bool:
    value = data.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"field '{name}' must be true or false")
    return value


def _int_list(data: Mapping[str, Any], name: str, *, required: bool) -> list[int] | None:
    value = data.get(name)
    if value is None:
        if required:
            raise BadRequest(f"field '{name}' is required and must be a list of integers")
        return None
    if not isinstance(value, list) or any(
        isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in value
    ):
        raise BadRequest(f"field '{name}' must be a list of BrokerIds (integers >= 1)")
    return list(value)


#: Longest accepted requestId: a UUID is 32-36 characters; the bound keeps the
#: replicated table of recent ids (state.RECENT_REQUESTS_BOUND) small.
MAX_REQUEST_ID_CHARS = 64


def _request_id(data: Mapping[str, Any]) -> str:
    """The client's id of a mutating request ("" when absent: not deduplicated)."""
    value = data.get("requestId")
    if value is None:
        return ""
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_REQUEST_ID_CHARS
        or not value.isascii()
        or not value.isprintable()
    ):
        raise BadRequest(
            f"field 'requestId' must be 1-{MAX_REQUEST_ID_CHARS} printable ASCII characters"
        )
    return value


def _broker_set_key(data: Mapping[str, Any]) -> tuple[str, str]:
    return _str(data, "clusterName"), _str(data, "brokerName")


def query_key(data: Mapping[str, Any]) -> rq.GetReplicaInfo:
    return rq.GetReplicaInfo(*_broker_set_key(data))


def parse_next_broker_id(data: Mapping[str, Any]) -> rq.GetNextBrokerId:
    return rq.GetNextBrokerId(*_broker_set_key(data))


def parse_none(data: Mapping[str, Any]) -> rq.ListGroups:
    return rq.ListGroups()


def parse_apply(b: Mapping[str, Any]) -> rq.ApplyBrokerId:
    return rq.ApplyBrokerId(
        *_broker_set_key(b),
        broker_id=int_field(b, "brokerId"),
        register_code=_str(b, "registerCode"),
        address=_str(b, "address"),
        request_id=_request_id(b),
    )


def parse_register(b: Mapping[str, Any]) -> rq.RegisterBroker:
    return rq.RegisterBroker(
        *_broker_set_key(b),
        broker_id=int_field(b, "brokerId", minimum=1),
        address=_str(b, "address"),
        request_id=_request_id(b),
    )


def parse_heartbeat(b: Mapping[str, Any]) -> rq.Heartbeat:
    cluster, name = _broker_set_key(b)
    hb = api.BrokerHeartbeat(
        cluster_name=cluster,
        broker_name=name,
        broker_id=int_field(b, "brokerId", minimum=1),
        address=_str(b, "address"),
        epoch=int_field(b, "epoch"),
        max_offset=int_field(b, "maxOffset"),
        confirm_offset=int_field(b, "confirmOffset"),
        election_priority=_opt_int(b, "electionPriority", 0) or 0,
        heartbeat_timeout_ms=_opt_int(b, "heartbeatTimeoutMs", 0, minimum=0) or 0,
        store_writable=_opt_bool(b, "storeWritable", True),
        store_error=_opt_str(b, "storeError"),
        master_lease_ms=_opt_int(b, "masterLeaseMs", None, minimum=1),
        all_ack_in_sync_state_set=_opt_bool(b, "allAckInSyncStateSet", False),
        incarnation=_opt_str(b, "incarnation") or "",
    )
    return rq.Heartbeat(hb)


def parse_inactive(b: Mapping[str, Any]) -> rq.ReportInactive:
    return rq.ReportInactive(
        *_broker_set_key(b),
        broker_id=int_field(b, "brokerId", minimum=1),
        reason=_opt_str(b, "reason") or "reported inactive",
        process_gone=_opt_bool(b, "processGone", False),
        incarnation=_opt_str(b, "incarnation") or "",
        symptom_only=_opt_bool(b, "symptomOnly", False),
    )


def parse_alter(b: Mapping[str, Any]) -> rq.AlterSyncStateSet:
    cluster, name = _broker_set_key(b)
    members = _int_list(b, "syncStateSet", required=True)
    assert members is not None
    return rq.AlterSyncStateSet(
        cluster,
        name,
        master_broker_id=int_field(b, "masterBrokerId", minimum=1),
        master_epoch=int_field(b, "masterEpoch"),
        sync_state_set=frozenset(members),
        sync_state_set_epoch=int_field(b, "syncStateSetEpoch"),
        request_id=_request_id(b),
    )


def parse_elect(b: Mapping[str, Any]) -> rq.ElectMaster:
    cluster, name = _broker_set_key(b)
    requester = _opt_int(b, "brokerId", None, minimum=1)
    designated = _opt_int(b, "designatedBrokerId", None, minimum=1)
    raw_trigger = b.get("trigger")
    if raw_trigger is None:
        trigger = ElectionTrigger.ADMIN if designated is not None else ElectionTrigger.BROKER
    elif raw_trigger in (ElectionTrigger.BROKER.value, ElectionTrigger.ADMIN.value):
        trigger = ElectionTrigger(raw_trigger)
    else:
        raise BadRequest("field 'trigger' must be 'broker' or 'admin'")
    switchover = _opt_bool(b, "switchover", False)
    eligible = _int_list(b, "eligibleBrokerIds", required=False)
    if switchover:
        # The controller picks the target (election.switchover_targets): an admin call.
        if requester is not None or designated is not None:
            raise BadRequest(
                "a switchover names no 'brokerId' or 'designatedBrokerId': the controller "
                "picks the target (use designatedBrokerId alone to choose it yourself)"
            )
        if raw_trigger not in (None, ElectionTrigger.ADMIN.value):
            raise BadRequest("a switchover is an admin election: field 'trigger' must be 'admin'")
        trigger = ElectionTrigger.ADMIN
    elif eligible is not None:
        raise BadRequest("field 'eligibleBrokerIds' goes only with 'switchover': true")
    elif requester is None and designated is None:
        raise BadRequest(
            "field 'brokerId' (requester), 'designatedBrokerId' or 'switchover' is required"
        )
    return rq.ElectMaster(
        cluster,
        name,
        trigger=trigger,
        broker_id=requester,
        designated_broker_id=designated,
        switchover=switchover,
        eligible_broker_ids=None if eligible is None else frozenset(eligible),
        request_id=_request_id(b),
    )


def parse_clean(b: Mapping[str, Any]) -> rq.CleanBrokerData:
    cluster, name = _broker_set_key(b)
    ids = _int_list(b, "brokerIds", required=False)
    return rq.CleanBrokerData(
        cluster,
        name,
        broker_ids=None if ids is None else frozenset(ids),
        force=_opt_bool(b, "force", False),
        request_id=_request_id(b),
    )


def parse_watch(q: Mapping[str, Any]) -> rq.Watch:
    return rq.Watch(
        *_broker_set_key(q),
        master_epoch=int_field(q, "masterEpoch", text=True),
        sync_state_set_epoch=int_field(q, "syncStateSetEpoch", text=True),
        timeout_ms=int_field(q, "timeoutMs", text=True),
    )
