"""Users on the gRPC port (docs/security.md "Users with rights"): the same ACL 2.0 decision as
the remoting port, on the decoded request.

`UserAuthorization` is a server interceptor placed after `server.SignatureCheck` (which has
verified the signature against the group's pairs and the cluster's users before anything was
decoded). For a call signed by a user it wraps the service's handler: the request message is
decoded by the handler's own deserializer, its needs are those of RocketMQ 5.3's
DefaultAuthorizationContextBuilder for gRPC (`needs_of_message`), and a refused call is
answered with the RPC's own response carrying Status FORBIDDEN and RocketMQ's remark, as the
proxy answers an AuthorizationException; the service never sees it. Calls signed by a group
pair pass untouched. Telemetry (a stream of commands) is checked command by command: a
SETTINGS command needs Pub on its publishing topics and Sub on its subscription group and
topics; a refused one ends the stream with the refusal.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import grpc

from brokergroup_broker.grpc_front import auth, convert
from brokergroup_broker.grpc_front.definitions import SERVICE_NAME, pb, service_pb
from brokergroup_remoting.authorization import (
    Action,
    Need,
    Resource,
    User,
    authorize,
    refusal_remark,
)

log = logging.getLogger(__name__)

_METHODS = service_pb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name
_PUB = frozenset({Action.PUB})
_SUB = frozenset({Action.SUB})
_CONSUMERS = ("PUSH_CONSUMER", "SIMPLE_CONSUMER", "PULL_CONSUMER")


class UsersLookup(Protocol):
    """The cluster's users as this broker knows them (core/users.py BrokerUsers): the front
    end sees only the lookup, so it does not import the core that composes it."""

    def get(self, access_key: str) -> User | None: ...


def _sub(group: Any, topic: Any | None = None) -> list[Need]:
    needs = [Need(Resource.group(group.name), _SUB)]
    if topic is not None:
        needs.append(Need(Resource.topic(topic.name), _SUB))
    return needs


def needs_of_message(method: str, request: Any) -> list[Need]:
    """What a decoded request of `method` needs (DefaultAuthorizationContextBuilder, gRPC)."""
    if method == "SendMessage":
        return (
            [Need(Resource.topic(request.messages[0].topic.name), _PUB)] if request.messages else []
        )
    if method == "EndTransaction":
        return [Need(Resource.topic(request.topic.name), _PUB)]
    if method == "Heartbeat":
        client_type = pb.ClientType.Name(request.client_type)
        return _sub(request.group) if client_type in _CONSUMERS else []
    if method == "ReceiveMessage":
        return _sub(request.group, request.message_queue.topic)
    if method in ("AckMessage", "ForwardMessageToDeadLetterQueue", "QueryAssignment"):
        return _sub(request.group, request.topic)
    if method in ("NotifyClientTermination", "ChangeInvisibleDuration"):
        return _sub(request.group) if request.group.name else []
    if method == "QueryRoute":
        return [Need(Resource.topic(request.topic.name), frozenset({Action.PUB, Action.SUB}))]
    if method == "Telemetry" and request.WhichOneof("command") == "settings":
        settings, needs = request.settings, []
        if settings.HasField("publishing"):
            needs += [Need(Resource.topic(t.name), _PUB) for t in settings.publishing.topics]
        if settings.HasField("subscription"):
            sub = settings.subscription
            needs += [Need(Resource.group(sub.group.name), _SUB)]
            needs += [Need(Resource.topic(e.topic.name), _SUB) for e in sub.subscriptions]
        return needs
    return []


class UserAuthorization(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, users: UsersLookup, is_pair: Callable[[str], bool]) -> None:
        self._users = users
        self._is_pair = is_pair
        #: Calls refused (read by tests).
        self.refused = 0

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        prefix = f"/{SERVICE_NAME}/"
        if handler is None or not details.method.startswith(prefix):
            return handler
        metadata = {
            key: value for key, value in details.invocation_metadata or () if isinstance(value, str)
        }
        signed = auth.parse(metadata)
        if isinstance(signed, str) or self._is_pair(signed.access_key):
            return handler
        access_key = signed.access_key
        name = details.method[len(prefix) :]
        described = _METHODS[name]
        response_class = getattr(service_pb, described.output_type.name)

        def refusal(request: Any, context: Any) -> Any | None:
            source_ip = peer_ip(context.peer())
            user = self._users.get(access_key)
            if user is None:
                return response_class(
                    status=pb.Status(
                        code=convert.FORBIDDEN, message=f"User:{access_key} not found."
                    )
                )
            verdict = authorize(user, needs_of_message(name, request), source_ip)
            if verdict.allowed:
                return None
            self.refused += 1
            remark = refusal_remark(access_key, verdict, source_ip)
            log.info("gRPC %s of %s refused: %s", name, access_key, remark)
            return response_class(status=pb.Status(code=convert.FORBIDDEN, message=remark))

        if handler.unary_unary is not None:
            inner_unary = handler.unary_unary

            async def unary(request: Any, context: Any) -> Any:
                refused = refusal(request, context)
                return refused if refused is not None else await inner_unary(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
                refused = refusal(request, context)
                if refused is not None:
                    yield refused
                    return
                async for answer in inner_stream(request, context):
                    yield answer

            return grpc.unary_stream_rpc_method_handler(
                stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            inner_bidi = handler.stream_stream

            async def bidi(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
                refused_command: list[Any] = []

                async def checked() -> AsyncIterator[Any]:
                    async for command in requests:
                        refused = refusal(command, context)
                        if refused is not None:
                            refused_command.append(refused)
                            return
                        yield command

                async for answer in inner_bidi(checked(), context):
                    yield answer
                if refused_command:
                    yield refused_command[0]

            return grpc.stream_stream_rpc_method_handler(
                bidi,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


def peer_ip(peer: str | None) -> str | None:
    """The IP of grpcio's peer string (`ipv4:127.0.0.1:5000`, `ipv6:[::1]:5000`), or None."""
    if not peer:
        return None
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return None
