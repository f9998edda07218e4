"""RocketMQ's controller protocol at the edge, pure (DESIGN.md §12; docs/rocketmq-compatibility.md).

Headers and bodies of RequestCode 1001-1013 and BROKER_HEARTBEAT as RocketMQ 5.3.1 writes
them (remoting/protocol/header/controller/, body/SyncStateSet, ElectMasterResponseBody,
BrokerReplicasInfo, NotifyBrokerRoleChangedRequestHeader), translated to and from the
controller service's typed requests (`requests`, through `request_parsing`'s checks) and
answers (`api.ReplicaInfo`, ...). Nothing is decided here: the typed request goes through
the same `endpoints.Endpoints` method and Raft log as the HTTP API's. Every `ErrorCode` has
exactly one RocketMQ response code (`RESPONSE_CODE_OF`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from brokergroup_controller import api
from brokergroup_controller import requests as rq
from brokergroup_controller.api import BrokerSetKey
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.request_parsing import (
    parse_alter,
    parse_apply,
    parse_clean,
    parse_elect,
    parse_heartbeat,
    parse_next_broker_id,
    parse_register,
)
from brokergroup_remoting import ResponseCode
from brokergroup_remoting import fields as header
from brokergroup_remoting.body import decode_json, decode_json_object, json_body
from brokergroup_remoting.fields import BadField

#: The one table from the controller's result codes to RocketMQ's (ResponseCode.java 5.3.1).
RESPONSE_CODE_OF: Mapping[ErrorCode, ResponseCode] = {
    ErrorCode.SUCCESS: ResponseCode.SUCCESS,
    ErrorCode.BROKER_ID_INVALID: ResponseCode.CONTROLLER_BROKER_ID_INVALID,
    ErrorCode.NEED_TO_BE_REGISTERED: ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
    # A stock broker answers METADATA_NOT_EXIST by registering again (ReplicasManager).
    ErrorCode.BROKER_SET_NOT_FOUND: ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
    ErrorCode.INVALID_MASTER: ResponseCode.CONTROLLER_INVALID_MASTER,
    ErrorCode.FENCED_MASTER_EPOCH: ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
    ErrorCode.FENCED_SYNC_STATE_SET_EPOCH: ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
    ErrorCode.BROKER_NOT_ALIVE: ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
    ErrorCode.INVALID_SYNC_STATE_SET: ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
    ErrorCode.MASTER_STILL_EXIST: ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
    ErrorCode.MASTER_NOT_AVAILABLE: ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
    ErrorCode.ELECT_TARGET_NOT_ELIGIBLE: ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
    ErrorCode.BROKER_STILL_ALIVE: ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
    ErrorCode.USER_NOT_FOUND: ResponseCode.USER_NOT_EXIST,
    ErrorCode.BAD_REQUEST: ResponseCode.CONTROLLER_INVALID_REQUEST,
    ErrorCode.UNAUTHORIZED: ResponseCode.NO_PERMISSION,
    # A valid credential whose role or group may not do this (access.decide).
    ErrorCode.FORBIDDEN: ResponseCode.NO_PERMISSION,
    ErrorCode.NOT_LEADER: ResponseCode.CONTROLLER_NOT_LEADER,
    # Outcome unknown (the entry may still commit): a broker retries on its next round.
    ErrorCode.COMMIT_TIMEOUT: ResponseCode.SYSTEM_BUSY,
    ErrorCode.INTERNAL_ERROR: ResponseCode.SYSTEM_ERROR,
}


def response_code_of(code: str) -> ResponseCode:
    """RocketMQ's code for a controller result code (an unknown one is our bug: SYSTEM_ERROR)."""
    try:
        return RESPONSE_CODE_OF[ErrorCode(code)]
    except ValueError:
        return ResponseCode.SYSTEM_ERROR


# ---------------------------------------------------------------- header fields


def _not_negative(value: int | None) -> int:
    # A broker with an empty epoch file or no confirmed offset reports -1.
    return 0 if value is None or value < 0 else value


# ---------------------------------------------------------------- broker set by name


def resolve_broker_set(
    keys: Iterable[BrokerSetKey], broker_name: str, cluster_name: str | None = None
) -> BrokerSetKey | None:
    """The broker set a brokerName-only request means. RocketMQ's controller keys sets by
    brokerName alone; ours by (clusterName, brokerName). None when no set has that name;
    BadField when several clusters use it and the request names none of them."""
    matches = sorted(k for k in keys if k[1] == broker_name)
    if cluster_name:
        return (cluster_name, broker_name) if (cluster_name, broker_name) in matches else None
    if len(matches) > 1:
        clusters = ", ".join(c for c, _ in matches)
        raise BadField(
            f"brokerName {broker_name!r} exists in several clusters ({clusters}): "
            "rename one, or use the HTTP API, which takes clusterName"
        )
    return matches[0] if matches else None


# ---------------------------------------------------------------- requests → typed requests


