"""The broker's gRPC port: `MessagingService` on grpcio's asyncio server, behind a signature
check that runs before the request message is decoded.

`SignatureCheck` is a server interceptor: it reads only the call's metadata (auth.py). A
call that is not signed by one of the group's pairs gets, instead of the service's handler,
one whose request deserializer does not parse the body and whose answer is the RPC's own
response with Status UNAUTHORIZED, as RocketMQ's proxy answers an AuthenticationException
(ResponseBuilder); nothing of the service runs.

When the broker stops being the master (`master_lost`), the port is closed and opened
again: every HTTP/2 connection to it ends, so an SDK that reached it through the group's
stable endpoint (a Service, the local forwarder) reconnects and lands on the new master,
as the remoting port closes its connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from brokergroup_broker.grpc_front import auth, convert
from brokergroup_broker.grpc_front.definitions import SERVICE_NAME, pb, service_grpc, service_pb
from brokergroup_broker.grpc_front.service import MessagingService
from brokergroup_broker.grpc_front.tls_front import GrpcTlsFront, private_socket_path
from brokergroup_remoting.tls import ServerTls, TlsMode

log = logging.getLogger(__name__)

#: A 4 MiB body (the proxy's maxMessageSize) with its properties fits.
MAX_MESSAGE_BYTES = 8 << 20
#: How long a deposed master's port lets calls in flight finish before it closes them.
MASTER_LOST_GRACE_S = 1.0

_METHODS = service_pb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name


def _refused(method: str, reason: str) -> grpc.RpcMethodHandler | None:
    """A handler that answers `method`'s response with Status UNAUTHORIZED and never decodes
    the request (None: not a method of the service; gRPC answers UNIMPLEMENTED)."""
    prefix = f"/{SERVICE_NAME}/"
    if not method.startswith(prefix) or method[len(prefix) :] not in _METHODS:
        return None
    described = _METHODS[method[len(prefix) :]]
    response_class = getattr(service_pb, described.output_type.name)
    answer = response_class(status=pb.Status(code=convert.UNAUTHORIZED, message=reason))
    serialize = response_class.SerializeToString

    def ignore(_raw: bytes) -> None:
        return None

    if described.server_streaming:

        async def stream(_request: Any, _context: Any) -> AsyncIterator[Any]:
            yield answer

        if described.client_streaming:
            return grpc.stream_stream_rpc_method_handler(
                stream, request_deserializer=ignore, response_serializer=serialize
            )
        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=ignore, response_serializer=serialize
        )

    async def unary(_request: Any, _context: Any) -> Any:
        return answer

    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=ignore, response_serializer=serialize
    )


class SignatureCheck(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(
        self,
        secret_for: Callable[[str], str | None],
        unknown_key_reason: Callable[[str], str | None] = lambda _key: None,
    ) -> None:
        self._secret_for = secret_for
        self._unknown_key_reason = unknown_key_reason
        #: Refusals answered (read by tests and the status page).
        self.refused = 0

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        metadata = {
            key: value for key, value in details.invocation_metadata or () if isinstance(value, str)
        }
        reason = auth.refusal(metadata, self._secret_for, self._unknown_key_reason)
        if reason is None:
            return await continuation(details)
        self.refused += 1
        log.info("gRPC %s refused: %s", details.method, reason)
        return _refused(details.method, reason)


class GrpcFrontServer:
    def __init__(
        self,
        service: MessagingService,
        check: SignatureCheck | None,
        *,
        tls: ServerTls | None = None,
        authorization: grpc.aio.ServerInterceptor | None = None,
    ) -> None:
        """`tls`: the port's TLS mode (permissive/enforcing: grpcio listens on a private
        Unix socket behind a `GrpcTlsFront` on the port, tls_front.py)."""
        self.service = service
        self.check = check
        #: After the signature check: a user's call authorized on its request (users.py).
        self.authorization = authorization
        self._server: grpc.aio.Server | None = None
        self._address = ""
        self.port = 0
        self._cycling: asyncio.Task[None] | None = None
        self._tls = tls if tls is not None and tls.mode is not TlsMode.DISABLED else None
        self.tls_front: GrpcTlsFront | None = None

    def _new_server(self) -> grpc.aio.Server:
        server = grpc.aio.server(
            interceptors=tuple(i for i in (self.check, self.authorization) if i is not None),
            options=(
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                # A port opened again after master_lost binds while the old one drains.
                ("grpc.so_reuseport", 1),
            ),
        )
        service_grpc.add_MessagingServiceServicer_to_server(self.service, server)
        return server

    async def start(self, host: str, port: int) -> None:
        self._server = self._new_server()
        if self._tls is not None:
            backend = private_socket_path()
            self._address = f"unix:{backend}"
            if self._server.add_insecure_port(self._address) == 0:
                raise OSError(f"gRPC backend socket {backend} could not be bound")
            await self._server.start()
            self.tls_front = GrpcTlsFront(self._tls, backend)
            self.tls_front.start(host, port)
            self.port = self.tls_front.port
            return
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"gRPC port {host}:{port} could not be bound")
        self._address = f"{host}:{self.port}"
        await self._server.start()

    def master_lost(self, reason: str) -> None:
        """Close the port and open it again (module doc); one cycle at a time."""
        if self._server is None or (self._cycling is not None and not self._cycling.done()):
            return
        log.info("gRPC: closing every connection: %s", reason)
        self._cycling = asyncio.ensure_future(self._cycle())

    async def _cycle(self) -> None:
        old = self._server
        assert old is not None
        await old.stop(MASTER_LOST_GRACE_S)
        if self._server is not old:
            return  # closed meanwhile
        server = self._new_server()
        if server.add_insecure_port(self._address) == 0:
            log.error("gRPC: %s could not be bound again", self._address)
            return
        await server.start()
        self._server = server

    async def close(self) -> None:
        if self._cycling is not None:
            self._cycling.cancel()
        front, self.tls_front = self.tls_front, None
        if front is not None:
            await front.close()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0.5)
