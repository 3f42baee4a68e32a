"""Senders for the Spark resend tests. Workers receive this module by value (cloudpickle)."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass

from pocketmq.client import Message, SendResult
from pocketmq.errors import SendOutcomeUnknownError


@dataclass
class FileRecordingSender:
    """Appends every message it sends to a JSON-lines file: visible across worker processes."""

    path: str
    unknown_ids: tuple[str, ...] = ()

    async def send(self, message: Message) -> SendResult:
        assert message.message_id is not None
        if message.message_id in self.unknown_ids:
            raise SendOutcomeUnknownError("timed out", message_id=message.message_id)
        line = json.dumps({"id": message.message_id, "topic": message.topic, "pid": os.getpid()})
        lines = await asyncio.to_thread(self._append, line)
        return SendResult(
            message_id=message.message_id,
            topic=message.topic,
            queue_id=7,
            queue_offset=1000 + lines,
            broker_name="broker-z",
        )

    def _append(self, line: str) -> int:
        with open(self.path, "a+", encoding="utf-8") as f:
            f.write(line + "\n")
            f.seek(0)
            return sum(1 for _ in f)

    async def aclose(self) -> None:
        return None


def recorded(path: str) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["id"] for line in f]


#: Set by a test before the CLI pickles :func:`make_sender` (globals travel by value).
RECORD_PATH = ""


def make_sender() -> FileRecordingSender:
    return FileRecordingSender(RECORD_PATH)
