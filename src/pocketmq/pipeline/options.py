"""The options of the ``pocketmq`` Spark data source (docs/pipeline.md), parsed once.

Why a module of its own: the reader (datasource.py) and the writer (datasource_write.py) both
take a :class:`DataSourceOptions`, so neither has to reach into the other for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from pocketmq.client.config import ClientConfig, default_servers, parse_servers
from pocketmq.client.sync import SyncAdmin
from pocketmq.errors import InvalidArgumentError
from pocketmq.pipeline.browse import DEFAULT_PAGE_SIZE

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "OPTION_ACCESS_KEY",
    "OPTION_BATCH_SIZE",
    "OPTION_ENDING_OFFSETS",
    "OPTION_ENDPOINTS",
    "OPTION_MAX_OFFSETS_PER_TRIGGER",
    "OPTION_MAX_ROWS_PER_PARTITION",
    "OPTION_PAGE_SIZE",
    "OPTION_SECRET_KEY",
    "OPTION_SERVERS",
    "OPTION_STARTING_OFFSETS",
    "OPTION_TOPIC",
    "DataSourceOptions",
]

#: Brokers (or a name server) to ask, ``host:port[,host:port...]``; default ``$POCKETMQ_SERVER``.
OPTION_SERVERS: Final = "servers"
OPTION_ENDPOINTS: Final = "endpoints"  # an alias of ``servers``
#: The topic to read (required), or to write to (overrides the rows' ``topic`` column).
OPTION_TOPIC: Final = "topic"
#: ``earliest`` | ``latest`` | offsets JSON. Default: earliest for batch, latest for streaming.
OPTION_STARTING_OFFSETS: Final = "startingOffsets"
#: Batch reads only: ``latest`` (default) | offsets JSON; the range is ``[start, end)``.
OPTION_ENDING_OFFSETS: Final = "endingOffsets"
#: Streaming reads: at most this many messages per micro-batch (all queues together).
OPTION_MAX_OFFSETS_PER_TRIGGER: Final = "maxOffsetsPerTrigger"
#: Split a queue's range into partitions of at most this many offsets (default: no split).
OPTION_MAX_ROWS_PER_PARTITION: Final = "maxRowsPerPartition"
#: Messages per BROWSE request (default 512, at most 1024).
OPTION_PAGE_SIZE: Final = "pageSize"
#: Writes: messages per send request (rows without a message group; default 64).
OPTION_BATCH_SIZE: Final = "batchSize"
#: A user's keys for a broker with authentication (default: ``$POCKETMQ_ACCESS_KEY`` and
#: ``$POCKETMQ_SECRET_KEY`` on the driver and every executor).
OPTION_ACCESS_KEY: Final = "accessKey"
OPTION_SECRET_KEY: Final = "secretKey"

DEFAULT_BATCH_SIZE: Final = 64


@dataclass(frozen=True, slots=True)
class DataSourceOptions:
    """The data source's options, parsed and checked once on the driver: plain values,
    pickled to every task (the reader's and the writer's alike)."""

    servers: tuple[str, ...]
    topic: str
    starting: str
    ending: str
    max_per_trigger: int | None
    max_rows_per_partition: int | None
    page_size: int
    batch_size: int
    access_key: str = ""
    secret_key: str = field(default="", repr=False)  # never in a log or a plan's text

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> DataSourceOptions:
        """Parse Spark's ``.option(...)`` map (InvalidArgumentError for a bad number);
        ``streaming`` makes reads start at the latest offsets by default."""
        raw = options.get(OPTION_SERVERS) or options.get(OPTION_ENDPOINTS) or ""
        return cls(
            servers=parse_servers(raw) or default_servers(),
            topic=(options.get(OPTION_TOPIC) or "").strip(),
            starting=(
                options.get(OPTION_STARTING_OFFSETS) or ("latest" if streaming else "earliest")
            ).strip(),
            ending=(options.get(OPTION_ENDING_OFFSETS) or "latest").strip(),
            max_per_trigger=_positive(options, OPTION_MAX_OFFSETS_PER_TRIGGER),
            max_rows_per_partition=_positive(options, OPTION_MAX_ROWS_PER_PARTITION),
            page_size=_positive(options, OPTION_PAGE_SIZE) or DEFAULT_PAGE_SIZE,
            batch_size=_positive(options, OPTION_BATCH_SIZE) or DEFAULT_BATCH_SIZE,
            access_key=(options.get(OPTION_ACCESS_KEY) or "").strip(),
            secret_key=options.get(OPTION_SECRET_KEY) or "",
        )

    def require_topic(self) -> str:
        """The ``topic`` option, which reads need (InvalidArgumentError without it)."""
        if not self.topic:
            raise InvalidArgumentError("the pocketmq data source needs .option('topic', ...)")
        return self.topic

    def client(self) -> ClientConfig:
        """The SDK's settings: these servers, and the keys when the options give them."""
        if self.access_key:
            return ClientConfig(
                servers=self.servers, access_key=self.access_key, secret_key=self.secret_key
            )
        return ClientConfig(servers=self.servers)

    def admin(self) -> SyncAdmin:
        """A blocking admin client with :meth:`client`'s settings (the caller closes it)."""
        return SyncAdmin(client=self.client())


def _positive(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None or str(value).strip() == "":
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be a whole number, got {value!r}") from None
    if number < 1:
        raise InvalidArgumentError(f"option {name} must be at least 1, got {number}")
    return number
