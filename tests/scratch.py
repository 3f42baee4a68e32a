"""Disk hygiene for fixtures that outlive one test.

Brokers reserve their files up front (a 128 MiB commit-log segment, a 6.9 MiB index:
docs/storage-format.md), so the suite's data directories add up to tens of GB if pytest keeps
them all until the session ends. Function-scoped ``tmp_path`` directories of passing tests are
removed by pytest itself (``tmp_path_retention_policy = "failed"`` in pyproject.toml); module- and
session-scoped fixtures remove theirs with :func:`scratch_dir` (docs/testing.md).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


@contextmanager
def scratch_dir(factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A fresh directory under the session's base temp, deleted when the block ends."""
    path = factory.mktemp(name)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def scratch_broker(factory: pytest.TempPathFactory, name: str, **options: Any) -> Iterator[Any]:
    """A :class:`~pocketmq.testing.BrokerProcess` in a :func:`scratch_dir` for a module- or
    session-scoped fixture; it must stop cleanly (exit 0) when the fixture ends."""
    from pocketmq.testing import BrokerProcess

    with scratch_dir(factory, name) as scratch:
        process = BrokerProcess(scratch, **options)
        try:
            yield process
        finally:
            code = process.stop()
            assert code == 0, process.log()[-5000:]


def grpc_worker_args() -> tuple[str, ...]:
    """``--grpc-workers N`` when ``POCKETMQ_TEST_GRPC_WORKERS`` asks for the official-client
    tests to run through the proxy tier (``make test`` runs them both ways), else nothing."""
    count = os.environ.get("POCKETMQ_TEST_GRPC_WORKERS", "0")
    return ("--grpc-workers", count) if count not in ("", "0") else ()
