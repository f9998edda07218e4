"""Controller event export for the audit (`brokergroup admin events`, docs/audit.md).

The controller's Raft state holds only the current masterEpoch/SyncStateSet per
group (the journal is compacted, and events carry no times), so a history with
times is recorded from the outside: `admin events` long-polls `GET /v1/watch`
(which returns as soon as either epoch of a group moves) and appends one JSON line
per change. This module is the pure part: two successive views of a group in,
event lines out.

Line format (JSON object per line, camelCase):

    {"timeMs", "type", "clusterName", "brokerName", "masterBrokerId", "masterEpoch",
     "syncStateSet", "syncStateSetEpoch", ...}

types: `Snapshot` (first view of a group), `MasterElected` (masterEpoch rose; adds
`previousMasterBrokerId`, `previousMasterLastHeartbeatMs` = time of the previous
master's last heartbeat as the controller saw it, `previousMasterMaxOffset`),
`SyncStateSetChanged` (syncStateSetEpoch rose, same masterEpoch).

The view after an election may know nothing of the old master's heartbeats: a controller
that became leader since never heard from it (liveness is leader-local), and a broker the
supervisor restarted may not have heartbeated yet. Then the two fields come from the last
heartbeat the recorder itself saw in an earlier view (`HeartbeatsSeen`, refreshed every
poll), and `previousMasterHeartbeatFrom` says which: `controller` or `recorder` (a
heartbeat at least that late, so the unavailability the audit derives is an upper bound).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from brokergroup_controller.api import ReplicaInfo


class Heartbeat(NamedTuple):
    """A broker's heartbeat as a view reported it: when (ms since the epoch) and its
    maxOffset then."""

    time_ms: int
    max_offset: int


#: brokerId -> the latest heartbeat the recorder saw in the views of one group.
HeartbeatsSeen = Mapping[int, Heartbeat]


def heartbeats_seen(seen: HeartbeatsSeen, info: ReplicaInfo, now_ms: int) -> dict[int, Heartbeat]:
    """`seen` updated with the view `info` taken at `now_ms`: each broker's latest heartbeat."""
    out = dict(seen)
    for b in info.brokers:
        if b.last_heartbeat_age_ms is None:
            continue
        at = now_ms - int(b.last_heartbeat_age_ms)
        if b.broker_id not in out or at >= out[b.broker_id].time_ms:
            out[b.broker_id] = Heartbeat(at, b.max_offset)
    return out


def _base(time_ms: int, kind: str, info: ReplicaInfo) -> dict[str, Any]:
    return {
        "timeMs": time_ms,
        "type": kind,
        "clusterName": info.cluster_name,
        "brokerName": info.broker_name,
        "masterBrokerId": info.master_broker_id,
        "masterEpoch": info.master_epoch,
        "syncStateSet": sorted(info.sync_state_set),
        "syncStateSetEpoch": info.sync_state_set_epoch,
    }


def change_events(
    previous: ReplicaInfo | None,
    previous_master: int | None,
    current: ReplicaInfo,
    now_ms: int,
    seen: HeartbeatsSeen | None = None,
) -> list[dict[str, Any]]:
    """Event lines for the step previous → current of one group.

    `previous_master`: the last master id this recorder saw (a view taken while the
    master was dead shows masterBrokerId null). `seen`: the heartbeats of the views
    before `current` (heartbeats_seen), for when `current` has none of the old master.
    """
    if previous is None:
        return [_base(now_ms, "Snapshot", current)]
    out: list[dict[str, Any]] = []
    if current.master_epoch > previous.master_epoch:
        line = _base(now_ms, "MasterElected", current)
        line["previousMasterEpoch"] = previous.master_epoch
        line["previousMasterBrokerId"] = previous_master
        old = next((b for b in current.brokers if b.broker_id == previous_master), None)
        earlier = None if previous_master is None else (seen or {}).get(previous_master)
        if old is not None and old.last_heartbeat_age_ms is not None:
            line["previousMasterLastHeartbeatMs"] = now_ms - int(old.last_heartbeat_age_ms)
            line["previousMasterMaxOffset"] = old.max_offset
            line["previousMasterHeartbeatFrom"] = "controller"
        elif earlier is not None:
            line["previousMasterLastHeartbeatMs"] = earlier.time_ms
            line["previousMasterMaxOffset"] = earlier.max_offset
            line["previousMasterHeartbeatFrom"] = "recorder"
        out.append(line)
    elif current.sync_state_set_epoch > previous.sync_state_set_epoch:
        out.append(_base(now_ms, "SyncStateSetChanged", current))
    return out
