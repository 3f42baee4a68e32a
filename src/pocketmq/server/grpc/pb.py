"""The ``apache.rocketmq.v2`` protobuf and gRPC modules, from the official client's package.

The Apache RocketMQ Python client (``rocketmq-python-client``, a runtime dependency) ships the
generated modules; using them rather than copies of the ``.proto`` files keeps the adapter on
exactly the wire format the official clients speak. They are untyped, so they enter mypy as
``Any`` (see the overrides in ``pyproject.toml``): keep protobuf handling inside this package.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

__all__ = ["d", "rpc", "s"]
