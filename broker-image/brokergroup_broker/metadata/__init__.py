"""The broker's metadata: topic configurations and subscription groups (RocketMQ's
TopicConfigManager and SubscriptionGroupManager), kept crash-safely and replicated to the
slaves, so a new master has them (docs/reliability.md "Metadata across failover").

- `configs`: TopicConfig and SubscriptionGroupConfig as RocketMQ serializes them;
  `attributes`: the `+k=v,-k` modifications and the keys RocketMQ knows;
- `request_modes`: each (topic, group)'s message request mode, PULL or POP
  (MessageRequestModeManager);
- `version`: DataVersion; `tables`: the pure, bounded, versioned tables and the rules
  between replicas (sync from the master, merge a newer peer's, adopt store topics);
- `files`: the crash-safe file writes; `store`: `BrokerMetadata`, the shell the broker
  holds (compute, write durably, then install).
"""

from .configs import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SubscriptionGroupConfig,
    TopicConfig,
)
from .errors import BadMetadata, MetadataError, MetadataFull, MetadataWriteFailed
from .request_modes import MessageRequestMode, RequestMode, RequestModeTable
from .store import BrokerMetadata
from .tables import GroupTable, MetadataBounds, TopicTable
from .version import DataVersion

__all__ = [
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "BadMetadata",
    "BrokerMetadata",
    "DataVersion",
    "GroupTable",
    "MessageRequestMode",
    "MetadataBounds",
    "MetadataError",
    "MetadataFull",
    "MetadataWriteFailed",
    "RequestMode",
    "RequestModeTable",
    "SubscriptionGroupConfig",
    "TopicConfig",
    "TopicTable",
]
