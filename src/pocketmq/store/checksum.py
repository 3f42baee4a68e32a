"""The commit-log record's CRC-32: zlib's, or ISA-L's when it is installed.

A record's CRC is computed when it is encoded (each append) and checked when it is read (each
pull, recovery, a replica's intake: docs/storage-format.md §1, §7). On a 1 KiB message zlib
1.2's table-driven CRC-32 was ~4,700 instructions, the largest single item of the broker's
pull. ISA-L (the ``isal`` package's ``isal_zlib.crc32``) computes the same CRC-32 with the
CPU's carry-less multiply: the same value for every input and start value, in about a tenth of
the time (docs/benchmarks.md, "ISA-L's CRC-32 on the pull, and why ``batch_size=32`` drains
slower (issue 32)"). It is optional: without it (or should it ever disagree with zlib on the
probes below) records are checksummed with zlib, as before. What is verified does not change,
only how fast.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from typing import Final

__all__ = ["ACCELERATED", "crc32"]

#: inputs whose CRC-32 an accelerated function must reproduce (with and without a start value)
#: before it is used: the standard check value, an empty input, and lengths around the sizes
#: where vectorised implementations switch strategies
_PROBES: Final = (b"123456789", b"", bytes(range(256)) * 5 + b"tail")


def _agrees(candidate: Callable[..., int]) -> bool:
    """Whether ``candidate`` gives zlib's CRC-32 on every probe, from 0 and from a start."""
    for probe in _PROBES:
        for start in (0, 0xDEADBEEF):
            if candidate(probe, start) != zlib.crc32(probe, start):
                return False
    return True


def _fastest() -> tuple[Callable[..., int], bool]:
    """ISA-L's ``crc32`` when it imports and agrees with zlib's, else zlib's: (the function,
    whether it is ISA-L's)."""
    try:
        candidate = importlib.import_module("isal.isal_zlib").crc32
    except (ImportError, AttributeError):
        return zlib.crc32, False
    if not _agrees(candidate):
        return zlib.crc32, False
    return candidate, True


crc32, ACCELERATED = _fastest()
"""``crc32(data, start=0)``: zlib's CRC-32 of ``data`` (any bytes-like object), by the fastest
implementation this process has (module doc); ``ACCELERATED``: it is ISA-L's."""
