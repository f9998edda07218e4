"""The mutable state of one broker process, declared once for `Broker` and its
mixins (`RoleTransitions`, `ReplicationWiring`, `RequestHandling`): the
mixins' methods assign these, `Broker.__init__` gives them their first values."""

from __future__ import annotations

import asyncio

from brokergroup_broker.core import register_state as rs
from brokergroup_broker.core import role as roles
from brokergroup_broker.core.sync_state import SyncStateSetManager
from brokergroup_broker.ha import HAMasterService, HASlaveService


class BrokerState:
    register_state: rs.RegisterState
    role: roles.RoleState
    sync: SyncStateSetManager | None
    ha_master: HAMasterService | None
    ha_slave: HASlaveService | None
    _ha_slave_task: asyncio.Task[None] | None
    _accepting_writes: bool
    _confirm_offset: int  # master: SyncStateSet confirmOffset; slave: from the master
    _takeover_hold_until_ms: int
    _last_election_request_ms: int
    _last_store_error: str | None
