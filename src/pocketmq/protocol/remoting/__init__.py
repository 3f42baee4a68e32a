"""RocketMQ's remoting protocol, sans-IO: the wire the 4.x-style clients (Java
``DefaultMQProducer``/``DefaultMQPushConsumer``, rocketmq-spring, Go, C++, ali-ons) speak to a
name server and to brokers (docs/remoting.md).

Like the native codec next to it, nothing here touches a socket: frames are decoded from bytes
fed in and encoded to bytes, messages, batches, routes and signatures are pure functions. It
imports nothing of the native protocol, so either wire format can change alone.
"""

from pocketmq.protocol.remoting.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from pocketmq.protocol.remoting.command import (
    RemotingCommand,
    encode_command,
    request_command,
    response_to,
)
from pocketmq.protocol.remoting.frames import (
    MAX_FRAME,
    MAX_HEADER,
    AbandonedFrame,
    RemotingFrameDecoder,
)
from pocketmq.protocol.remoting.sniff import SNIFF_SIZE, WireProtocol, sniff_protocol

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MAX_FRAME",
    "MAX_HEADER",
    "SNIFF_SIZE",
    "AbandonedFrame",
    "RemotingCommand",
    "RemotingFrameDecoder",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "WireProtocol",
    "encode_command",
    "request_command",
    "response_to",
    "sniff_protocol",
]
