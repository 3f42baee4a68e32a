"""Errors of the reliability toolkit, as one branch of the pocketmq exception tree.

Why a branch of its own: the toolkit sits beside the SDK, and callers that wrap a whole outbox
or consumer set-up want one ``except ReliabilityError`` for "the bookkeeping failed" while still
being able to catch :class:`~pocketmq.errors.PocketMQError` for everything pocketmq raises::

    PocketMQError
    └── ReliabilityError
        ├── StubNotFoundError        no stub has this message id
        ├── StubStateError           the stub's status forbids the operation
        └── DuplicateMessageIdError  a stub with this message id already exists

Database driver errors (SQLAlchemy's) are not wrapped: they mean the database failed, and the
consumer wrapper already turns any exception into ``RECONSUME_LATER``.
"""

from __future__ import annotations

from pocketmq.errors import PocketMQError

__all__ = [
    "DuplicateMessageIdError",
    "ReliabilityError",
    "StubNotFoundError",
    "StubStateError",
]


class ReliabilityError(PocketMQError):
    """Root of the reliability toolkit's own errors."""


class StubNotFoundError(ReliabilityError, LookupError):
    """No message stub has this message id (also a ``LookupError``, for generic handlers)."""

    def __init__(self, message_id: str) -> None:
        super().__init__(f"no message stub with id {message_id!r}")
        self.message_id = message_id


class StubStateError(ReliabilityError):
    """The stub is in a status that does not allow the requested operation."""

    def __init__(self, message_id: str, status: str, operation: str) -> None:
        super().__init__(f"cannot {operation} stub {message_id!r}: its status is {status}")
        self.message_id = message_id
        self.status = status
        self.operation = operation


class DuplicateMessageIdError(ReliabilityError):
    """A stub with one of these message ids already exists; the transaction was rolled back."""

    def __init__(self, message_ids: tuple[str, ...]) -> None:
        super().__init__(f"message stub already exists: {', '.join(message_ids)}")
        self.message_ids = message_ids
