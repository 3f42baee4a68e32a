"""One way for a package to export names loaded on first use.

Why: ``import pocketmq`` (and the CLI) must not pay for the SDK, nor ``pocketmq.reliability`` for
SQLAlchemy or redis-py (docs/benchmarks.md, "CLI start-up"). Each such package lists its names
twice — once in an ``if TYPE_CHECKING:`` block for type checkers and readers, once in a
name → module map for the runtime — and ``tests/test_lazy_exports.py`` checks that the two
agree. This module builds the package's ``__getattr__`` and ``__dir__`` from the map.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    modules: Mapping[str, str],
    namespace: dict[str, Any],
    exported: Sequence[str],
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: a name of ``modules`` is imported from
    ``package.<its module>`` when first asked for, then kept in ``namespace`` (the package's
    ``globals()``) so the next access is a plain lookup."""

    def __getattr__(name: str) -> object:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exported))

    return __getattr__, __dir__
