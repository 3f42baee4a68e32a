"""The one number check every server configuration runs at construction.

Why one function: a setting must mean the same whether it came from ``pocketmq serve``'s TOML file
(``msgspec.convert`` builds the dataclass and runs its ``__post_init__``) or from Python
(embedders, tests, benchmarks). A check written per type once let ``BrokerConfig(max_long_poll=-5)``
through while ``-5.0`` was refused; this one looks at ints and floats alike.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from pocketmq.errors import InvalidArgumentError

__all__ = ["check_numbers"]


def check_numbers(config: Any) -> None:
    """Refuse (:class:`~pocketmq.errors.InvalidArgumentError`, a ``ValueError``) any number field
    of the dataclass ``config`` that is negative, infinite or NaN; ``bool`` fields and ``None``
    (a setting left unset) are not numbers here."""
    for item in fields(config):
        value = getattr(config, item.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not (math.isfinite(value) and value >= 0):
            raise InvalidArgumentError(
                f"{item.name} must be a finite, non-negative number, not {value!r}"
            )
