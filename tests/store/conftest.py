"""Fixtures for store tests: small segments so rolls, blanks and retention happen quickly."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.store import MessageStore, StoreConfig, StoreMessage, faults

SMALL = StoreConfig(
    segment_size=16 * 1024,
    consume_queue_entries_per_file=16,
    index_max_entries=64,
    flush_interval=3600,
    checkpoint_interval=3600,
    min_free_disk_bytes=0,
)


def message(i: int, *, topic: str = "orders", queue_id: int = 0, size: int = 100) -> StoreMessage:
    return StoreMessage(
        topic=topic,
        queue_id=queue_id,
        body=f"body-{i}-".encode() + b"x" * size,
        properties={
            "UNIQ_KEY": f"MSG{i:06d}",
            "KEYS": f"order-{i} batch-{i // 10}",
            "TAGS": "even" if i % 2 == 0 else "odd",
        },
    )


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(store_dir: Path) -> Iterator[MessageStore]:
    s = MessageStore.open(str(store_dir), SMALL)
    yield s
    s.close()


def store_files(root: Path) -> dict[str, bytes]:
    """Every file of a store directory (its lock apart) by relative path, with its bytes: what
    two stores written alike must hold byte for byte."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != "LOCK"
    }


def crash_copy(source: Path, target: Path) -> Path:
    """Copy a store directory while its store is still open: what a crash would leave on disk
    (the page cache holds every write, the checkpoint is whatever was last written)."""
    shutil.copytree(source, target)
    return target


@pytest.fixture
def injector() -> Iterator[faults.FaultInjector]:
    """A fault injector for the store's file operations, removed after the test."""
    installed = faults.FaultInjector()
    faults.install(installed)
    try:
        yield installed
    finally:
        faults.uninstall()
