"""Small JSON state files (topics, groups, offsets, pop state), replaced atomically.

JSON because an operator may need to read them during an incident; atomic replacement because a
crash while saving must leave the previous version intact.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import msgspec

from pocketmq.store.files import atomic_write

__all__ = ["load_json", "save_json"]

T = TypeVar("T")


def save_json(path: str, value: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, msgspec.json.format(msgspec.json.encode(value), indent=1))


def load_json(path: str, kind: type[T], default: T) -> T:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return default
    return msgspec.json.decode(data, type=kind)
