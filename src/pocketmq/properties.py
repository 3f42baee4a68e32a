"""Message property names shared by every layer (they travel on the wire and live in the store).

RocketMQ carries a message's id, tag, keys and routing hints as string properties; pocketmq does
the same so the native protocol, the gRPC adapter and the store agree without translation.
"""

from typing import Final

__all__ = [
    "BORN_HOST",
    "CHECK_TIMES",
    "DELAY_LEVEL",
    "DELIVER_TIME_MS",
    "DLQ_REASON",
    "KEYS",
    "MAX_RECONSUME_TIMES",
    "MESSAGE_GROUP",
    "MESSAGE_ID",
    "ORIGIN_MESSAGE_ID",
    "PRODUCER_GROUP",
    "REAL_QUEUE_ID",
    "REAL_TOPIC",
    "RECONSUME_TIMES",
    "RETRY_TOPIC",
    "SYSTEM_PROPERTIES",
    "TAGS",
    "TRANSACTION_ID",
    "TRANSACTION_PREPARED",
]

MESSAGE_ID: Final = "UNIQ_KEY"
TAGS: Final = "TAGS"
KEYS: Final = "KEYS"
MESSAGE_GROUP: Final = "MSG_GROUP"
DELIVER_TIME_MS: Final = "DELIVER_TIME_MS"
DELAY_LEVEL: Final = "DELAY"
TRANSACTION_PREPARED: Final = "TRAN_MSG"
TRANSACTION_ID: Final = "TRANSACTION_ID"
PRODUCER_GROUP: Final = "PGROUP"
CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
RETRY_TOPIC: Final = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
REAL_TOPIC: Final = "REAL_TOPIC"
REAL_QUEUE_ID: Final = "REAL_QID"
RECONSUME_TIMES: Final = "RECONSUME_TIME"
MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
DLQ_REASON: Final = "DLQ_REASON"
# A producer's host when it is a name rather than an IP address (the official Java, Go and
# Node.js clients send their host name): the record's born-host field holds addresses only.
BORN_HOST: Final = "__BORNHOST"

# Stored properties that are the system's, not the application's: every client hides them from
# message views and refuses them on send.
SYSTEM_PROPERTIES: Final = frozenset(
    {
        MESSAGE_ID,
        TAGS,
        KEYS,
        MESSAGE_GROUP,
        DELIVER_TIME_MS,
        DELAY_LEVEL,
        TRANSACTION_PREPARED,
        TRANSACTION_ID,
        PRODUCER_GROUP,
        CHECK_TIMES,
        RETRY_TOPIC,
        ORIGIN_MESSAGE_ID,
        REAL_TOPIC,
        REAL_QUEUE_ID,
        RECONSUME_TIMES,
        MAX_RECONSUME_TIMES,
        DLQ_REASON,
        BORN_HOST,
    }
)
