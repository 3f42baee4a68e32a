"""``pwrite_full`` writes all of its data even when ``os.pwrite`` writes less than asked (its
first call is the common whole write, without a view: docs/benchmarks.md, "A lone send, both
sides"), and a ``pwrite`` that writes nothing is an I/O error."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pocketmq.store.files import pwrite_full


@pytest.mark.parametrize("step", [1, 3, 7, 4096])
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_short_writes_are_continued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int, kind: type
) -> None:
    real = os.pwrite
    calls = []

    def short(fd: int, data: bytes, offset: int) -> int:
        calls.append(len(data))
        return real(fd, bytes(data)[:step], offset)

    path = tmp_path / "file"
    path.write_bytes(b"-" * 8)
    payload = bytes(range(256)) * 4
    fd = os.open(path, os.O_RDWR)
    try:
        monkeypatch.setattr(os, "pwrite", short)
        pwrite_full(fd, kind(payload), 3)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"---" + payload
    assert len(calls) == -(-len(payload) // step)
    assert calls[0] == len(payload)


def test_nothing_to_write_makes_no_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "pwrite", lambda *args: pytest.fail("pwrite called"))
    pwrite_full(-1, b"", 0)


@pytest.mark.parametrize("first", [0, 5])
def test_a_write_of_nothing_is_an_io_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: int
) -> None:
    answers = iter([first, 0])
    monkeypatch.setattr(os, "pwrite", lambda *args: next(answers))
    with pytest.raises(OSError, match="pwrite wrote nothing") as raised:
        pwrite_full(-1, b"0123456789", 0)
    assert raised.value.errno == errno.EIO
