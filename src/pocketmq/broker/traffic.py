"""Messages and bytes in and out, per topic and consumer group, for the metrics endpoint.

The send, pull and pop paths already count messages; these counters add the topic (and group) so
``/metrics`` can answer RocketMQ 5's per-topic series (docs/operations.md, "Metrics"). They are
plain dictionary increments, read only when Prometheus scrapes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable

from pocketmq.model.messages import Delivered

__all__ = ["SIZE_BUCKETS", "Traffic"]

SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)
"""Upper bounds (bytes) of ``rocketmq_message_size``'s buckets: RocketMQ 5's, so its dashboards
read them; a last bucket holds anything larger."""
_SMALLEST = SIZE_BUCKETS[0]


class Traffic:
    """Counts by topic (in) and by (topic, group) (out, dead-lettered) since the broker started."""

    def __init__(self) -> None:
        # per topic: [messages, bytes, then one count per SIZE_BUCKETS bucket (the last: larger)]
        # in one list, so a stored message costs one dictionary lookup (docs/benchmarks.md)
        self._in: dict[str, list[int]] = {}
        self.messages_out: Counter[tuple[str, str]] = Counter()
        self.bytes_out: Counter[tuple[str, str]] = Counter()
        self.dead_lettered: Counter[tuple[str, str]] = Counter()

    def stored(self, topic: str, size: int) -> None:
        """One message of ``size`` body bytes was stored in ``topic``."""
        self.stored_many(((topic, size),))

    def stored_many(self, stored: Iterable[tuple[str, int]]) -> None:
        """Messages of ``(topic, body size)`` were stored: one call for an append's messages,
        not one per message (the send path's, docs/benchmarks.md)."""
        counts_in = self._in
        for topic, size in stored:
            counts = counts_in.get(topic)
            if counts is None:
                counts = counts_in[topic] = [0] * (len(SIZE_BUCKETS) + 3)
            counts[0] += 1
            counts[1] += size
            counts[2 if size <= _SMALLEST else 2 + bisect_left(SIZE_BUCKETS, size)] += 1

    @property
    def messages_in(self) -> dict[str, int]:
        """Messages stored, per topic."""
        return {topic: counts[0] for topic, counts in self._in.items()}

    @property
    def bytes_in(self) -> dict[str, int]:
        """Body bytes stored, per topic."""
        return {topic: counts[1] for topic, counts in self._in.items()}

    @property
    def sizes(self) -> dict[str, list[int]]:
        """Per topic, how many bodies fell in each SIZE_BUCKETS bucket (the last: larger)."""
        return {topic: counts[2:] for topic, counts in self._in.items()}

    def delivered(self, group: str, messages: Iterable[Delivered]) -> None:
        """``messages`` went out to a consumer of ``group``."""
        for message in messages:
            key = (message.topic, group)
            self.messages_out[key] += 1
            self.bytes_out[key] += len(message.body)

    def delivered_from(self, topic: str, group: str, count: int, size: int) -> None:
        """``count`` messages of ``topic`` with ``size`` body bytes in all went out to a consumer
        of ``group`` (a pull: one queue's messages, counted once, not one by one)."""
        key = (topic, group)
        self.messages_out[key] += count
        self.bytes_out[key] += size
