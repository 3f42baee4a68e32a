"""Who a client is, as every protocol adapter describes it to the broker."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClientInfo"]


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who a consumer is, for operators (the dashboard's group page, ``group status``): the
    protocol it speaks, its language and client version, and where it connects from."""

    protocol: str = "native"
    language: str = ""
    version: str = ""
    address: str = ""
