"""What the dashboard can change, each checked like its CLI twin: a dead-letter redrive (dry run
first, then at a bounded rate), an offset reset, a retry-policy edit and a test message.

Each action takes plain values and returns plain values, so the HTML pages and ``/api/`` share
it; errors are :mod:`pocketmq.errors` classes, which the views turn into a 4xx with the message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pocketmq import properties as props
from pocketmq.broker import Broker, InboundMessage, ResetTarget, RetryPolicy
from pocketmq.broker.overview import DeadLetterRow, dead_letters
from pocketmq.broker.redrive import report_rows
from pocketmq.errors import STORED_CODES, InvalidArgumentError, error_from_code
from pocketmq.ids import new_message_id

__all__ = ["MAX_SELECTION", "RedriveLine", "redrive", "reset_offsets", "send_test", "update_policy"]

MAX_SELECTION = 1000  # dead letters per dashboard redrive (the CLI pages larger ones)


@dataclass(frozen=True, slots=True)
class RedriveLine:
    """The result for one selected dead letter: ``would resend`` (dry run), ``resent``,
    ``already`` (redriven before), ``missing`` or ``failed: ...``."""

    dlq_offset: int
    message_id: str
    status: str
    target_topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1


async def redrive(
    broker: Broker,
    group: str,
    offsets: list[int],
    *,
    target: str,
    rate: float,
    dry_run: bool,
    operator: str = "dashboard",
) -> list[RedriveLine]:
    """Resend the dead letters at ``offsets`` (or, with ``dry_run``, say what would happen) at
    most ``rate`` per second; each once (broker/redrive.py keeps the ledger)."""
    if not offsets:
        raise InvalidArgumentError("select at least one dead letter")
    if len(offsets) > MAX_SELECTION:
        raise InvalidArgumentError(
            f"select at most {MAX_SELECTION} dead letters at a time (or use `pocketmq dlq resend`)"
        )
    if target not in ("origin", "retry"):
        raise InvalidArgumentError("target must be origin or retry")
    if not 0 < rate <= 10_000:
        raise InvalidArgumentError("rate must be between 1 and 10000 messages per second")
    broker.require_group(group)
    if dry_run:
        return _dry_run(broker, group, offsets, target)
    lines: list[RedriveLine] = []
    chunk = max(1, int(rate))
    for start in range(0, len(offsets), chunk):
        if start:
            await asyncio.sleep(chunk / rate)
        report = await broker.redrive(
            group, offsets[start : start + chunk], target=target, operator=operator
        )
        lines += [RedriveLine(*row) for row in report_rows(report)]
    return lines


def _dry_run(broker: Broker, group: str, offsets: list[int], target: str) -> list[RedriveLine]:
    wanted = set(offsets)
    found: dict[int, DeadLetterRow] = {}
    for row in dead_letters(broker, group):
        if row.dlq_offset in wanted:
            found[row.dlq_offset] = row
            if len(found) == len(wanted):
                break
    lines = []
    for offset in offsets:
        hit = found.get(offset)
        if hit is None:
            lines.append(RedriveLine(offset, "", "missing"))
        elif hit.redriven:
            lines.append(RedriveLine(offset, hit.message_id, "already"))
        else:
            topic = hit.origin_topic if target == "origin" else f"%RETRY%{group}"
            lines.append(RedriveLine(offset, hit.message_id, "would resend", topic))
    return lines


def reset_offsets(
    broker: Broker, group: str, topic: str, to: str, at_ms: int
) -> list[dict[str, int]]:
    """Move ``group`` on ``topic`` (broker/resets.py); one line per queue."""
    try:
        target = ResetTarget(to)
    except ValueError:
        raise InvalidArgumentError("reset to time, earliest or latest") from None
    return [
        {"queue_id": m.queue_id, "before": m.before, "after": m.after}
        for m in broker.reset_offsets(group, topic, target, at_ms)
    ]


def update_policy(broker: Broker, group: str, max_retries: int, delays: list[float]) -> RetryPolicy:
    """Change a group's retry policy: how many retries, and their delays (empty: the broker's
    delay levels)."""
    if not -1 <= max_retries <= 10_000:
        raise InvalidArgumentError("max retries must be between -1 (forever) and 10000")
    if any(d <= 0 or d > broker.config.max_delay for d in delays):
        raise InvalidArgumentError(
            f"each delay must be above 0 and at most {broker.config.max_delay:g} s"
        )
    config = broker.require_group(group)
    policy = RetryPolicy(
        max_retries=max_retries,
        delays=tuple(delays),
        initial=config.retry.initial if not delays else 0.0,
        multiplier=config.retry.multiplier,
        maximum=config.retry.maximum,
    )
    updated = config.__class__(
        name=config.name,
        fifo=config.fifo,
        broadcast=config.broadcast,
        consume_from=config.consume_from,
        retry=policy,
        retry_queues=config.retry_queues,
    )
    return broker.create_group(updated).retry


async def send_test(broker: Broker, topic: str, body: str, tag: str, key: str) -> dict[str, object]:
    """Send one message through the broker's own send path (the send contract applies)."""
    properties = {props.MESSAGE_ID: new_message_id()}
    if tag:
        properties[props.TAGS] = tag
    if key:
        properties[props.KEYS] = key
    [outcome] = await broker.send(
        [InboundMessage(topic, body.encode(), properties)], producer_group="dashboard"
    )
    if outcome.code not in STORED_CODES:
        raise error_from_code(outcome.code, outcome.remark)
    return {
        "code": outcome.code.name,
        "remark": outcome.remark,
        "message_id": outcome.message_id,
        "queue_id": outcome.queue_id,
        "queue_offset": outcome.queue_offset,
    }
