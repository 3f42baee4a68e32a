"""Tag subscriptions as the remoting clients send them (docs/remoting.md, "Tags").

A consumer subscribes with an expression such as ``"a || b"`` (or ``"*"`` for everything) and
sends, in its heartbeat and with each pull, both the tags and their ``tagsCode``: Java's
``String.hashCode`` of each tag, which RocketMQ's broker compares with the code it stored for
each message (``MessageExtBrokerInner.tagsString2tagsCode``). The parsing follows apache/rocketmq
``remoting/.../filter/FilterAPI.java`` (``buildSubscriptionData``); ali-ons computes the same
hash (``lib/utils/index.js``, ``hashCode``).
"""

from __future__ import annotations

import functools
from typing import Final, NamedTuple

__all__ = ["SUB_ALL", "Subscription", "parse_subscription", "tags_code"]

#: The expression (and the tag set) meaning "every message of the topic".
SUB_ALL: Final = "*"


@functools.lru_cache(maxsize=8192)
def tags_code(tags: str) -> int:
    """Java's ``String.hashCode`` of ``tags`` (a signed 32-bit int over its UTF-16 code
    units); 0 for no tag, as the broker stores it. Cached: a topic has few distinct tags."""
    if not tags:
        return 0
    raw = tags.encode("utf-16-be", "surrogatepass")
    value = 0
    for index in range(0, len(raw), 2):
        value = (31 * value + (raw[index] << 8 | raw[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


class Subscription(NamedTuple):
    """A parsed tag expression: every message (``everything``), or those whose tag is one of
    ``tags`` (whose codes are ``codes``). An expression of separators only matches nothing,
    as in RocketMQ."""

    expression: str
    tags: frozenset[str]
    codes: frozenset[int]
    everything: bool = False

    def matches(self, tag: str) -> bool:
        """Whether a message with ``tag`` ("" for none) is delivered under this subscription."""
        return self.everything or tag in self.tags


def parse_subscription(expression: str) -> Subscription:
    """The tags of a TAG expression: ``||``-separated, trimmed, empty ones dropped; ``""`` and
    ``"*"`` subscribe to everything."""
    if not expression or expression == SUB_ALL:
        return Subscription(SUB_ALL, frozenset(), frozenset(), everything=True)
    tags = frozenset(tag for part in expression.split("||") if (tag := part.strip()))
    return Subscription(expression, tags, frozenset(tags_code(tag) for tag in tags))
