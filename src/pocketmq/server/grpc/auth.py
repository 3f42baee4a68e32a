"""Authentication of the official clients' requests (``[server] authentication = true``,
docs/security.md): every RPC carries a signature (server/auth/signature.py) by a known user, or
is refused with gRPC's ``UNAUTHENTICATED`` before it reaches the adapter. With authorization on,
each request is then checked against the ACL (server/grpc/permissions.py) and refused with
``PERMISSION_DENIED`` when the user may not do it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from pocketmq.errors import NoPermissionError
from pocketmq.server.auth.authorizer import Authorizer
from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.auth.signature import parse_authorization, signature_matches
from pocketmq.server.auth.users import UserStore
from pocketmq.server.grpc.handlers import Malformed
from pocketmq.server.grpc.permissions import needs
from pocketmq.server.ratelog import RateLimitedLog

__all__ = ["AuthInterceptor"]

log = RateLimitedLog(logging.getLogger("pocketmq.server.grpc"))


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call whose ``authorization`` header does not check out."""

    def __init__(
        self,
        users: UserStore,
        authorizer: Authorizer | None = None,
        real_peer: Callable[[str], str] = str,
    ) -> None:
        self._users = users
        self._authorizer = authorizer
        self._real_peer = real_peer  # the client behind the permissive-mode forwarder

    def problem(self, metadata: dict[str, str]) -> str:
        """Why the call is refused ("" when it may go on)."""
        return self._authenticate(metadata)[1]

    def _authenticate(self, metadata: dict[str, str]) -> tuple[str, str]:
        """(the access key, "") for a good signature, ("", why) otherwise."""
        header = metadata.get("authorization", "")
        if not header:
            return "", "no authorization header: configure the client's access key and secret key"
        parsed = parse_authorization(header)
        if parsed is None:
            return "", "malformed authorization header"
        self._users.refresh()
        secret = self._users.secret(parsed.access_key)
        date_time = metadata.get("x-mq-date-time", "")
        if secret is None or not signature_matches(secret, date_time, parsed.signature):
            return "", f"access key {parsed.access_key!r} and signature do not match a user"
        return parsed.access_key, ""

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        """Check the call's metadata; a refused call gets a handler that only aborts."""
        handler = await continuation(handler_call_details)
        metadata = {k: v for k, v in (handler_call_details.invocation_metadata or ())}
        user, why = self._authenticate(metadata)
        if handler is None:
            return handler
        if not why:
            if self._authorizer is None:
                return handler
            return self._authorizing(handler, handler_call_details.method, user)
        count_failure("grpc", "unauthenticated")
        log.warning("unauthenticated", "refused a gRPC call: %s", why)

        async def refuse(request: Any, context: Any) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

        async def refuse_stream(request: Any, context: Any) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
            yield  # pragma: no cover - abort raises

        for kind, build in _KINDS.items():
            if getattr(handler, kind, None) is not None:
                behaviour = refuse if kind.endswith("unary") else refuse_stream
                return build(
                    behaviour,
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler

    def _authorizing(self, handler: Any, method: str, user: str) -> Any:
        """``handler`` with the ACL check of its request first (calls with one request: every
        RPC but the Telemetry stream, which names no resource)."""
        authorizer = self._authorizer
        assert authorizer is not None

        async def denied(request: Any, context: Any) -> str:
            if isinstance(request, Malformed):
                return ""  # refused as INVALID_ARGUMENT by the handler itself
            peer = self._real_peer(str(context.peer() or ""))
            source = peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer
            try:
                wanted = needs(method, request)
            except Exception as exc:  # a request shape the table does not know: refuse, say why
                log.warning("unreadable", "cannot tell what a %s call needs: %r", method, exc)
                return f"cannot tell what this {method.rsplit('/', 1)[-1]} call needs: {exc!r}"
            try:
                authorizer.check(user, wanted, source)
            except NoPermissionError as exc:
                count_failure("grpc", "forbidden")
                log.warning("forbidden", "refused a gRPC call of %r: %s", user, exc)
                return str(exc)
            return ""

        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary(request: Any, context: Any) -> Any:
                why = await denied(request, context)
                if why:
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            async def streaming(request: Any, context: Any) -> Any:
                why = await denied(request, context)
                if why:
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
                async for item in inner_stream(request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(
                streaming,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


_KINDS = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}
