"""Reading a request's ext fields (RocketMQ's ``CommandCustomHeader``): text by name, numbers
as Java parses them (docs/remoting.md, "Request codes").

A missing required field or a number that does not parse is answered ``SYSTEM_ERROR`` naming
the field, as RocketMQ's ``decodeCommandCustomHeader`` failure is.
"""

from __future__ import annotations

from collections.abc import Mapping

from pocketmq.errors import BrokerError

__all__ = ["boolean", "integer", "optional_integer", "text"]


def text(fields: Mapping[str, str], name: str, default: str | None = None) -> str:
    """The field ``name``; absent, ``default`` (None: the field is required)."""
    value = fields.get(name)
    if value is None:
        if default is None:
            raise BrokerError(f"the request header lacks the field {name!r}")
        return default
    return value


def integer(fields: Mapping[str, str], name: str, default: int | None = None) -> int:
    """The field ``name`` as a Java ``int``/``long``; absent, ``default`` (None: required)."""
    value = fields.get(name)
    if value is None or value == "":
        if default is None:
            raise BrokerError(f"the request header lacks the field {name!r}")
        return default
    try:
        return int(value)
    except ValueError:
        raise BrokerError(f"the request header field {name!r} is not a number: {value!r}") from None


def optional_integer(fields: Mapping[str, str], name: str) -> int | None:
    """The field ``name`` as a number, or None when absent."""
    return None if fields.get(name) in (None, "") else integer(fields, name)


def boolean(fields: Mapping[str, str], name: str) -> bool:
    """The field ``name`` as Java's ``Boolean.parseBoolean`` reads it (absent: false)."""
    return fields.get(name, "").lower() == "true"
