"""A request's named arguments, read from its ext fields (docs/remoting.md, "Request codes").

RocketMQ decodes a request's ``CommandCustomHeader`` from the ext fields and refuses a missing
required field, or a number that does not parse, before the processor runs
(``RemotingCommand.decodeCommandCustomHeader``): the client gets ``SYSTEM_ERROR`` naming the
field. These readers raise the same, as a :class:`HeaderFieldError` the connection answers with
that code. JSON clients' numbers and booleans arrive already as Java's text (``"1"``,
``"true"``).
"""

from __future__ import annotations

from pocketmq.errors import BrokerError
from pocketmq.protocol.remoting.command import RemotingCommand

__all__ = ["HeaderFieldError", "flag", "number", "optional_number", "text"]


class HeaderFieldError(BrokerError):
    """A required header field is missing or does not parse (answered ``SYSTEM_ERROR``)."""


def text(request: RemotingCommand, name: str) -> str:
    """The required field ``name``."""
    value = request.ext_fields.get(name)
    if value is None:
        raise HeaderFieldError(f"the request header has no field {name!r}")
    return value


def number(request: RemotingCommand, name: str) -> int:
    """The required integer field ``name``."""
    return _parse(name, text(request, name))


def optional_number(request: RemotingCommand, name: str, default: int) -> int:
    """The integer field ``name``, or ``default`` when it is absent or empty."""
    value = request.ext_fields.get(name)
    return default if value is None or value == "" else _parse(name, value)


def flag(request: RemotingCommand, name: str) -> bool:
    """The boolean field ``name`` (Java's ``Boolean.parseBoolean``: only "true" is true)."""
    return request.ext_fields.get(name, "").lower() == "true"


def _parse(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise HeaderFieldError(
            f"the header field {name!r} is not a number: {value[:40]!r}"
        ) from None
