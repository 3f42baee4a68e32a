"""kill -9 in the middle of sync-flushed writes: every acknowledged message survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pocketmq.store import MessageStore, StoreConfig

WRITER = Path(__file__).with_name("writer_process.py")


@pytest.mark.parametrize("round_", range(3))
def test_every_acknowledged_write_survives_kill_9(tmp_path: Path, round_: int) -> None:
    directory = tmp_path / "store"
    acknowledged: list[tuple[str, int, int]] = []
    target = 300 + 250 * round_
    with subprocess.Popen(
        [sys.executable, str(WRITER), str(directory), str(round_)],
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            message_id, queue_id, queue_offset = line.split()
            acknowledged.append((message_id, int(queue_id), int(queue_offset)))
            if len(acknowledged) >= target:
                break
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        for line in process.stdout:  # lines already in the pipe were acknowledged too
            if line.endswith("\n"):  # the kill may cut the last line short
                message_id, queue_id, queue_offset = line.split()
                acknowledged.append((message_id, int(queue_id), int(queue_offset)))
    assert len(acknowledged) >= target

    config = StoreConfig(
        segment_size=256 * 1024,
        consume_queue_entries_per_file=100,
        index_max_entries=500,
        min_free_disk_bytes=0,
    )
    with MessageStore.open(str(directory), config) as store:
        for message_id, queue_id, queue_offset in acknowledged:
            [found] = store.query_by_id(message_id)
            assert (found.queue_id, found.queue_offset) == (queue_id, queue_offset)
            assert found.body.startswith(message_id.encode())
            got = store.get_messages("killed", queue_id, queue_offset, max_count=1)
            assert got.messages[0].message_id == message_id
