"""The ``apache.rocketmq.v2`` protobuf and gRPC modules, from the official client's package.

The Apache RocketMQ Python client (``rocketmq-python-client``, a runtime dependency) ships the
generated modules; using them rather than copies of the ``.proto`` files keeps the adapter on
exactly the wire format the official clients speak. They are untyped, so they enter mypy as
``Any`` (see the overrides in ``pyproject.toml``): keep protobuf handling inside this package.

The enums are also offered as plain ints (``Code.OK``, ``MessageType.FIFO``, ...): reading a
value through protobuf's ``EnumTypeWrapper`` costs about a microsecond, and a send used to read a
dozen of them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

__all__ = [
    "AddressScheme",
    "ClientType",
    "Code",
    "DigestType",
    "Encoding",
    "FilterType",
    "MessageType",
    "Permission",
    "QueryOffsetPolicy",
    "TransactionResolution",
    "TransactionSource",
    "d",
    "rpc",
    "s",
]


def _ints(enum: Any) -> Any:
    return SimpleNamespace(**{value.name: value.number for value in enum.DESCRIPTOR.values})


AddressScheme = _ints(d.AddressScheme)
ClientType = _ints(d.ClientType)
Code = _ints(d.Code)
DigestType = _ints(d.DigestType)
Encoding = _ints(d.Encoding)
FilterType = _ints(d.FilterType)
MessageType = _ints(d.MessageType)
Permission = _ints(d.Permission)
QueryOffsetPolicy = _ints(d.QueryOffsetPolicy)
TransactionResolution = _ints(d.TransactionResolution)
TransactionSource = _ints(d.TransactionSource)
