"""Compiled hot paths with a pure-Python twin (docs/design.md, "Compiled hot paths").

A module chosen from profiles, ``pocketmq.x.mod``, is written in Python and compiled by the build
(``hatch_build.py``, mypyc) into ``pocketmq.x.mod_c``, carrying the SHA-256 of the source it was
built from. :func:`load` returns the compiled twin only when it exists, was built from the very
source beside it (a stale in-place build is never run) and ``POCKETMQ_NO_EXTENSIONS`` is not set
(``POCKETMQ_NO_EXTENSIONS=1`` runs everything in pure Python, like aiohttp's
``AIOHTTP_NO_EXTENSIONS``); otherwise the pure module. Correctness lives in the Python: the
same tests run on both, and the differential tests (tests/protocol/test_compiled.py,
tests/client/consumer/test_compiled.py) feed both the same random input.

Modules compiled together as a *group* import each other's twins directly (the build points
their imports at the twins, so calls between them are native). Each twin of a group then
records the digest of all the group's sources (``SOURCE_GROUP`` names them): one changed source
makes every twin of its group stale, so a process never mixes a compiled module with the pure
version of a module it was compiled against.
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


def source_digest(*paths: str) -> str:
    """The SHA-256 of source files read one after the other, as the build records it in a
    compiled twin (the files of its group, in the group's order)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as source:
            digest.update(source.read())
    return digest.hexdigest()


def _origins(twin: ModuleType, names: tuple[str, ...]) -> list[str] | None:
    """The paths of the source files of modules ``names`` (each may be missing), or None when
    the twin has no file. Found beside the twin by path, not with ``find_spec``, which would
    import each module's parent packages: a producer loading a compiled group shared with the
    consumer must not import the consumer package (tests/cli/test_startup.py)."""
    twin_file = getattr(twin, "__file__", None)
    if not twin_file:
        return None
    root = os.path.dirname(os.path.abspath(twin_file))
    for _ in range(twin.__name__.count(".")):
        root = os.path.dirname(root)  # the directory holding the twin's top package
    return [os.path.join(root, *name.split(".")) + ".py" for name in names]


def _built_from_these(twin: ModuleType, origins: list[str] | None) -> bool:
    """Whether ``twin`` may run beside these sources: built from exactly them, or there is
    nothing to compare it with (no source of its group on disk: an install without ``.py``
    files). A group of which some sources are there and some are not was built from another
    tree (a module since removed from its group or renamed): stale."""
    if origins is None:
        return True
    present = [os.path.isfile(origin) for origin in origins]
    if not any(present):
        return True
    built_from = getattr(twin, "SOURCE_DIGEST", None)
    return all(present) and built_from == source_digest(*origins)


def load(name: str) -> ModuleType:
    """The compiled twin of module ``name`` (``name + "_c"``) when it may be used, else ``name``
    itself (module doc)."""
    if not NO_EXTENSIONS:
        try:
            compiled = importlib.import_module(name + "_c")
        except ImportError:  # not built
            compiled = None
        except Exception as exc:  # a build of other sources may fail as it loads: never fatal
            log.warning(
                "%s: the compiled module failed to load (%s); running pure Python", name, exc
            )
            compiled = None
        if compiled is not None:
            group: tuple[str, ...] = getattr(compiled, "SOURCE_GROUP", (name,))
            origins = _origins(compiled, group)
            if _built_from_these(compiled, origins):
                COMPILED.append(name)
                return compiled
            log.warning(
                "%s: the compiled module was built from another version of %s; running pure "
                "Python (rebuild it: make install)",
                name,
                " or ".join(os.path.basename(origin) for origin in origins or ()),
            )
    return importlib.import_module(name)
