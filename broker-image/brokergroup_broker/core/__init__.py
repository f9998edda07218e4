"""The broker's core: the pure state machines that decide, and the process that acts.

Pure (no I/O, no clock; DESIGN.md §1, STYLE.md §1):
- `register_state`: persistent BrokerId negotiation (§3.4, persistent-broker-id seed).
- `role`: master/slave/fenced/acting-master decisions from controller answers (§3.4, §3.6).
- `sync_state`: the master's SyncStateSet shrink/expand and confirmOffset (§3.3).
- `commit_rule`: when a produce is acknowledged, refused or timed out (§3.3).
- `lease`: master lease fencing (§3.3).
- `config`: the typed, validated `BrokerConfig`.

I/O shell: `broker` (the asyncio process: store, HA, controller client,
client protocol, HTTP status) and `cli` (`brokergroup broker …`). They are
not imported here, so the pure parts load without the I/O stack.
"""

from brokergroup_broker.core.commit_rule import (
    AckOutcome,
    AckWaiters,
    CommitRuleConfig,
    ReplicationView,
)
from brokergroup_broker.core.config import BrokerConfig, BrokerConfigError, load_broker_config
from brokergroup_broker.core.lease import MasterLease, validate_lease
from brokergroup_broker.core.register_state import RegisterMachine, RegisterState
from brokergroup_broker.core.role import GroupView, Role, RoleState
from brokergroup_broker.core.sync_state import (
    AlterProposal,
    ReplicaProgress,
    SyncStateSetManager,
)

__all__ = [
    "AckOutcome",
    "AckWaiters",
    "AlterProposal",
    "BrokerConfig",
    "BrokerConfigError",
    "CommitRuleConfig",
    "GroupView",
    "MasterLease",
    "RegisterMachine",
    "RegisterState",
    "ReplicaProgress",
    "ReplicationView",
    "Role",
    "RoleState",
    "SyncStateSetManager",
    "load_broker_config",
    "validate_lease",
]
