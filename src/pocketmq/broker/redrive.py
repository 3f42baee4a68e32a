"""Dead-letter redrive: put messages from ``%DLQ%<group>`` back into circulation, once each.

The operator picks messages (the CLI filters by key, tag or time); the broker re-sends each one
with its original message id, either to its original topic (every group subscribed sees it again;
consumers deduplicate by id) or to the group's retry topic (only the failing group sees it).

**Once each, however redrives overlap or stop** (docs/semantics.md, "DLQ redrive"):

- Redrives of one group run one after the other (a lock per group), so two operators — or a
  retried request — cannot both find a dead letter not yet done and both resend it.
- Progress is recorded per message, as it goes: right after a dead letter's resend is appended
  to the commit log, in the same event-loop step and before anything else can run, its audit
  record is appended to ``%SYS%REDRIVE`` and it is marked done in memory. The audit topic is the
  journal; ``config/redrive.json`` is a snapshot of it (which dead letters of each group are done,
  and how far into the audit topic that covers), and on start the audit records past the
  snapshot are replayed. So a redrive that stops half-way — the client went away, the broker
  was stopped or killed — resends on the next run only what it had not resent.

Crash points, and the side each errs on: the log is written in order and recovers to a prefix,
so an audit record never survives without the resend before it. A crash between the two appends
(or an OS crash that keeps the resend but loses the audit record behind it) makes the next run
resend that one message again: a duplicate with the same message id, which consumers already
deduplicate (at-least-once). Nothing is ever marked done before its resend is in the log. The
snapshot only covers audit records the store has flushed, so it cannot claim a resend an OS crash
took back.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Protocol

import msgspec

from pocketmq import properties as props
from pocketmq.broker.history import AttemptHistory, Outcome
from pocketmq.broker.persist import save_json
from pocketmq.broker.statefile import StateFile
from pocketmq.broker.topics import dlq_topic, retry_topic
from pocketmq.errors import STORED_CODES, BrokerError
from pocketmq.model.messages import InboundMessage, SendOutcome
from pocketmq.names import REDRIVE_AUDIT_TOPIC
from pocketmq.store import MessageStore, PutResult, StoredMessage, StoreMessage

__all__ = [
    "REDRIVE_AUDIT_TOPIC",
    "RedriveLedger",
    "RedriveRecord",
    "RedriveService",
    "report_rows",
]

log = logging.getLogger("pocketmq.broker")

_STRIPPED = (props.RETRY_TOPIC, props.DLQ_REASON, props.REAL_TOPIC, props.REAL_QUEUE_ID)

#: One line of a redrive report: (DLQ offset, message id, status, send outcome).
ReportLine = tuple[int, str, str, SendOutcome | None]


def report_rows(report: list[ReportLine]) -> list[tuple[int, str, str, str, int, int]]:
    """A redrive report as the answers show it (native ``RedriveItem``, the dashboard's lines):
    (DLQ offset, message id, status, topic, queue id, queue offset), "" and -1 where nothing
    was sent."""
    return [
        (offset, message_id, status, outcome.topic, outcome.queue_id, outcome.queue_offset)
        if outcome
        else (offset, message_id, status, "", -1, -1)
        for offset, message_id, status, outcome in report
    ]


class SendNow(Protocol):
    """The broker's send path (Broker.send_now)."""

    def __call__(
        self, messages: Sequence[InboundMessage], *, redrive: bool = ...
    ) -> tuple[list[SendOutcome], int]: ...


AppendNow = Callable[[list[StoreMessage]], list[PutResult]]
Settle = Callable[[list[SendOutcome], int], Awaitable[list[SendOutcome]]]
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class RedriveRecord(msgspec.Struct, frozen=True):
    """The audit record of one resent dead letter (in ``%SYS%REDRIVE``): what was resent where, by
    whom and when; replaying these rebuilds what was redriven."""

    group: str
    dlq_offset: int
    message_id: str
    target_topic: str
    target_queue_id: int
    target_offset: int
    operator: str
    at_ms: int


class _Snapshot(msgspec.Struct):
    audit_offset: int = 0  # audit records below this queue offset are in ``groups``
    groups: dict[str, list[int]] = {}


class RedriveLedger:
    """Which dead letters of each group were re-sent: redrive.json plus the audit topic."""

    def __init__(self, config_dir: str, store: MessageStore) -> None:
        self._path = os.path.join(config_dir, "redrive.json")
        self._store = store
        self._done: dict[str, set[int]] = {}
        self._durable: dict[str, set[int]] = {}  # what the next snapshot may claim
        # audit records appended since the last snapshot: (queue offset, log end, group, offset)
        self._unflushed: collections.deque[tuple[int, int, str, int]] = collections.deque()
        snapshot = self._load()
        for group, offsets in snapshot.groups.items():
            self._durable.setdefault(group, set()).update(offsets)
            self._done.setdefault(group, set()).update(offsets)
        self._replay(snapshot.audit_offset)
        self._covered = store.max_offset(REDRIVE_AUDIT_TOPIC, 0)
        self._locks: dict[str, asyncio.Lock] = {}

    def done(self, group: str, dlq_offset: int) -> bool:
        """Whether the dead letter at ``dlq_offset`` of ``group`` was already resent."""
        return dlq_offset in self._done.get(group, ())

    def offsets(self, group: str) -> set[int]:
        """Every DLQ offset of ``group`` already resent."""
        return set(self._done.get(group, ()))

    def lock(self, group: str) -> asyncio.Lock:
        """Held for the whole of a redrive of ``group``."""
        lock = self._locks.get(group)
        if lock is None:
            lock = self._locks[group] = asyncio.Lock()
        return lock

    def mark(self, group: str, dlq_offset: int, audit: PutResult) -> None:
        """``dlq_offset`` was resent; ``audit`` is where its audit record went (when the store
        refused it, only this process remembers the resend)."""
        self._done.setdefault(group, set()).add(dlq_offset)
        if audit.status.stored:
            self._unflushed.append(
                (audit.queue_offset, audit.physical_offset + audit.size, group, dlq_offset)
            )

    def save(self) -> None:
        """Write the snapshot: every audit record the store has flushed is folded in."""
        flushed = self._store.statistics().flushed_position
        while self._unflushed and self._unflushed[0][1] <= flushed:
            queue_offset, _, group, dlq_offset = self._unflushed.popleft()
            self._durable.setdefault(group, set()).add(dlq_offset)
            self._covered = queue_offset + 1
        if not self._unflushed:
            self._covered = max(self._covered, self._store.max_offset(REDRIVE_AUDIT_TOPIC, 0))
        snapshot = _Snapshot(self._covered, {g: sorted(o) for g, o in self._durable.items()})
        save_json(self._path, snapshot)

    # -- start-up -------------------------------------------------------------------------

    def _load(self) -> _Snapshot:
        state = StateFile(
            self._path,
            dict,
            "what was re-driven is read again from the audit topic " + REDRIVE_AUDIT_TOPIC,
        )
        fields = state.mapping()
        snapshot = _Snapshot()
        if fields and set(fields) <= {"audit_offset", "groups"}:
            snapshot.audit_offset = (
                state.decode(fields.get("audit_offset", b"0"), _NonNegative, "audit_offset") or 0
            )
            groups = state.decode(fields.get("groups", b"{}"), dict[str, msgspec.Raw], "groups")
            entries = groups or {}
        else:  # the first version's layout: {group: [offsets]}; its audit topic is replayed
            entries = fields
        for group, raw in entries.items():
            snapshot.groups[group] = state.decode_list(raw, _NonNegative, f"group {group!r}")
        state.finish()
        if state.damaged:
            snapshot.audit_offset = 0  # the snapshot cannot be trusted to cover anything
        return snapshot

    def _replay(self, offset: int) -> None:
        """Mark what the audit records from queue offset ``offset`` on say was re-sent (they
        survived a restart: the next snapshot may claim them)."""
        offset = max(offset, self._store.min_offset(REDRIVE_AUDIT_TOPIC, 0))
        bad = 0
        while True:
            try:
                got = self._store.get_messages(REDRIVE_AUDIT_TOPIC, 0, offset, max_count=1024)
            except Exception as exc:  # a damaged record: the start must not fail over it
                log.error(
                    "the redrive audit topic cannot be read from offset %d (%s); dead letters "
                    "re-driven after that point may be resent once more",
                    offset,
                    exc,
                )
                break
            for message in got.messages:
                try:
                    record = msgspec.json.decode(message.body, type=RedriveRecord)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    bad += 1
                    continue
                self._done.setdefault(record.group, set()).add(record.dlq_offset)
                self._durable.setdefault(record.group, set()).add(record.dlq_offset)
            if got.next_offset <= offset:
                break
            offset = got.next_offset
        if bad:
            log.warning("%d unreadable audit records in %s skipped", bad, REDRIVE_AUDIT_TOPIC)


class RedriveService:
    """Runs redrive requests (see the module docstring); the broker supplies how to send."""

    def __init__(
        self,
        store: MessageStore,
        config_dir: str,
        *,
        send_now: SendNow,
        append_now: AppendNow,
        settle: Settle,
        history: AttemptHistory,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self.ledger = RedriveLedger(config_dir, store)
        self._send_now = send_now
        self._append_now = append_now
        self._settle = settle
        self._history = history
        self._clock = clock

    async def redrive(
        self, group: str, dlq_offsets: Sequence[int], target: str, operator: str
    ) -> list[ReportLine]:
        """Resend the given dead letters of ``group``, one redrive per group at a time, recording
        each as done in the same step as its resend (docs/semantics.md, "Consumer retry, delays and
        dead letters")."""
        async with self.ledger.lock(group):
            try:
                return [await self._one(group, offset, target, operator) for offset in dlq_offsets]
            finally:
                self.ledger.save()

    async def _one(self, group: str, offset: int, target: str, operator: str) -> ReportLine:
        dlq = dlq_topic(group)
        message = self._message_at(dlq, offset)
        if message is None:
            return (offset, "", "missing", None)
        if self.ledger.done(group, offset):
            return (offset, message.message_id, "already", None)
        properties = {k: v for k, v in message.properties.items() if k not in _STRIPPED}
        origin = message.properties.get(props.RETRY_TOPIC, "")
        destination = retry_topic(group) if target == "retry" else origin
        if target == "retry":
            properties[props.RETRY_TOPIC] = origin
        resend = InboundMessage(
            destination, message.body, properties, -1, message.flags, message.born_timestamp
        )
        try:
            [outcome], durable_end = self._send_now([resend], redrive=True)
        except BrokerError as exc:  # flow control, shutting down: this one was not sent
            return (offset, message.message_id, f"failed: {exc}", None)
        if outcome.code not in STORED_CODES:
            return (offset, message.message_id, f"failed: {outcome.remark}", outcome)
        # From here to the mark nothing awaits: the resend, its audit record and the mark are
        # one step (module docstring, crash points).
        record = RedriveRecord(
            group,
            offset,
            message.message_id,
            destination,
            outcome.queue_id,
            outcome.queue_offset,
            operator,
            int(self._clock() * 1000),
        )
        [audit] = self._append_now(
            [
                StoreMessage(
                    topic=REDRIVE_AUDIT_TOPIC,
                    queue_id=0,
                    body=msgspec.json.encode(record),
                    properties={props.KEYS: f"{group} {message.message_id}"},
                )
            ]
        )
        self.ledger.mark(group, offset, audit)
        if not audit.status.stored:
            log.warning(
                "the audit record of re-driven message %s (group %s) could not be stored (%s); "
                "a restart may resend it once more",
                message.message_id,
                group,
                audit.reason or audit.status.value,
            )
        elif durable_end:
            durable_end = max(durable_end, audit.physical_offset + audit.size)
        self._history.record(
            message_id=message.message_id,
            group=group,
            topic=destination,
            attempt=message.reconsume_times + 1,
            outcome=Outcome.REDRIVEN,
            consumer=operator,
            error=f"resent from {dlq} offset {offset}",
            message_group=message.properties.get(props.MESSAGE_GROUP, ""),
        )
        if durable_end:
            [outcome] = await self._settle([outcome], durable_end)
        return (offset, message.message_id, "resent", outcome)

    def _message_at(self, topic: str, offset: int) -> StoredMessage | None:
        got = self._store.get_messages(topic, 0, offset, max_count=1)
        if got.messages and got.messages[0].queue_offset == offset:
            return got.messages[0]
        return None
