"""Compiled hot paths with a pure-Python twin (docs/design.md, "Compiled hot paths").

A module chosen from profiles, ``pocketmq.x.mod``, is written in Python and compiled by the build
(``hatch_build.py``, mypyc) into ``pocketmq.x.mod_c``, carrying the SHA-256 of the source it was
built from. :func:`load` returns the compiled twin only when it exists, was built from the very
source beside it (a stale in-place build is never run) and ``POCKETMQ_NO_EXTENSIONS`` is not set
(``POCKETMQ_NO_EXTENSIONS=1`` runs everything in pure Python, like aiohttp's
``AIOHTTP_NO_EXTENSIONS``); otherwise the pure module. Correctness lives in the Python: the
same tests run on both, and tests/protocol/test_compiled.py feeds both the same random input.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
from types import ModuleType

__all__ = ["COMPILED", "NO_EXTENSIONS", "load", "source_digest"]

NO_EXTENSIONS: bool = os.environ.get("POCKETMQ_NO_EXTENSIONS", "") not in ("", "0")
"""``POCKETMQ_NO_EXTENSIONS`` is set (to anything but ``0``): pure Python only."""

COMPILED: list[str] = []
"""The modules running compiled in this process (for logs and ``pocketmq serve``)."""

log = logging.getLogger("pocketmq")


def source_digest(path: str) -> str:
    """The SHA-256 of a source file, as the build records it in the compiled twin."""
    with open(path, "rb") as source:
        return hashlib.sha256(source.read()).hexdigest()


def load(name: str) -> ModuleType:
    """The compiled twin of module ``name`` (``name + "_c"``) when it may be used, else ``name``
    itself (module doc)."""
    if not NO_EXTENSIONS:
        try:
            compiled = importlib.import_module(name + "_c")
        except ImportError:
            compiled = None
        if compiled is not None:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec is not None else None
            built_from = getattr(compiled, "SOURCE_DIGEST", None)
            if origin is None or not origin.endswith(".py") or built_from == source_digest(origin):
                COMPILED.append(name)
                return compiled
            log.warning(
                "%s: the compiled module was built from another version of %s; running pure "
                "Python (rebuild it: make install)",
                name,
                os.path.basename(origin),
            )
    return importlib.import_module(name)
