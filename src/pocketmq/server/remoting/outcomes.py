"""What a remoting handler answers, and the remoting response code of each pocketmq outcome
(docs/remoting.md, "Response codes").

A handler returns a :class:`Reply` — code, ext fields, body, remark — and the connection makes
it the response to its request (the request's ``opaque`` and header serialization), so no
handler can answer the wrong request. A handler that raises a pocketmq error is answered with
the code RocketMQ's clients act on for it: the native codes equal RocketMQ's up to 17 and differ
above (``TOO_MANY_REQUESTS`` is 530 natively, ``SYSTEM_BUSY`` here).
"""

from __future__ import annotations

from typing import Final, NamedTuple

from pocketmq.errors import BrokerError, Code, PocketMQError, ProtocolError
from pocketmq.protocol.remoting.codes import ResponseCode
from pocketmq.server.serving import JOIN_LIMIT, Joined  # a remoting run returns Replies

__all__ = ["JOIN_LIMIT", "Joined", "Reply", "code_of", "response_code"]


class Reply(NamedTuple):
    """A handler's answer: the response's code (``ResponseCode``, ``SUCCESS`` by default), its
    ext fields (strings, as fastjson writes them), body and remark (an error's text)."""

    code: int = ResponseCode.SUCCESS
    ext_fields: dict[str, str] | None = None
    body: bytes = b""
    remark: str | None = None


_R = ResponseCode
_BY_NATIVE_CODE: Final[dict[int, int]] = {
    Code.SUCCESS: _R.SUCCESS,
    Code.SYSTEM_ERROR: _R.SYSTEM_ERROR,
    Code.STORAGE_FAILED: _R.SYSTEM_ERROR,
    Code.SYSTEM_BUSY: _R.SYSTEM_BUSY,
    Code.TOO_MANY_REQUESTS: _R.SYSTEM_BUSY,  # flow control (seed 004): the client backs off
    Code.REQUEST_CODE_NOT_SUPPORTED: _R.REQUEST_CODE_NOT_SUPPORTED,
    Code.FLUSH_DISK_TIMEOUT: _R.FLUSH_DISK_TIMEOUT,
    Code.SLAVE_NOT_AVAILABLE: _R.SLAVE_NOT_AVAILABLE,
    Code.FLUSH_SLAVE_TIMEOUT: _R.FLUSH_SLAVE_TIMEOUT,
    Code.MESSAGE_ILLEGAL: _R.MESSAGE_ILLEGAL,
    Code.MESSAGE_TOO_LARGE: _R.MESSAGE_ILLEGAL,
    Code.PROTOCOL_ERROR: _R.MESSAGE_ILLEGAL,
    Code.SERVICE_NOT_AVAILABLE: _R.SERVICE_NOT_AVAILABLE,
    Code.NO_MASTER: _R.SERVICE_NOT_AVAILABLE,
    Code.STORAGE_FULL: _R.SERVICE_NOT_AVAILABLE,
    Code.NO_PERMISSION: _R.NO_PERMISSION,
    Code.TOPIC_NOT_EXIST: _R.TOPIC_NOT_EXIST,
    Code.NO_MESSAGE: _R.QUERY_NOT_FOUND,
    Code.MESSAGE_NOT_FOUND: _R.QUERY_NOT_FOUND,
    Code.SUBSCRIPTION_GROUP_NOT_EXIST: _R.SUBSCRIPTION_GROUP_NOT_EXIST,
    Code.TRANSACTION_STATE: _R.TRANSACTION_FAILED,
    Code.INVALID_RECEIPT_HANDLE: _R.INVALID_PARAMETER,
    Code.PRECONDITION_FAILED: _R.SYSTEM_ERROR,
}


def code_of(native: int) -> int:
    """The remoting response code of a native wire code (a send outcome's, table above)."""
    return _BY_NATIVE_CODE.get(native, _R.SYSTEM_ERROR)


def response_code(exc: PocketMQError) -> int:
    """The remoting response code for an error a handler raised: a broker error by its wire
    code (table above; one without a RocketMQ twin is ``SYSTEM_ERROR``), an argument the shared
    validation refused (``InvalidArgumentError`` and other client-side errors) is
    ``MESSAGE_ILLEGAL``, as on the native port."""
    if isinstance(exc, (BrokerError, ProtocolError)):
        return _BY_NATIVE_CODE.get(exc.wire_code, _R.SYSTEM_ERROR)
    return int(_R.MESSAGE_ILLEGAL)
