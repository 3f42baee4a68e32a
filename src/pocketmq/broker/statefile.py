"""Reading the broker's state files so that one bad byte never stops the broker from starting.

The files under ``<data-dir>/config/`` (docs/storage-format.md §10) are small JSON documents the
broker replaces atomically, so a crash never leaves half of one. What is left is damage from
outside: a flipped byte, an operator's hand edit, an entry written by an older version that the
current rules refuse (a topic containing ``@`` in an offset key, a group too long for its retry
topic). The rule, per entry and per file:

- **A bad entry** (it does not decode, or breaks a rule the broker enforces when the entry is
  created) is skipped with one log line naming the file and the entry; the original file is
  copied aside as ``<name>.corrupt-<UTC time>`` so nothing an operator might want is lost when
  the broker next saves the file without it.
- **A file that is not a JSON document of the expected shape at all** (or cannot be read) is
  moved aside as ``<name>.corrupt-<UTC time>``, logged at ERROR with what starting without it
  costs, and the broker starts with what it can recover. Each manager decides what that is;
  every choice errs towards delivering a message again, never towards losing one (§10).

The log lines are capped per file (the first few entries, then a count), so a file of a million
bad entries writes a handful of lines, not a million.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

__all__ = ["StateFile", "load_struct"]

log = logging.getLogger("pocketmq.broker")

T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)

_LOGGED_ENTRIES = 10  # per file; the rest are counted in the summary line
_ENTRY_TEXT = 120  # characters of a bad entry shown in the log


class StateFile:
    """One state file as found at start-up, read leniently.

    ``shape`` is the JSON document's top level (``dict`` or ``list``); ``without`` says, for the
    log, what starting without the file means (e.g. "pending transactions are checked again").
    Read the entries with :meth:`mapping` or :meth:`items`, decode each with :meth:`decode`,
    then call :meth:`finish`.
    """

    def __init__(self, path: str, shape: type[dict[Any, Any]] | type[list[Any]], without: str):
        self.path = path
        self.skipped = 0
        self.lost = False  # the whole file was unusable
        self.set_aside: str | None = None  # where it was moved
        self._without = without
        self._mapping: dict[str, msgspec.Raw] = {}
        self._items: list[msgspec.Raw] = []
        self._read(shape)

    @property
    def name(self) -> str:
        """The file's name, for log lines."""
        return os.path.basename(self.path)

    @property
    def damaged(self) -> bool:
        """Whether anything in the file was lost (an entry skipped, or the whole file)."""
        return self.skipped > 0 or self.lost

    def mapping(self) -> dict[str, msgspec.Raw]:
        """The entries of a ``dict``-shaped file, still encoded, to be decoded one by one."""
        return self._mapping

    def items(self) -> list[msgspec.Raw]:
        """The entries of a ``list``-shaped file, still encoded, to be decoded one by one."""
        return self._items

    def decode(
        self,
        raw: msgspec.Raw | bytes,
        kind: type[T] | Any,
        what: str,
        check: Callable[[T], str | None] | None = None,
    ) -> T | None:
        """``raw`` decoded as ``kind`` and accepted by ``check`` (which returns a problem or
        None), or None after logging the entry as skipped."""
        try:
            value: T = msgspec.json.decode(raw, type=kind)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self.skip(what, str(exc), raw)
            return None
        problem = check(value) if check is not None else None
        if problem is not None:
            self.skip(what, problem, raw)
            return None
        return value

    def decode_list(
        self,
        raw: msgspec.Raw | bytes,
        kind: type[T] | Any,
        what: str,
        check: Callable[[T], str | None] | None = None,
    ) -> list[T]:
        """A JSON array whose items are decoded one by one: a bad item is skipped alone."""
        items: list[msgspec.Raw] | None = self.decode(raw, list[msgspec.Raw], what)
        out: list[T] = []
        for number, item in enumerate(items or []):
            value = self.decode(item, kind, f"{what}[{number}]", check)
            if value is not None:
                out.append(value)
        return out

    def skip(self, what: str, why: str, raw: msgspec.Raw | bytes | None = None) -> None:
        """Count one bad entry; log it unless this file already logged enough of them."""
        self.skipped += 1
        if self.skipped <= _LOGGED_ENTRIES:
            shown = ""
            if raw is not None:
                text = bytes(raw).decode("utf-8", "replace")
                shown = f" = {text[:_ENTRY_TEXT]}{'...' if len(text) > _ENTRY_TEXT else ''}"
            log.warning("%s: skipped %s%s (%s)", self.path, what, shown, why)

    def finish(self) -> None:
        """After every entry was decoded: keep a copy of a file that had bad entries (the next
        save drops them) and log one summary line."""
        if not self.skipped or self.lost:
            return
        copy = _aside_name(self.path)
        try:
            shutil.copyfile(self.path, copy)
        except OSError as exc:
            copy = f"(not kept: {exc})"
        log.error(
            "%s: %d bad entr%s skipped (%s); the original file is kept as %s",
            self.path,
            self.skipped,
            "y" if self.skipped == 1 else "ies",
            self._without,
            copy,
        )

    # -- reading --------------------------------------------------------------------------

    def _read(self, shape: type[dict[Any, Any]] | type[list[Any]]) -> None:
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return
        except OSError as exc:
            self._move_aside(f"cannot be read: {exc}")
            return
        try:
            if shape is dict:
                self._mapping = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
            else:
                self._items = msgspec.json.decode(data, type=list[msgspec.Raw])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self._move_aside(f"is not a JSON {'object' if shape is dict else 'array'}: {exc}")

    def _move_aside(self, problem: str) -> None:
        self.lost = True
        aside = _aside_name(self.path)
        try:
            os.replace(self.path, aside)
        except OSError as exc:
            aside = f"(could not be moved: {exc})"
        else:
            self.set_aside = aside
        log.error(
            "broker state file %s %s; moved aside to %s and starting without it: %s",
            self.path,
            problem,
            aside,
            self._without,
        )


def load_struct(path: str, kind: type[S], without: str) -> S:
    """A state file holding one struct, field by field: a bad or unknown field is skipped (its
    default is used), a missing or unusable file gives the defaults."""
    state = StateFile(path, dict, without)
    fields = {f.encode_name: f for f in msgspec.structs.fields(kind)}
    values: dict[str, Any] = {}
    for key, raw in state.mapping().items():
        field = fields.get(key)
        if field is None:
            state.skip(f"field {key!r}", "unknown field", raw)
            continue
        value = state.decode(raw, field.type, f"field {key!r}")
        if value is not None:
            values[field.name] = value
    state.finish()
    return kind(**values)


def _aside_name(path: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    candidate = f"{path}.corrupt-{stamp}"
    number = 1
    while os.path.exists(candidate):
        candidate = f"{path}.corrupt-{stamp}-{number}"
        number += 1
    return candidate
