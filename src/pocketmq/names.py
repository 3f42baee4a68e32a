"""Topic and consumer-group names: one rule for the SDK, the broker and its state files.

Why one module: a name the broker accepts must be storable, and so must every name derived from
it. The store keeps a record's topic in at most 127 bytes of ``[A-Za-z0-9_%|-]``
(docs/storage-format.md §1), and a consumer group owns two derived topics, ``%RETRY%<group>``
and ``%DLQ%<group>``. A group name the store cannot prefix would be accepted at creation and
fail much later, in the middle of delivering a retry, so the derived names are checked when the
group is created. The broker's state files key entries as ``group@topic@queue``, so ``@`` (and
anything else outside the alphabet) must never reach them. The SDK applies the same rule before
sending anything, so a typo fails at once with :class:`~pocketmq.errors.InvalidArgumentError`.
"""

from __future__ import annotations

import functools
import re
from typing import Final, TypeGuard

from pocketmq.errors import InvalidArgumentError

__all__ = [
    "DLQ_PREFIX",
    "HALF_TOPIC",
    "HISTORY_TOPIC",
    "MAX_GROUP_LENGTH",
    "MAX_NAME_LENGTH",
    "OP_TOPIC",
    "REDRIVE_AUDIT_TOPIC",
    "RETRY_PREFIX",
    "SCHEDULE_TOPIC",
    "SYSTEM_PREFIX",
    "SYSTEM_PREFIXES",
    "TIMER_TOPIC",
    "TOMBSTONE_TOPIC",
    "is_storable_topic",
    "validate_group_name",
    "validate_stored_topic",
    "validate_topic_name",
]

#: The store's limit for a record's topic (docs/storage-format.md §1).
MAX_NAME_LENGTH: Final = 127
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
#: The prefix of the broker's own topics, below (no user may create or send to one).
SYSTEM_PREFIX: Final = "%SYS%"
SYSTEM_PREFIXES: Final = (RETRY_PREFIX, DLQ_PREFIX, SYSTEM_PREFIX)

# The reserved topics, each written in this one place (the store, the broker's services and
# the pipeline's schemas all name them; docs/storage-format.md §1, docs/semantics.md).
#: A topic's end: a record whose body is the deleted topic's name (the store's tombstone).
TOMBSTONE_TOPIC: Final = SYSTEM_PREFIX + "TOMBSTONE"
#: The broker's attempt ledger: one queue per broker, one record per batch of attempts.
HISTORY_TOPIC: Final = SYSTEM_PREFIX + "HISTORY"
#: Delayed messages by delay level (one queue per level).
SCHEDULE_TOPIC: Final = SYSTEM_PREFIX + "SCHEDULE"
#: Messages due at an arbitrary time (the timer wheel's log).
TIMER_TOPIC: Final = SYSTEM_PREFIX + "TIMER"
#: Prepared (half) transactional messages, waiting for a commit or a rollback.
HALF_TOPIC: Final = SYSTEM_PREFIX + "TRANS_HALF"
#: The transactions' operation log: which half messages are decided.
OP_TOPIC: Final = SYSTEM_PREFIX + "TRANS_OP"
#: The audit trail of dead letters an operator re-sent.
REDRIVE_AUDIT_TOPIC: Final = SYSTEM_PREFIX + "REDRIVE"
#: The longest group name whose ``%RETRY%`` and ``%DLQ%`` topics still fit the store.
MAX_GROUP_LENGTH: Final = MAX_NAME_LENGTH - max(len(RETRY_PREFIX), len(DLQ_PREFIX))

_STORED: Final = re.compile(rf"[A-Za-z0-9_%|\-]{{1,{MAX_NAME_LENGTH}}}")
_ALPHABET: Final = "letters, digits, '_', '-', '|' or '%'"


def is_storable_topic(name: object) -> TypeGuard[str]:
    """Whether the store can keep records under ``name`` (system topics included); a true
    answer also tells a type checker that ``name`` is a string."""
    return isinstance(name, str) and _storable(name)


@functools.lru_cache(maxsize=4096)
def _storable(name: str) -> bool:
    # every send checks its topic: remembered, the answer costs a dictionary lookup
    return _STORED.fullmatch(name) is not None


def validate_stored_topic(name: object) -> None:
    """A topic a client may *name* (subscribe, commit an offset, peek): user topics and the
    broker's derived ones (``%RETRY%<group>``); whether it may be read is the broker's call."""
    if not is_storable_topic(name):
        raise _not_storable(name)


def _not_storable(name: object) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"topic name {name!r} must be 1-{MAX_NAME_LENGTH} characters of {_ALPHABET}"
    )


def validate_topic_name(name: object) -> None:
    """A topic a user may create: storable, and not one of the broker's reserved prefixes."""
    if not is_storable_topic(name):
        raise _not_storable(name)
    if name.startswith(SYSTEM_PREFIXES):
        raise InvalidArgumentError(f"topic name {name!r} uses a reserved prefix")


def validate_group_name(name: object) -> None:
    """A consumer group: storable, not reserved, and short enough that ``%RETRY%<group>`` and
    ``%DLQ%<group>`` are storable too (at most :data:`MAX_GROUP_LENGTH` characters)."""
    if not is_storable_topic(name):
        raise InvalidArgumentError(
            f"group name {name!r} must be 1-{MAX_GROUP_LENGTH} characters of {_ALPHABET}"
        )
    if name.startswith(SYSTEM_PREFIXES):
        raise InvalidArgumentError(f"group name {name!r} uses a reserved prefix")
    if len(name) > MAX_GROUP_LENGTH:
        raise InvalidArgumentError(
            f"group name {name[:24]!r}... is {len(name)} characters; at most {MAX_GROUP_LENGTH} "
            f"fit, because its retry and dead-letter topics ({RETRY_PREFIX}<group>, "
            f"{DLQ_PREFIX}<group>) must stay within the store's {MAX_NAME_LENGTH}-character "
            "topic limit"
        )
