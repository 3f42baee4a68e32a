"""The gRPC method table of ``MessagingService``, tolerant of requests that do not decode.

The generated ``add_MessagingServiceServicer_to_server`` parses each request with protobuf's
``FromString``; bytes that do not parse (or hold invalid UTF-8 in a string field) raise inside
grpc, which logs a traceback per request and answers ``UNKNOWN``. Here a request that does not
parse becomes a :class:`Malformed` value: unary and server-streaming calls are answered
``INVALID_ARGUMENT`` naming the problem, a malformed ``TelemetryCommand`` gets a ``BAD_REQUEST``
status on its stream, and the broker logs one line per interval (docs/grpc.md "Errors").
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import grpc

from pocketmq.server.grpc.pb import d, s
from pocketmq.server.ratelog import RateLimitedLog
from pocketmq.server.rpcstats import RpcLatency

__all__ = ["SERVICE", "Malformed", "messaging_handler"]

log = logging.getLogger("pocketmq.server.grpc")
_bad_requests = RateLimitedLog(log)

SERVICE: Final = "apache.rocketmq.v2.MessagingService"


class Malformed:
    """A request whose bytes did not parse as the method's request message."""

    __slots__ = ("method", "reason")

    def __init__(self, method: str, reason: str) -> None:
        self.method = method
        self.reason = reason

    def report(self, peer: str) -> str:
        """The detail to answer with (and to log, at most once per interval)."""
        detail = f"the {self.method} request does not decode: {self.reason}"
        _bad_requests.warning(f"malformed-{self.method}", "%s (from %s)", detail, peer)
        return detail


def _lenient(method: str, parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(raw: bytes) -> Any:
        try:
            return parse(raw)
        except Exception as exc:  # protobuf's DecodeError, or anything its parser raises
            return Malformed(method, str(exc) or type(exc).__name__)

    return deserialize


def _status_name(response: Any) -> str:
    """The RocketMQ status code a response carries, by name (``OK``, ``FORBIDDEN``, ...)."""
    try:
        return str(d.Code.Name(response.status.code))
    except (AttributeError, ValueError):
        return "UNKNOWN"


def _unary(
    implementation: Callable[[Any, Any], Awaitable[Any]], name: str, latency: RpcLatency | None
) -> Callable[..., Any]:
    async def handle(request: Any, context: Any) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.report(context.peer()))
        started = time.perf_counter()
        response = await implementation(request, context)
        if latency is not None:
            latency.observe("grpc", name, _status_name(response), time.perf_counter() - started)
        return response

    return handle


def _server_streaming(
    implementation: Callable[[Any, Any], AsyncIterator[Any]], name: str, latency: RpcLatency | None
) -> Any:
    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.report(context.peer()))
        started = time.perf_counter()
        code = ""
        async for response in implementation(request, context):
            if not code and response.HasField("status"):
                code = _status_name(response)
            yield response
        if latency is not None:  # a long poll counts its wait, as on the native port
            latency.observe("grpc", name, code or "OK", time.perf_counter() - started)

    return handle


def messaging_handler(servicer: Any, latency: RpcLatency | None = None) -> grpc.GenericRpcHandler:
    """Every method of the service, bound to ``servicer``'s coroutine of the same name; each
    answer's time goes into ``latency`` (``rocketmq_rpc_latency``, protocol ``grpc``)."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in s.DESCRIPTOR.services_by_name["MessagingService"].methods:
        parse = _lenient(method.name, getattr(s, method.input_type.name).FromString)
        serialize = getattr(s, method.output_type.name).SerializeToString
        implementation = getattr(servicer, method.name)
        if method.client_streaming:  # Telemetry: it answers a Malformed command itself
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                implementation, request_deserializer=parse, response_serializer=serialize
            )
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _server_streaming(implementation, method.name, latency),
                request_deserializer=parse,
                response_serializer=serialize,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(implementation, method.name, latency),
                request_deserializer=parse,
                response_serializer=serialize,
            )
    return grpc.method_handlers_generic_handler(SERVICE, handlers)
