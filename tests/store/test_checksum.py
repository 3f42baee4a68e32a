"""The read pass's CRC-32 (store/checksum.py): zlib's value whichever implementation runs, and
zlib's own when ISA-L is missing or disagrees."""

from __future__ import annotations

import importlib
import types
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.store import checksum


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=5000), st.integers(min_value=0, max_value=2**32 - 1))
def test_the_crc_is_zlibs_for_any_input_and_start(data: bytes, start: int) -> None:
    assert checksum.crc32(data) == zlib.crc32(data)
    assert checksum.crc32(data, start) == zlib.crc32(data, start)
    assert checksum.crc32(memoryview(data)) == zlib.crc32(data)


def test_without_isal_the_crc_is_zlibs(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> types.ModuleType:
        raise ImportError(name)

    monkeypatch.setattr(importlib, "import_module", missing)
    assert checksum._fastest() == (zlib.crc32, False)


def test_an_implementation_that_disagrees_with_zlib_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = types.SimpleNamespace(crc32=lambda data, start=0: zlib.crc32(data, start) ^ 1)
    monkeypatch.setattr(importlib, "import_module", lambda name: wrong)
    assert checksum._fastest() == (zlib.crc32, False)
    # one that is wrong only from a start value is caught too
    seeded = types.SimpleNamespace(crc32=lambda data, start=0: zlib.crc32(data))
    monkeypatch.setattr(importlib, "import_module", lambda name: seeded)
    assert checksum._fastest() == (zlib.crc32, False)


def test_isal_is_used_when_installed() -> None:
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    assert checksum._fastest() == (isal_zlib.crc32, True)
    assert checksum.ACCELERATED
