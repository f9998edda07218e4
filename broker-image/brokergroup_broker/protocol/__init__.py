"""Client protocol of the broker (DESIGN.md §3.5, docs/protocol.md).

- `messages`: frozen request/response values, `ResponseCode`, `BrokerError`.
- `codec`: sans-I/O framing and body layouts (bytes in, typed values out).
- `handler`: the `RequestHandler` protocol the broker core implements.
- `server`: asyncio server that drives the codec and calls the handler.
- `discovery`: where the master is (controller or static addresses).
- `client`: `BrokerConnection`, `Producer`, `Consumer`.
- `commands`: `brokergroup produce` / `consume` (registered by `brokergroup_broker.cli`).
"""

from brokergroup_broker.protocol.codec import ProtocolError
from brokergroup_broker.protocol.handler import RequestHandler
from brokergroup_broker.protocol.messages import (
    BrokerError,
    ProduceMessage,
    PulledMessage,
    PullResult,
    ResponseCode,
    SendResult,
    SentMessage,
)

__all__ = [
    "BrokerError",
    "ProduceMessage",
    "ProtocolError",
    "PullResult",
    "PulledMessage",
    "RequestHandler",
    "ResponseCode",
    "SendResult",
    "SentMessage",
]
