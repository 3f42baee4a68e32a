"""The numbers of RocketMQ's remoting protocol: request and response codes, header flags, header
serialization types, client languages and versions (docs/remoting.md).

The values are RocketMQ's own, read in apache/rocketmq ``remoting/.../protocol/RequestCode.java``,
``ResponseCode.java``, ``RemotingSysResponseCode.java``, ``SerializeType.java``,
``LanguageCode.java`` and ``common/.../MQVersion.java``; only the codes pocketmq answers, sends
or must recognise are listed.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "LANGUAGES",
    "LANGUAGE_CODES",
    "VERSION_V4_9_3",
    "VERSION_V4_9_4",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
]

#: ``flag`` bit 0: the command is a response (``RemotingCommand.RPC_TYPE``).
FLAG_RESPONSE: Final = 1
#: ``flag`` bit 1: the request expects no response (``RemotingCommand.RPC_ONEWAY``).
FLAG_ONEWAY: Final = 2

#: ``MQVersion.Version`` ordinals a server must compare a request's ``version`` with: from
#: 4.9.4 on, clients accept (and the name server sends) strictly standard route JSON, and the
#: ACL signature covers the ``_UNIQUE_KEY_QUERY`` field (docs/remoting.md, "Versions").
VERSION_V4_9_3: Final = 399
VERSION_V4_9_4: Final = 401


class SerializeType(enum.IntEnum):
    """How a command's header is serialized: the high byte of the frame's header-length field."""

    JSON = 0
    ROCKETMQ = 1


#: ``LanguageCode``: the JSON header names a client's language, the binary header numbers it.
LANGUAGE_CODES: Final[dict[str, int]] = {
    "JAVA": 0,
    "CPP": 1,
    "DOTNET": 2,
    "PYTHON": 3,
    "DELPHI": 4,
    "ERLANG": 5,
    "RUBY": 6,
    "OTHER": 7,
    "HTTP": 8,
    "GO": 9,
    "PHP": 10,
    "OMS": 11,
    "RUST": 12,
    "NODE_JS": 13,
}
#: The language name of each binary code (the inverse of :data:`LANGUAGE_CODES`).
LANGUAGES: Final[dict[int, str]] = {code: name for name, code in LANGUAGE_CODES.items()}


class RequestCode(enum.IntEnum):
    """The operation a request asks for (``RequestCode.java``). A response's code is a
    :class:`ResponseCode` instead; both share the header's ``code`` field."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    GET_KV_CONFIG = 101
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    QUERY_DATA_VERSION = 322
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053


class ResponseCode(enum.IntEnum):
    """A response's result (``ResponseCode.java``, which extends ``RemotingSysResponseCode``).

    10-12 mean *stored, with a weaker guarantee*; 19-21 are pull statuses, not errors.
    """

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    FLOW_CONTROL = 215
