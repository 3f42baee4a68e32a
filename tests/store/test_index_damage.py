"""The index is derived from the log: a damaged or empty index file (a kill -9 while one was
being created leaves one) is rebuilt, never a reason not to start."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketmq.store import MessageStore

from .conftest import SMALL, message


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(b""), id="empty"),
        pytest.param(lambda p: p.write_bytes(b"\x00" * 100), id="zeros"),
        pytest.param(lambda p: p.write_bytes(p.read_bytes()[:200]), id="truncated"),
        pytest.param(
            lambda p: p.write_bytes(b"IQMP" + b"\xff" * 60 + p.read_bytes()[64:]), id="bad-header"
        ),
    ],
)
def test_a_damaged_index_file_is_rebuilt_from_the_log(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as store:
        store.put([message(i) for i in range(100)])  # several index files (64 entries each)
    files = sorted((directory / "index").iterdir())
    assert len(files) >= 3
    damage(files[1])
    with MessageStore.open(str(directory), SMALL) as store:
        for i in (0, 30, 60, 99):
            [found] = store.query_by_id(f"MSG{i:06d}")
            assert found.queue_offset == i
        assert len(store.query_by_key("orders", "batch-5")) == 10
        assert len(store.query_by_id("MSG000030")) == 1  # no duplicate answers
