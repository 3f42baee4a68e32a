"""pocketmq errors → ``apache.rocketmq.v2.Code`` statuses.

The official clients act on the status code, not the gRPC status: 400xx are bad requests (never
retried), 404xx "not found", ``TOO_MANY_REQUESTS`` is flow control (the Python client 5.1.2 hands
it straight to the caller), 500xx are retried at once on another queue. ``MESSAGE_NOT_FOUND`` is
treated as *success* by the clients (an empty receive), so a missing message anywhere else is
reported as ``NOT_FOUND``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

from pocketmq.contract import Rule
from pocketmq.errors import BrokerError, Code, InvalidArgumentError, ProtocolError
from pocketmq.server.grpc.pb import Code as V2Code
from pocketmq.server.grpc.pb import d
from pocketmq.server.ratelog import RateLimitedLog

__all__ = ["OK", "V2Error", "error_status", "overall", "status", "v2_code"]

log = logging.getLogger("pocketmq.server.grpc")
_internal = RateLimitedLog(log)  # a traceback per kind of failure per interval, not per request

C = V2Code

_BY_CODE: Final[dict[int, int]] = {  # values are ints at run time (protobuf enums)
    Code.SUCCESS: C.OK,
    Code.SYSTEM_ERROR: C.INTERNAL_SERVER_ERROR,
    Code.SYSTEM_BUSY: C.TOO_MANY_REQUESTS,
    Code.REQUEST_CODE_NOT_SUPPORTED: C.UNSUPPORTED,
    Code.FLUSH_DISK_TIMEOUT: C.MASTER_PERSISTENCE_TIMEOUT,
    Code.SLAVE_NOT_AVAILABLE: C.HA_NOT_AVAILABLE,
    Code.FLUSH_SLAVE_TIMEOUT: C.SLAVE_PERSISTENCE_TIMEOUT,
    Code.MESSAGE_ILLEGAL: C.BAD_REQUEST,
    Code.SERVICE_NOT_AVAILABLE: C.INTERNAL_SERVER_ERROR,
    Code.NO_MASTER: C.INTERNAL_SERVER_ERROR,  # official clients retry it
    Code.NO_PERMISSION: C.FORBIDDEN,
    Code.TOPIC_NOT_EXIST: C.TOPIC_NOT_FOUND,
    Code.MESSAGE_TOO_LARGE: C.MESSAGE_BODY_TOO_LARGE,
    Code.NO_MESSAGE: C.MESSAGE_NOT_FOUND,
    Code.SUBSCRIPTION_GROUP_NOT_EXIST: C.CONSUMER_GROUP_NOT_FOUND,
    Code.STORAGE_FULL: C.INTERNAL_SERVER_ERROR,
    Code.STORAGE_FAILED: C.INTERNAL_SERVER_ERROR,
    Code.PROTOCOL_ERROR: C.BAD_REQUEST,
    Code.INVALID_RECEIPT_HANDLE: C.INVALID_RECEIPT_HANDLE,
    Code.MESSAGE_NOT_FOUND: C.NOT_FOUND,
    Code.TRANSACTION_STATE: C.INVALID_TRANSACTION_ID,
    Code.TOO_MANY_REQUESTS: C.TOO_MANY_REQUESTS,
    Code.PRECONDITION_FAILED: C.PRECONDITION_FAILED,
}


class V2Error(Exception):
    """A request the adapter itself rejects, with the exact v2 code to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_BY_RULE: Final[dict[str, int]] = {
    Rule.TOPIC.value: C.ILLEGAL_TOPIC,
    Rule.BODY_EMPTY.value: C.MESSAGE_BODY_EMPTY,
    Rule.BODY_TOO_LARGE.value: C.MESSAGE_BODY_TOO_LARGE,
    Rule.TAG.value: C.ILLEGAL_MESSAGE_TAG,
    Rule.KEY.value: C.ILLEGAL_MESSAGE_KEY,
    Rule.PROPERTY.value: C.ILLEGAL_MESSAGE_PROPERTY_KEY,
    Rule.DELIVERY_TIME.value: C.ILLEGAL_DELIVERY_TIME,
    Rule.MESSAGE_TYPE.value: C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    Rule.FIELD_RANGE.value: C.BAD_REQUEST,
}
"""RocketMQ's own code for each rule of the send contract (what its proxy answers)."""


def v2_code(code: int, rule: str = "") -> int:
    """The v2 code for a pocketmq wire code (and the send-contract rule broken, if any)."""
    if rule:
        by_rule = _BY_RULE.get(rule)
        if by_rule is not None:
            return by_rule
    return _BY_CODE.get(code, int(C.INTERNAL_SERVER_ERROR))


def status(code: int, message: str = "") -> Any:
    """A v2 ``Status``; the message defaults to the code's name, so no status goes out without a
    text."""
    return d.Status(code=code, message=message or d.Code.Name(code))


OK: Final = status(C.OK, "OK")


def error_status(exc: BaseException, what: str) -> Any:
    """The status for an exception raised while serving ``what`` (an RPC name)."""
    if isinstance(exc, V2Error):
        return status(exc.code, exc.message)
    if isinstance(exc, BrokerError):
        return status(v2_code(exc.wire_code, getattr(exc, "rule", "")), exc.remark or str(exc))
    if isinstance(exc, (InvalidArgumentError, ProtocolError)):  # one this process found
        return status(C.BAD_REQUEST, str(exc))
    _internal.error(f"internal-{what}", "gRPC %s failed", what, exc_info=exc)  # a bug: once
    return status(C.INTERNAL_SERVER_ERROR, f"{what} failed: {type(exc).__name__}: {exc}")


def overall(statuses: Sequence[Any]) -> Any:
    """The top-level status of a batch: its one status, or MULTIPLE_RESULTS when they differ."""
    codes = {st.code for st in statuses}
    if len(codes) == 1:
        return statuses[0]
    return status(C.MULTIPLE_RESULTS, "entries ended differently; see each entry")
