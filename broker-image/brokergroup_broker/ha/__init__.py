"""AutoSwitch HA replication (DESIGN.md §3.2; docs/ha.md "HA replication protocol").

- ``codec``: sans-I/O frames of both directions (bytes in, frozen dataclasses out).
- ``truncation``: the pure truncation-point decision taken at handshake.
- ``config``: ``HAConfig``, every bound and timeout of the services.
- ``master`` / ``slave``: the asyncio services that move bytes between stores.
"""

from brokergroup_broker.ha.codec import (
    NEED_DATA,
    HAConnectionState,
    HAProtocolError,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveFrameDecoder,
    SlaveHandshake,
    Transfer,
    WireEpochEntry,
)
from brokergroup_broker.ha.config import HAConfig
from brokergroup_broker.ha.master import HAMasterService
from brokergroup_broker.ha.master_connection import SlaveProgress
from brokergroup_broker.ha.slave import HASlaveService, ReplicationDiverged
from brokergroup_broker.ha.truncation import (
    TruncationPoint,
    TruncationReason,
    find_truncation_point,
)

__all__ = [
    "NEED_DATA",
    "HAConfig",
    "HAConnectionState",
    "HAMasterService",
    "HAProtocolError",
    "HASlaveService",
    "MasterFrameDecoder",
    "MasterHandshake",
    "ReplicationDiverged",
    "SlaveAck",
    "SlaveFrameDecoder",
    "SlaveHandshake",
    "SlaveProgress",
    "Transfer",
    "TruncationPoint",
    "TruncationReason",
    "WireEpochEntry",
    "find_truncation_point",
]
