"""The number checks every server configuration runs at construction.

Why one module: a setting must mean the same whether it came from ``pocketmq serve``'s TOML file
(``msgspec.convert`` builds the dataclass and runs its ``__post_init__``) or from Python
(embedders, tests, benchmarks). A check written per type once let ``BrokerConfig(max_long_poll=-5)``
through while ``-5.0`` was refused; these look at ints and floats alike.

``key`` turns a field's name into the name the user wrote: the ``[server]`` sections of
``pocketmq.server.sections`` name their fields shorter than the file's flat keys (``Ha.port`` is
``ha_port``), and an error must name what the user can find in the file and in the docs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from pocketmq.errors import InvalidArgumentError

__all__ = ["check_non_negative", "check_numbers", "check_ports", "check_positive"]

MAX_PORT = 65535


def _same(name: str) -> str:
    return name


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_numbers(config: Any, key: Callable[[str], str] = _same) -> None:
    """Refuse (:class:`~pocketmq.errors.InvalidArgumentError`, a ``ValueError``) any number field
    of the dataclass ``config`` that is negative, infinite or NaN; ``bool`` fields and ``None``
    (a setting left unset) are not numbers here."""
    for item in fields(config):
        value = getattr(config, item.name)
        if _is_number(value) and not (math.isfinite(value) and value >= 0):
            raise InvalidArgumentError(
                f"{key(item.name)} must be a finite, non-negative number, not {value!r}"
            )


def check_positive(config: Any, *names: str, key: Callable[[str], str] = _same) -> None:
    """Refuse a zero (or negative, infinite, NaN) value of the fields ``names``: an interval or a
    timeout of 0 would spin or never wait."""
    for name in names:
        value = getattr(config, name)
        if not (_is_number(value) and 0 < value < math.inf):
            raise InvalidArgumentError(f"{key(name)} must be a positive number, not {value!r}")


def check_non_negative(config: Any, *names: str, key: Callable[[str], str] = _same) -> None:
    """Refuse a negative, infinite or NaN value of the fields ``names``, or one that is not a
    number at all: a delay of 0 is allowed (at once), a missing one is not."""
    for name in names:
        value = getattr(config, name)
        if not (_is_number(value) and 0 <= value < math.inf):
            raise InvalidArgumentError(
                f"{key(name)} must be a finite, non-negative number, not {value!r}"
            )


def check_ports(config: Any, *names: str, key: Callable[[str], str] = _same) -> None:
    """Refuse a port field of ``names`` outside 0..65535 (0: any free port; None: no port)."""
    for name in names:
        value = getattr(config, name)
        if value is not None and not 0 <= value <= MAX_PORT:
            raise InvalidArgumentError(
                f"{key(name)} must be between 0 (any free port) and {MAX_PORT}, not {value!r}"
            )