def next_broker_id_request(fields: Mapping[str, str]) -> rq.GetNextBrokerId:
    """GetNextBrokerIdRequestHeader (clusterName, brokerName)."""
    return parse_next_broker_id(
        {"clusterName": fields.get("clusterName"), "brokerName": fields.get("brokerName")}
    )


def apply_broker_id_request(fields: Mapping[str, str]) -> rq.ApplyBrokerId:
    """ApplyBrokerIdRequestHeader: the address is the registerCheckCode's part before ';'
    (`address;timestamp`, as ReplicasInfoManager.applyBrokerId reads it). Marked as come
    through RocketMQ's protocol: only a stock broker speaks it to the controller, and the
    name server routes its group by that (namesrv/routes.py `master_only_for`)."""
    code = header.text(fields, "registerCheckCode")
    parsed = parse_apply(
        {
            "clusterName": fields.get("clusterName"),
            "brokerName": fields.get("brokerName"),
            "brokerId": header.int64(fields, "appliedBrokerId"),
            "registerCode": code,
            "address": code.split(";")[0],
        }
    )
    return replace(parsed, protocol=api.RegistrationProtocol.ROCKETMQ)


def register_request(fields: Mapping[str, str]) -> rq.RegisterBroker:
    """RegisterBrokerToControllerRequestHeader (RocketMQ's protocol, as above)."""
    parsed = parse_register(
        {
            "clusterName": fields.get("clusterName"),
            "brokerName": fields.get("brokerName"),
            "brokerId": header.int64(fields, "brokerId"),
            "address": fields.get("brokerAddress"),
        }
    )
    return replace(parsed, protocol=api.RegistrationProtocol.ROCKETMQ)


def heartbeat_request(fields: Mapping[str, str]) -> rq.Heartbeat:
    """BrokerHeartbeatRequestHeader (namesrv package; also the controller's)."""
    timeout = header.optional_int64(fields, "heartbeatTimeoutMills", None)
    return parse_heartbeat(
        {
            "clusterName": fields.get("clusterName"),
            "brokerName": fields.get("brokerName"),
            "brokerId": header.int64(fields, "brokerId"),
            "address": fields.get("brokerAddr"),
            "epoch": _not_negative(header.optional_int32(fields, "epoch", None)),
            "maxOffset": _not_negative(header.optional_int64(fields, "maxOffset", None)),
            "confirmOffset": _not_negative(header.optional_int64(fields, "confirmOffset", None)),
            "electionPriority": _not_negative(
                header.optional_int32(fields, "electionPriority", None)
            ),
            "heartbeatTimeoutMs": None if timeout is None else max(timeout, 0),
        }
    )


def alter_request(
    fields: Mapping[str, str], body: bytes, key: BrokerSetKey
) -> rq.AlterSyncStateSet:
    """AlterSyncStateSetRequestHeader (brokerName, masterBrokerId, masterEpoch) with a
    SyncStateSet body (the new set and the syncStateSetEpoch it was based on)."""
    data = decode_json_object(body, "SyncStateSet")
    return parse_alter(
        {
            "clusterName": key[0],
            "brokerName": key[1],
            "masterBrokerId": header.int64(fields, "masterBrokerId"),
            "masterEpoch": header.int32(fields, "masterEpoch"),
            "syncStateSet": data.get("syncStateSet"),
            "syncStateSetEpoch": data.get("syncStateSetEpoch"),
        }
    )


def elect_request(fields: Mapping[str, str], key: BrokerSetKey) -> rq.ElectMaster | None:
    """ElectMasterRequestHeader: designateElect → an admin election of brokerId; a brokerId
    alone → the broker asks (it wins a first election); brokerId -1 → None (a controller-
    triggered election, which only the controller starts here)."""
    broker_id = header.optional_int64(fields, "brokerId", None)
    if broker_id is None or broker_id == -1:
        return None
    designate = header.boolean(fields, "designateElect")
    return parse_elect(
        {
            "clusterName": key[0],
            "brokerName": key[1],
            "brokerId": None if designate else broker_id,
            "designatedBrokerId": broker_id if designate else None,
            "trigger": "admin" if designate else "broker",
        }
    )


def clean_request(fields: Mapping[str, str], key: BrokerSetKey) -> rq.CleanBrokerData:
    """CleanControllerBrokerDataRequestHeader: brokerControllerIdsToClean is `1;2`
    (blank: the whole set); isCleanLivingBroker is our `force`."""
    raw = (fields.get("brokerControllerIdsToClean") or "").strip()
    ids: list[int] | None = None
    if raw:
        parsed = [header.java_integer(part.strip()) for part in raw.split(";") if part.strip()]
        ids = [broker_id for broker_id in parsed if broker_id is not None]
        if len(ids) != len(parsed):
            raise BadField(
                "brokerControllerIdsToClean must be BrokerIds separated by ';', "
                f"got {header.quoted(raw)}"
            )
    return parse_clean(
        {
            "clusterName": key[0],
            "brokerName": key[1],
            "brokerIds": ids,
            "force": header.boolean(fields, "isCleanLivingBroker"),
        }
    )


