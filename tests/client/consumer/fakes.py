"""A push consumer's state without a broker, for driving its per-message path in one process
(tests/client/consumer/test_compiled.py, scripts/consumer_worker_path.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pocketmq.client.consumer.state import ConsumerCounters


def detached_state(connection: Any, clustering: bool = True) -> Any:
    """What the consumer path reads of a ``ConsumerState``: fresh counters, outcome reports on
    and sent (one-way) to ``connection``, the only connection open."""
    return SimpleNamespace(
        counters=ConsumerCounters(),
        clustering=clustering,
        config=SimpleNamespace(report_outcomes=True),
        group="g",
        client_id="c",
        client=SimpleNamespace(pool=SimpleNamespace(open_connections=lambda: [connection])),
    )
