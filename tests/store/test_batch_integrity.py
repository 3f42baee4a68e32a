"""A record in the log is always dispatched, and a queue offset always names one record: a message
that cannot be stored is refused before anything of it reaches the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketmq.store import MessageStore, PutStatus, StoreMessage, faults
from pocketmq.store.faults import FaultRule

from .conftest import SMALL, message


def _ids(store: MessageStore, topic: str = "orders") -> list[str]:
    got = store.get_messages(topic, 0, 0, max_count=100)
    return [m.message_id for m in got.messages]


def test_a_queue_file_that_cannot_be_created_refuses_the_message_before_it_is_logged(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as store:
        store.put([message(0)])
        injector.arm(FaultRule(op="open", target="consumequeue", errno="EMFILE", count=2))
        [refused] = store.put([message(1, topic="payments")])
        assert refused.status is PutStatus.OUT_OF_RESOURCES
        assert "file descriptor" in refused.reason
        injector.arm(FaultRule(op="allocate", target="consumequeue", errno="ENOSPC"))
        [full] = store.put([message(2, topic="payments")])
        assert full.status is PutStatus.DISK_FULL
        # nothing of them is in the log: the next message takes offset 0, and a rebuild agrees
        [ok] = store.put([message(3, topic="payments")])
        assert (ok.status, ok.queue_offset) == (PutStatus.PUT_OK, 0)
        write_position = store.statistics().write_position
    (directory / "checkpoint").unlink()
    with MessageStore.open(str(directory), SMALL) as store:
        assert _ids(store, "payments") == ["MSG000003"]
        assert store.statistics().write_position == write_position


def test_a_batch_with_one_bad_message_stores_the_others_with_their_own_offsets(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "s"
    bad = [
        StoreMessage(topic="orders", queue_id=0, body=b"x", born_timestamp=-1),
        StoreMessage(topic="orders", queue_id=0, body=b"x", flags=2**32),
        StoreMessage(topic="orders", queue_id=0, body=b"x", reconsume_times=-3),
        StoreMessage(topic="orders", queue_id=0, body=b"x", properties={"k": 1}),  # type: ignore[dict-item]
        StoreMessage(topic="orders", queue_id=0, body=b"x", properties={"k": "\udc80"}),
    ]
    with MessageStore.open(str(directory), SMALL) as store:
        results = store.put([message(0), *bad, message(1)])
        assert [r.status for r in results] == [
            PutStatus.PUT_OK,
            *[PutStatus.MESSAGE_ILLEGAL] * len(bad),
            PutStatus.PUT_OK,
        ]
        assert [results[0].queue_offset, results[-1].queue_offset] == [0, 1]
        assert all(r.reason for r in results[1:-1])
    (directory / "checkpoint").unlink()
    with MessageStore.open(str(directory), SMALL) as store:
        assert _ids(store) == ["MSG000000", "MSG000001"]


def test_a_failed_consume_queue_write_after_the_log_write_stops_writes(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as store:
        store.put([message(0)])
        injector.arm(FaultRule(op="write", target="consumequeue", errno="EIO"))
        [unknown] = store.put([message(1)])
        # it is in the log but not in its queue: not acknowledged, and no later message may
        # take its offset, so writes stop until a restart dispatches it
        assert unknown.status is PutStatus.STORE_FAILED
        [refused] = store.put([message(2)])
        assert refused.status is PutStatus.STORE_FAILED
    faults.uninstall()
    with MessageStore.open(str(directory), SMALL) as store:
        assert _ids(store) == ["MSG000000", "MSG000001"]


@pytest.mark.parametrize(
    ("bad", "status", "reason"),
    [
        (dict(topic="bad topic"), PutStatus.MESSAGE_ILLEGAL, "must be 1-127 characters"),
        (dict(queue_id=2**31), PutStatus.MESSAGE_ILLEGAL, "queue id out of range"),
        (dict(body="text"), PutStatus.MESSAGE_ILLEGAL, "body must be bytes"),
        (dict(body=b"x" * (SMALL.max_message_size + 1)), PutStatus.MESSAGE_TOO_LARGE, "limit"),
        (dict(flags=-1), PutStatus.MESSAGE_ILLEGAL, "flags -1 out of range"),
        (dict(born_timestamp=2**64), PutStatus.MESSAGE_ILLEGAL, "born timestamp"),
        (dict(reconsume_times=2**32), PutStatus.MESSAGE_ILLEGAL, "reconsume count"),
        (dict(prepared_transaction_offset=-1), PutStatus.MESSAGE_ILLEGAL, "prepared transaction"),
        (dict(tag_code=2**64), PutStatus.MESSAGE_ILLEGAL, "tag code out of range"),
        (dict(born_host=b"x" * 4), PutStatus.MESSAGE_ILLEGAL, "born host must be empty"),
        # two rules broken: the first in the order above is named
        (dict(flags=-1, born_host=b"x"), PutStatus.MESSAGE_ILLEGAL, "flags -1 out of range"),
    ],
)
def test_every_field_rule_names_itself_also_for_a_topic_written_before(
    tmp_path: Path, bad: dict[str, object], status: PutStatus, reason: str
) -> None:
    """The writer checks a message of a topic it has seen in one expression and names the
    broken rule only on refusal (docs/benchmarks.md, "Broker send path, the append's Python
    calls"): each rule still refuses, with its own words, before anything is written."""
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        store.put([message(0)])  # the topic is known from here on
        fields: dict[str, object] = {"topic": "orders", "queue_id": 0, "body": b"x", **bad}
        results = store.put([StoreMessage(**fields), message(1)])  # type: ignore[arg-type]
        assert results[0].status is status
        assert reason in results[0].reason
        assert (results[1].status, results[1].queue_offset) == (PutStatus.PUT_OK, 1)
