"""Broker configuration: one frozen dataclass; every default, with where it comes from, is
in docs/semantics.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pocketmq.broker.topics import MAX_QUEUES
from pocketmq.settings import check_numbers
from pocketmq.store import StoreConfig

__all__ = ["DEFAULT_DELAY_LEVELS", "BrokerConfig"]

# 4.x delay levels 1..18: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h
# (docs/semantics.md, "Consumer retry, delays and dead letters")
DEFAULT_DELAY_LEVELS: tuple[float, ...] = (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class BrokerConfig:
    """Every broker setting, frozen and keyword-only; ``pocketmq serve --config`` fills it from the
    ``[broker]`` section, and docs/semantics.md lists each default with where it comes from."""

    broker_name: str = "broker-a"
    # replication (docs/replication.md): the group is the broker name; id 0 is the master
    broker_id: int = 0
    role: str = "master"
    replication: str = "async"
    ha_max_gap_bytes: int = 256 * 1024 * 1024
    # a slave not caught up with the master for this long leaves the in-sync set (RocketMQ's
    # haMaxTimeSlaveNotCatchup, shorter: docs/replication.md §3)
    ha_max_lag_time: float = 5.0
    ha_sync_timeout: float = 3.0
    ha_metadata_interval: float = 3.0  # how often a slave copies its master's state files
    data_dir: str = "./data"
    store: StoreConfig = field(default_factory=StoreConfig)
    auto_create_topics: bool = False
    auto_create_groups: bool = False
    default_queues: int = 8
    offset_persist_interval: float = 5.0
    state_persist_interval: float = 1.0
    consumer_expiry: float = 30.0
    max_long_poll: float = 30.0
    max_inflight_per_queue: int = 100_000
    delay_levels: tuple[float, ...] = DEFAULT_DELAY_LEVELS
    max_batch_messages: int = 1024
    max_delay: float = 3 * 86400.0
    record_history: bool = True
    queue_lock_expiry: float = 60.0
    # flow control: shed sends with TOO_MANY_REQUESTS instead of queueing forever
    # (docs/semantics.md, "Flow control")
    max_queue_wait: float = 0.2
    max_pending_flushes: int = 20_000
    max_queue_backlog: int | None = None
    # transactions (RocketMQ BrokerConfig transactionTimeOut / CheckInterval / CheckMax; see
    # docs/transactions.md): first check after the timeout, then every interval, at most max
    transaction_timeout: float = 6.0
    transaction_check_interval: float = 30.0
    transaction_check_max: int = 15

    def __post_init__(self) -> None:
        check_numbers(self)  # ints and floats alike, from TOML or Python
        if not self.delay_levels or any(
            not (math.isfinite(level) and level > 0) for level in self.delay_levels
        ):
            raise ValueError("delay_levels must be positive, finite numbers of seconds")
        if self.role not in ("master", "slave"):
            raise ValueError(f"role must be master or slave, not {self.role!r}")
        if self.replication not in ("async", "sync"):
            raise ValueError(f"replication must be async or sync, not {self.replication!r}")
        if self.broker_id < 0 or self.ha_max_gap_bytes < 0:
            raise ValueError("broker_id and ha_max_gap_bytes must be >= 0")
        if self.ha_sync_timeout <= 0 or self.ha_metadata_interval <= 0 or self.ha_max_lag_time <= 0:
            raise ValueError(
                "ha_sync_timeout, ha_metadata_interval and ha_max_lag_time must be > 0"
            )
        if self.default_queues < 1 or self.max_batch_messages < 1:
            raise ValueError("default_queues and max_batch_messages must be positive")
        if self.default_queues > MAX_QUEUES:
            raise ValueError(f"default_queues must be at most {MAX_QUEUES} (a topic's queues)")
