"""Authentication of the official clients' requests (``[server] authentication = true``,
docs/security.md): every RPC carries a signature (server/auth/signature.py) by a known user, or
is refused with gRPC's ``UNAUTHENTICATED`` before it reaches the adapter.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from pocketmq.server.auth.signature import parse_authorization, signature_matches
from pocketmq.server.auth.users import UserStore
from pocketmq.server.ratelog import RateLimitedLog

__all__ = ["AuthInterceptor"]

log = RateLimitedLog(logging.getLogger("pocketmq.server.grpc"))


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call whose ``authorization`` header does not check out."""

    def __init__(self, users: UserStore) -> None:
        self._users = users

    def problem(self, metadata: dict[str, str]) -> str:
        """Why the call is refused ("" when it may go on)."""
        header = metadata.get("authorization", "")
        if not header:
            return "no authorization header: configure the client's access key and secret key"
        parsed = parse_authorization(header)
        if parsed is None:
            return "malformed authorization header"
        self._users.refresh()
        secret = self._users.secret(parsed.access_key)
        date_time = metadata.get("x-mq-date-time", "")
        if secret is None or not signature_matches(secret, date_time, parsed.signature):
            return f"access key {parsed.access_key!r} and signature do not match a user"
        return ""

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        """Check the call's metadata; a refused call gets a handler that only aborts."""
        handler = await continuation(handler_call_details)
        metadata = {k: v for k, v in (handler_call_details.invocation_metadata or ())}
        why = self.problem(metadata)
        if not why or handler is None:
            return handler
        log.warning("unauthenticated", "refused a gRPC call: %s", why)

        async def refuse(request: Any, context: Any) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

        async def refuse_stream(request: Any, context: Any) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
            yield  # pragma: no cover - abort raises

        kinds = {
            "unary_unary": grpc.unary_unary_rpc_method_handler,
            "unary_stream": grpc.unary_stream_rpc_method_handler,
            "stream_unary": grpc.stream_unary_rpc_method_handler,
            "stream_stream": grpc.stream_stream_rpc_method_handler,
        }
        for kind, build in kinds.items():
            if getattr(handler, kind, None) is not None:
                behaviour = refuse if kind.endswith("unary") else refuse_stream
                return build(
                    behaviour,
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler
