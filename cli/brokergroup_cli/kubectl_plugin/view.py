"""`kubectl brokergroup status`: a BrokerGroup's status as the local status view
shows a local installation (pure: the object in, text or JSON out).

The operator writes the controller's view into `.status` (master, masterEpoch,
SyncStateSet, one row per pod with its BrokerId, role, liveness and
maxOffset); this module adds the lag (master maxOffset − the row's) and
renders it with the local view's own pieces (brokergroup_cli.local.status),
so both views read alike.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from brokergroup_cli.local.status import cell, group_lines, lag_bytes, table


@dataclass(frozen=True)
class PodRow:
    pod: str
    broker_id: int | None
    address: str | None
    role: str
    alive: bool | None
    in_sync_state_set: bool
    ready: bool | None
    max_offset: int | None
    lag: int | None


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class GroupStatus:
    namespace: str
    name: str
    replicas: int | None
    ready: str | None
    master_broker_id: int | None
    master_pod: str | None
    master_address: str | None
    master_epoch: int | None
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int | None
    pods: tuple[PodRow, ...]
    conditions: tuple[Condition, ...]
    current_revision: str | None
    update_revision: str | None
    last_failover: Mapping[str, Any] | None
    tls: Mapping[str, Any] | None = None
    """status.tls: the operator's record of the group's certificate (spec.tls), None
    without TLS."""

    def to_json(self) -> dict[str, Any]:
        master = (
            None
            if self.master_broker_id is None
            else {
                "brokerId": self.master_broker_id,
                "pod": self.master_pod,
                "address": self.master_address,
            }
        )
        return {
            "namespace": self.namespace,
            "name": self.name,
            "replicas": self.replicas,
            "ready": self.ready,
            "master": master,
            "masterEpoch": self.master_epoch,
            "syncStateSet": list(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "brokers": [
                {
                    "pod": p.pod,
                    "brokerId": p.broker_id,
                    "address": p.address,
                    "role": p.role,
                    "alive": p.alive,
                    "inSyncStateSet": p.in_sync_state_set,
                    "ready": p.ready,
                    "maxOffset": p.max_offset,
                    "lag": p.lag,
                }
                for p in self.pods
            ],
            "conditions": [
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                for c in self.conditions
            ],
            "currentRevision": self.current_revision,
            "updateRevision": self.update_revision,
            "lastFailover": None if self.last_failover is None else dict(self.last_failover),
            "tls": None if self.tls is None else dict(self.tls),
        }


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def group_status(body: Mapping[str, Any]) -> GroupStatus:
    """The BrokerGroup object (as the API returns it) → the view's model."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    master = status.get("master") or {}
    master_id = _int(master.get("brokerId"))
    sync_state_set = tuple(sorted(int(x) for x in status.get("syncStateSet") or []))
    rows = [r for r in status.get("brokers") or [] if isinstance(r, Mapping)]
    master_max: int | None = None
    for row in rows:
        if master_id is not None and _int(row.get("brokerId")) == master_id:
            master_max = _int(row.get("maxOffset"))
    pods: list[PodRow] = []
    for row in rows:
        broker_id = _int(row.get("brokerId"))
        max_offset = _int(row.get("maxOffset"))
        is_master = broker_id is not None and broker_id == master_id
        pods.append(
            PodRow(
                pod=str(row.get("pod") or "-"),
                broker_id=broker_id,
                address=row.get("address"),
                role=str(row.get("role") or "-"),
                alive=_bool(row.get("alive")),
                in_sync_state_set=broker_id is not None and broker_id in sync_state_set,
                ready=_bool(row.get("ready")),
                max_offset=max_offset,
                lag=lag_bytes(master_max, max_offset, is_master),
            )
        )
    return GroupStatus(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        replicas=_int((body.get("spec") or {}).get("replicas")),
        ready=status.get("ready"),
        master_broker_id=master_id,
        master_pod=master.get("pod"),
        master_address=master.get("address"),
        master_epoch=_int(status.get("masterEpoch")),
        sync_state_set=sync_state_set,
        sync_state_set_epoch=_int(status.get("syncStateSetEpoch")),
        pods=tuple(pods),
        conditions=tuple(
            Condition(
                type=str(c.get("type") or ""),
                status=str(c.get("status") or ""),
                reason=str(c.get("reason") or ""),
                message=str(c.get("message") or ""),
            )
            for c in status.get("conditions") or []
            if isinstance(c, Mapping)
        ),
        current_revision=status.get("currentRevision") or None,
        update_revision=status.get("updateRevision") or None,
        last_failover=status.get("lastFailover") or None,
        tls=status.get("tls") if isinstance(status.get("tls"), Mapping) else None,
    )


def tls_line(tls: Mapping[str, Any], now: datetime.datetime) -> str:
    """The certificate's mode, issuer, Secret and expiry with the days left (and the
    cluster CA's), from the operator's record."""
    text = f"tls: {cell(tls.get('mode'))}, issuer {cell(tls.get('issuer'))}"
    if tls.get("secretName"):
        text += f", certificate {tls['secretName']}"
    for label, key in (("expires", "notAfter"), ("cluster CA expires", "caNotAfter")):
        if tls.get(key):
            text += f", {label} {tls[key]}{_days_left(str(tls[key]), now)}"
    if tls.get("issuer") == "secret":
        text += " (the user's own: expiry not known to the operator)"
    return text


def _days_left(moment: str, now: datetime.datetime) -> str:
    try:
        at = datetime.datetime.fromisoformat(moment.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if at.tzinfo is None:
        return ""
    days = (at - now).total_seconds() / 86400
    return f" (EXPIRED {-days:.0f} days ago)" if days < 0 else f" ({days:.0f} days left)"


def render_text(s: GroupStatus, now: datetime.datetime | None = None) -> str:
    where = f"{s.master_pod} ({s.master_address})" if s.master_pod else s.master_address
    lines = [f"BrokerGroup {s.namespace}/{s.name} · ready {cell(s.ready)}"]
    lines += group_lines(
        master_broker_id=s.master_broker_id,
        master_where=where,
        dead_master_broker_id=None,
        master_epoch=s.master_epoch,
        sync_state_set=s.sync_state_set,
        sync_state_set_epoch=s.sync_state_set_epoch,
    )
    if s.update_revision and s.current_revision != s.update_revision:
        lines.append(f"revision: {cell(s.current_revision)} → {s.update_revision}")
    if s.tls:
        lines.append(tls_line(s.tls, now or datetime.datetime.now(datetime.UTC)))
    if s.last_failover:
        f = s.last_failover
        lines.append(
            f"last failover: {cell(f.get('from'))} → {cell(f.get('to'))} at {cell(f.get('at'))}"
            f" ({cell(f.get('durationMs'))} ms)"
        )
    lines.append("")
    lines += table(
        ["POD", "ID", "ADDRESS", "ROLE", "ALIVE", "IN-SYNC", "READY", "MAXOFFSET", "LAG"],
        [
            [
                p.pod,
                cell(p.broker_id),
                cell(p.address),
                p.role,
                cell(p.alive),
                cell(p.in_sync_state_set),
                cell(p.ready),
                cell(p.max_offset),
                cell(p.lag),
            ]
            for p in s.pods
        ],
    )
    if s.conditions:
        lines.append("")
        lines += table(
            ["CONDITION", "STATUS", "REASON", "MESSAGE"],
            [[c.type, c.status, c.reason, c.message] for c in s.conditions],
        )
    return "\n".join(lines)