def broker_names_body(body: bytes) -> list[str]:
    """CONTROLLER_GET_SYNC_STATE_DATA's body: a JSON list of brokerNames."""
    data = decode_json(body, "brokerName list")
    if not isinstance(data, list) or not all(isinstance(n, str) for n in data):
        raise BadField("the body must be a JSON list of brokerNames")
    return list(data)


# ---------------------------------------------------------------- answers


def _header(values: Mapping[str, object]) -> dict[str, str]:
    """A response header's extFields: Java's string forms, absent values left out."""
    out: dict[str, str] = {}
    for name, value in values.items():
        if value is None:
            continue
        out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def sync_state_set_json(members: Iterable[int], epoch: int) -> bytes:
    """body/SyncStateSet."""
    return json_body({"syncStateSet": sorted(members), "syncStateSetEpoch": epoch})


def sync_state_set_body(info: api.ReplicaInfo) -> bytes:
    return sync_state_set_json(info.sync_state_set, info.sync_state_set_epoch)


def master_header(info: api.ReplicaInfo, *, only_alive: bool) -> dict[str, str]:
    """masterBrokerId/masterAddress/masterEpoch/syncStateSetEpoch (Register, Elect,
    GetReplicaInfo responses). `only_alive`: RegisterBroker names the master only while it
    is alive (ReplicasInfoManager.registerBroker), so a broker never follows a dead one."""
    if only_alive and (info.master_broker_id is None or not info.master_alive):
        return {}
    return _header(
        {
            "masterBrokerId": info.master_broker_id,
            "masterAddress": info.master_address,
            "masterEpoch": info.master_epoch,
            "syncStateSetEpoch": info.sync_state_set_epoch,
        }
    )


def member_group(info: api.ReplicaInfo) -> dict[str, Any]:
    """body/BrokerMemberGroup: every registered broker's address by BrokerId."""
    return {
        "cluster": info.cluster_name,
        "brokerName": info.broker_name,
        "brokerAddrs": {str(b.broker_id): b.address for b in info.brokers},
    }


def elect_body(info: api.ReplicaInfo) -> bytes:
    """body/ElectMasterResponseBody."""
    return json_body(
        {"brokerMemberGroup": member_group(info), "syncStateSet": sorted(info.sync_state_set)}
    )


def replicas_info_body(infos: Iterable[api.ReplicaInfo]) -> bytes:
    """body/BrokerReplicasInfo (mqadmin getSyncStateSet)."""
    table: dict[str, Any] = {}
    for info in infos:
        in_sync: list[dict[str, Any]] = []
        not_in_sync: list[dict[str, Any]] = []
        for b in info.brokers:
            replica = {
                "brokerName": info.broker_name,
                "brokerId": b.broker_id,
                "brokerAddress": b.address,
                "alive": b.alive,
            }
            (in_sync if b.broker_id in info.sync_state_set else not_in_sync).append(replica)
        table[info.broker_name] = {
            "masterBrokerId": info.master_broker_id,
            "masterAddress": info.master_address,
            "masterEpoch": info.master_epoch,
            "syncStateSetEpoch": info.sync_state_set_epoch,
            "inSyncReplicas": in_sync,
            "notInSyncReplicas": not_in_sync,
        }
    return json_body({"replicasInfoTable": table})


@dataclass(frozen=True)
class RoleChange:
    """NOTIFY_BROKER_ROLE_CHANGED: header fields and SyncStateSet body."""

    fields: dict[str, str]
    body: bytes


def role_change(info: api.ReplicaInfo) -> RoleChange | None:
    """What the controller pushes to a set's live brokers after an election (None without
    a master: ControllerManager.notifyBrokerRoleChanged sends nothing then either)."""
    if info.master_broker_id is None:
        return None
    return RoleChange(
        _header(
            {
                "masterAddress": info.master_address,
                "masterEpoch": info.master_epoch,
                "syncStateSetEpoch": info.sync_state_set_epoch,
                "masterBrokerId": info.master_broker_id,
            }
        ),
        sync_state_set_body(info),
    )


def metadata_header(
    *, leader_id: str | None, leader_address: str | None, is_leader: bool, peers: str
) -> dict[str, str]:
    """GetMetaDataResponseHeader (which node leads, and its remoting address)."""
    return _header(
        {
            "group": "brokergroup",
            "controllerLeaderId": leader_id,
            "controllerLeaderAddress": leader_address,
            "isLeader": is_leader,
            "peers": peers,
        }
    )


def properties_text(settings: Mapping[str, object]) -> bytes:
    """GET_CONTROLLER_CONFIG's body: `key=value` lines (MixAll.properties2String)."""
    lines = []
    for key in sorted(settings):
        value = settings[key]
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        lines.append(f"{key}={text}\n")
    return "".join(lines).encode("utf-8")


def parse_properties(body: bytes) -> dict[str, str]:
    """UPDATE_CONTROLLER_CONFIG's body (MixAll.string2Properties: `key=value` lines)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadField(f"the properties body is not UTF-8: {exc}") from None
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out
