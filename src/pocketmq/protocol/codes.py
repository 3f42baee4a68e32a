"""Operation codes and frame kinds (docs/protocol.md)."""

from __future__ import annotations

import enum

__all__ = ["FrameKind", "RequestCode"]


class FrameKind(enum.IntEnum):
    """Whether a frame expects an answer: one-way requests (transaction checks, consumer-group
    changes, outcome reports) are never answered, so no request id waits for them."""

    REQUEST = 0
    RESPONSE = 1
    ONEWAY = 2


class RequestCode(enum.IntEnum):
    """The operation a request frame asks for, one number per native-protocol operation
    (docs/protocol.md, "Operations"); a response's code field is a result code instead."""

    HELLO = 1
    HEARTBEAT = 2
    UNREGISTER_CLIENT = 3
    AUTHENTICATE = 4
    CANCEL = 5
    SEND = 10
    SEND_BACK = 11
    END_TRANSACTION = 12
    RECALL = 13
    PULL = 20
    POP = 21
    ACK = 22
    CHANGE_INVISIBLE = 23
    REPORT_OUTCOMES = 24
    FORWARD_TO_DEAD_LETTER = 25
    COMMIT_OFFSET = 30
    QUERY_OFFSET = 31
    GET_CONSUMERS = 32
    LOCK_QUEUES = 33
    UNLOCK_QUEUES = 34
    QUERY_MESSAGE = 40
    MESSAGE_HISTORY = 41
    BROWSE = 42
    REDRIVE = 43
    QUERY_TRANSACTION = 44
    CREATE_TOPIC = 50
    DELETE_TOPIC = 51
    LIST_TOPICS = 52
    CREATE_GROUP = 53
    DELETE_GROUP = 54
    LIST_GROUPS = 55
    BROKER_STATUS = 56
    QUEUE_STATUS = 57
    RESET_OFFSET = 58
    UPDATE_TOPIC = 59
    REGISTER_BROKER = 60
    GET_ROUTE = 61
    LIST_BROKERS = 62
    GATEWAY_INFO = 63
    GATEWAY_GROUP = 64
    BROKER_OVERVIEW = 65
    CHECK_TRANSACTION = 70
    CONSUMERS_CHANGED = 71
    PROMOTE = 80
    # the replication port (docs/replication.md §2)
    HA_HELLO = 100
    HA_DATA = 101
    HA_ACK = 102
    HA_METADATA = 103
    HA_OFFSETS = 104
    HA_LINK = 105
    HA_LINK_PROOF = 106
