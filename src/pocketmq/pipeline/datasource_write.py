"""Writing DataFrames into topics: the ``pocketmq`` data source's writers
(:mod:`pocketmq.pipeline.datasource` documents the columns and how each row's message id is
chosen, so that a re-run Spark task or a replayed micro-batch re-sends the same ids)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from pocketmq.client.convert import SYSTEM_PROPERTIES
from pocketmq.client.message import Message
from pocketmq.client.sync import SyncProducer
from pocketmq.errors import InvalidArgumentError
from pocketmq.ids import new_message_id

if TYPE_CHECKING:
    from pyspark.sql import Row

    from pocketmq.pipeline.options import DataSourceOptions

__all__ = ["BatchWriter", "StreamWriter", "derive_message_id"]

#: Spark's local properties naming the streaming query and micro-batch of a task.
_BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
_QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"


def derive_message_id(
    topic: str, keys: Sequence[str], tag: str | None, message_group: str | None, body: bytes
) -> str:
    """The id of a keyed message: the same (topic, keys, tag, group, body) gives the same id.

    32 upper-case hex characters, the shape of the SDK's ids.
    """
    digest = hashlib.blake2b(digest_size=16, person=b"pocketmq-spark")
    for part in (topic, " ".join(keys), tag or "", message_group or ""):
        encoded = part.encode()
        digest.update(len(encoded).to_bytes(4, "big"))
        digest.update(encoded)
    digest.update(body)
    return digest.hexdigest().upper()


def _position_id(query_id: str, batch_id: str, partition: int, index: int, topic: str) -> str:
    digest = hashlib.blake2b(digest_size=16, person=b"pocketmq-replay")
    digest.update(f"{query_id}\0{batch_id}\0{partition}\0{index}\0{topic}".encode())
    return digest.hexdigest().upper()


@dataclass(frozen=True)
class _Sent(WriterCommitMessage):
    partition: int
    messages: int


def _keys(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    return tuple(str(k) for k in value if k)


def _message(
    row: Row,
    fields: frozenset[str],
    options: DataSourceOptions,
    position: tuple[str, str, int, int] | None,
) -> Message:
    def get(name: str) -> Any:
        return row[name] if name in fields else None

    topic = options.topic or get("topic")
    if not topic:
        raise InvalidArgumentError("rows need a topic: a 'topic' column or .option('topic', ...)")
    body = get("body")
    if isinstance(body, str):
        body = body.encode()
    elif isinstance(body, bytearray | memoryview):
        body = bytes(body)
    if not isinstance(body, bytes):
        raise InvalidArgumentError("rows need a 'body' column (binary or string)")
    keys = _keys(get("keys"))
    tag = get("tag") or None
    group = get("message_group") or None
    props = get("properties") or {}
    properties = {str(k): str(v) for k, v in dict(props).items() if k not in SYSTEM_PROPERTIES}
    message_id = get("message_id") or None
    if message_id is None and keys:
        message_id = derive_message_id(topic, keys, tag, group, body)
    if message_id is None:
        message_id = _position_id(*position, topic) if position else new_message_id()
    return Message(
        topic=topic,
        body=body,
        tag=tag,
        keys=keys,
        properties=properties,
        message_group=group,
        message_id=message_id,
    )


def _write(options: DataSourceOptions, rows: Iterator[Row], *, streaming: bool) -> _Sent:
    """Send ``rows`` with one producer; FIFO rows one by one, in order, the rest in batches."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    position: tuple[str, str, int] | None = None
    if streaming and context is not None:
        batch_id = context.getLocalProperty(_BATCH_ID_PROPERTY)
        query_id = context.getLocalProperty(_QUERY_ID_PROPERTY)
        if batch_id is not None and query_id is not None:
            position = (query_id, batch_id, partition)
    sent = 0
    pending: list[Message] = []
    fields: frozenset[str] | None = None
    with SyncProducer(client=options.client()) as producer:

        def flush() -> None:
            nonlocal sent
            if pending:
                producer.send_batch(pending)
                sent += len(pending)
                pending.clear()

        for index, row in enumerate(rows):
            if fields is None:
                fields = frozenset(row.__fields__)
            where = (*position, index) if position is not None else None
            message = _message(row, fields, options, where)
            if message.message_group:
                flush()
                producer.send(message)
                sent += 1
                continue
            if pending and (
                pending[0].topic != message.topic or len(pending) >= options.batch_size
            ):
                flush()
            pending.append(message)
        flush()
    return _Sent(partition, sent)


class BatchWriter(DataSourceWriter):
    """Batch writes: every task sends its rows with a producer of its own."""

    def __init__(self, options: DataSourceOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        """Send one Spark task's rows (run in the executor); rows without keys or ids get
        fresh ids, so a re-run task re-sends them as new messages."""
        return _write(self.options, iterator, streaming=False)


class StreamWriter(DataSourceStreamWriter):
    """Streaming writes, with ids a replayed micro-batch reproduces."""

    def __init__(self, options: DataSourceOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        """Send one task's rows of a micro-batch; rows without keys or ids get ids derived from
        the query, batch, partition and row, so a replay re-sends the same ids."""
        return _write(self.options, iterator, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Messages are stored when ``write`` returns; nothing is left to commit."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Sent messages cannot be taken back; the replayed batch re-sends the same ids."""
