"""The broker's gRPC front end: apache.rocketmq.v2.MessagingService for the RocketMQ 5 SDKs
over the same core as the remoting port (docs/grpc.md)."""

from brokergroup_broker.grpc_front.server import GrpcFrontServer
from brokergroup_broker.grpc_front.service import GrpcSettings, MessagingService

__all__ = ["GrpcFrontServer", "GrpcSettings", "MessagingService"]
